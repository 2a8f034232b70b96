import Testing
@testable import MinatoClient
import MinatoWire

/// The synthetic audio source's packets as the server reads them: with a level, an RFC 8285
/// one-byte extension element carrying the RFC 6464 byte, and the payload stamp after it.
@Suite struct SyntheticAudioSourceTests {
    func firstPacket(_ source: SyntheticAudioSource) -> [UInt8] {
        var out: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500, alignment: 8)
        defer { buffer.deallocate() }
        source.poll(now: 1_000_000_000, buffer: buffer) { n in if out.isEmpty { out = Array(buffer[0..<n]) } }
        return out
    }

    @Test func aLevelRidesInTheAudioLevelExtension() throws {
        let source = SyntheticAudioSource(packetSize: 100, audioLevel: 30)
        #expect(source.audioLevelExtensionId == SyntheticAudioSource.levelExtensionId)
        var bytes = firstPacket(source)
        #expect(bytes.count == 100)   // the whole packet: the extension takes from the payload
        try bytes.withUnsafeMutableBytes { b in
            let view = try #require(RtpPacketView(b))
            let value = try #require(view.extensionValue(id: SyntheticAudioSource.levelExtensionId))
            #expect(Array(value) == [0x80 | 30])
            let payload = UnsafeRawBufferPointer(view.payload)
            #expect(payload.first == 0xFC)
            #expect(PayloadStamp.read(payload, offset: 1)?.sentAt == 1_000_000_000)
        }
    }

    @Test func withoutALevelThereIsNoExtension() throws {
        let source = SyntheticAudioSource(packetSize: 100)
        #expect(source.audioLevelExtensionId == nil)
        var bytes = firstPacket(source)
        #expect(bytes.count == 100 && bytes[0] & 0x10 == 0 && bytes[12] == 0xFC)
    }
}
