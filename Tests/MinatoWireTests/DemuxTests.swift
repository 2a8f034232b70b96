import Testing
@testable import MinatoWire

@Suite struct DemuxTests {
    func kind(_ bytes: [UInt8]) -> PacketKind { withBytes(bytes) { classifyPacket($0) } }

    @Test func emptyIsUnknown() {
        #expect(kind([]) == .unknown)
    }

    @Test(arguments: [
        (UInt8(0), PacketKind.stun), (3, .stun), (4, .unknown), (19, .unknown), (20, .dtls),
        (63, .dtls), (64, .unknown), (127, .unknown), (128, .rtp), (191, .rtp), (192, .unknown),
        (255, .unknown),
    ])
    func firstByteRanges(first: UInt8, expected: PacketKind) {
        // Second byte 96 (an RTP payload type) so 128...191 classify as RTP.
        #expect(kind([first, 96, 0, 0]) == expected)
    }

    @Test func rtcpByPayloadTypeRange() {
        for pt in 0...255 {
            let b = UInt8(pt)
            let expected: PacketKind = (64...95).contains(b & 0x7F) ? .rtcp : .rtp
            #expect(kind([0x80, b, 0, 0]) == expected, "second byte \(pt)")
        }
        #expect(kind([0x81, 200]) == .rtcp)  // SR
        #expect(kind([0x81, 205]) == .rtcp)  // RTPFB
        #expect(kind([0x80, 111]) == .rtp)  // opus
        #expect(kind([0x80, 0xE0]) == .rtp)  // marker set, PT 96
    }

    @Test func shortRtpRangeIsUnknown() {
        #expect(kind([0x80]) == .unknown)
        #expect(kind([0x00]) == .stun)
        #expect(kind([0x16]) == .dtls)
    }
}
