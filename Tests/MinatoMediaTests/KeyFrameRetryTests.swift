import Testing
@testable import MinatoMedia
import MinatoWire

/// A keyframe request that brought no keyframe is sent again (the PLI or the keyframe's first
/// packet may have been lost), but not to a publisher that sends nothing at all.
@Suite struct KeyFrameRetryTests {
    @Test func aRequestIsRetriedEverySecondUntilAKeyFrameArrives() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        let firstAt = h.now
        #expect(h.drain().filter(\.isPli).count == 1)
        var retries: [Nanoseconds] = []
        for _ in 0..<70 {                                  // 2.3 s of delta frames
            h.send()
            if let due = h.engine.nextDeadline, due <= h.now {
                h.engine.handleTimeout(now: h.now)
                if !h.drain().filter(\.isPli).isEmpty { retries.append(h.now - firstAt) }
            }
        }
        #expect(retries.count == 2)
        #expect(retries.allSatisfy { $0 >= 1_000_000_000 })
        #expect(h.engine.keyFrameRequests(.retry) == 2 && h.engine.keyFrameRequests(.consumerStart) == 1)
        // The keyframe ends it.
        #expect(h.send(keyframe: true).count == 1)
        for _ in 0..<60 {
            h.send()
            h.engine.handleTimeout(now: h.now)
            #expect(h.drain().filter(\.isPli).isEmpty)
        }
    }

    @Test func aSubscriberPliIsCountedByCause() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        _ = h.drain()
        h.now &+= 600_000_000
        var pli = [UInt8](repeating: 0, count: 12)
        _ = pli.withUnsafeMutableBytes { RtcpWriter.pli(into: $0, senderSsrc: 0x77, mediaSsrc: 0xB0B0) }
        pli.withUnsafeBytes { h.engine.handleRtcp(from: b, packet: $0, now: h.now) }
        #expect(h.drain().filter(\.isPli).count == 1)
        #expect(h.engine.keyFrameRequests(.subscriber) == 1)
    }
}
