import Testing
@testable import MinatoMedia
import MinatoWire

/// A receive-only subscriber's RTCP XR reference time is answered at once with a DLRR echoing
/// it, sent as one of our streams on that transport (how a browser learns its round-trip time).
@Suite struct ReferenceTimeTests {
    @Test func anRrtrIsAnsweredWithADlrrEchoingIt() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        _ = h.drain()
        var xr = [UInt8](repeating: 0, count: 20)
        let ntp: UInt64 = 0xE100_0000_ABCD_0000
        _ = xr.withUnsafeMutableBytes { RtcpWriter.receiverReferenceTime(into: $0, senderSsrc: 0x5555, ntpTimestamp: ntp) }
        xr.withUnsafeBytes { h.engine.handleRtcp(from: b, packet: $0, now: h.now) }
        let out = h.drain()
        #expect(out.count == 1 && out[0].transport == b && out[0].isRtcp)
        let bytes = try #require(out.first?.bytes)
        #expect(bytes.count == 24 && bytes[1] == ExtendedReport.packetType && bytes[8] == 5)
        func u32(_ o: Int) -> UInt32 { bytes[o..<o + 4].reduce(0) { $0 << 8 | UInt32($1) } }
        #expect(u32(4) == 0xB0B0)                                      // as our stream
        #expect(u32(12) == 0x5555)                                     // to the receiver that asked
        #expect(u32(16) == UInt32(truncatingIfNeeded: ntp >> 16) && u32(20) == 0)
        #expect(h.engine.drops(.malformedRtcp) == 0)
    }
}
