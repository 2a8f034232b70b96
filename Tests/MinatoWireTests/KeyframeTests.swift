import Testing
@testable import MinatoWire

@Suite struct KeyframeTests {
    func key(_ codec: VideoCodecKind, _ bytes: [UInt8]) -> Bool {
        withBytes(bytes) { isKeyframe(codec: codec, payload: $0) }
    }

    @Test func vp8() {
        // Minimal descriptor: S=1, PID=0; VP8 header byte P=0 (key frame), then start code.
        #expect(key(.vp8, [0x10, 0x50, 0x01, 0x00, 0x9D, 0x01, 0x2A]))
        // Inter frame: P bit set.
        #expect(!key(.vp8, [0x10, 0x51, 0x01, 0x00]))
        // Not the start of a partition.
        #expect(!key(.vp8, [0x00, 0x50]))
        // S=1 but partition 1.
        #expect(!key(.vp8, [0x11, 0x50]))
        // Extended: X=1, I=1 with 15-bit picture id (M=1), L=1, T=1.
        #expect(key(.vp8, [0x90, 0xE0, 0x80 | 0x12, 0x34, 0x05, 0x40, 0x50]))
        #expect(!key(.vp8, [0x90, 0xE0, 0x80 | 0x12, 0x34, 0x05, 0x40, 0x51]))
        // Extended with 7-bit picture id only.
        #expect(key(.vp8, [0x90, 0x80, 0x12, 0x50]))
        // K bit alone also adds the TID/KEYIDX byte.
        #expect(key(.vp8, [0x90, 0x10, 0xFF, 0x50]))
        // Truncated descriptors.
        #expect(!key(.vp8, []))
        #expect(!key(.vp8, [0x10]))
        #expect(!key(.vp8, [0x90]))
        #expect(!key(.vp8, [0x90, 0x80]))
        #expect(!key(.vp8, [0x90, 0x80, 0x92, 0x34]))
        #expect(!key(.vp8, [0x90, 0xE0, 0x80 | 0x12, 0x34, 0x05, 0x40]))
    }

    @Test func vp9() {
        // I=1 P=0 L=0 F=0 B=1 E=0 V=1: keyframe start with scalability structure.
        #expect(key(.vp9, [0x8A, 0x80, 0x01]))
        // P=1: inter-picture predicted.
        #expect(!key(.vp9, [0xCA, 0x80, 0x01]))
        // B=0: not the start of a frame.
        #expect(!key(.vp9, [0x84]))
        #expect(!key(.vp9, []))
    }

    @Test func h264() {
        #expect(key(.h264, [0x65, 0x88]))  // IDR slice
        #expect(key(.h264, [0x67, 0x42]))  // SPS
        #expect(!key(.h264, [0x68, 0xCE]))  // PPS alone
        #expect(!key(.h264, [0x41, 0x9A]))  // non-IDR slice
        // STAP-A: SPS + PPS.
        #expect(key(.h264, [0x78, 0x00, 0x02, 0x67, 0x42, 0x00, 0x02, 0x68, 0xCE]))
        // STAP-A: PPS then IDR.
        #expect(key(.h264, [0x78, 0x00, 0x02, 0x68, 0xCE, 0x00, 0x01, 0x65]))
        // STAP-A: SEI + non-IDR only.
        #expect(!key(.h264, [0x78, 0x00, 0x01, 0x06, 0x00, 0x02, 0x41, 0x9A]))
        // STAP-A with a size running past the end.
        #expect(!key(.h264, [0x78, 0x00, 0x09, 0x67]))
        // STAP-A with a zero size.
        #expect(!key(.h264, [0x78, 0x00, 0x00, 0x67]))
        // FU-A start of an IDR, middle of an IDR, start of a non-IDR.
        #expect(key(.h264, [0x7C, 0x85, 0x88]))
        #expect(!key(.h264, [0x7C, 0x05, 0x88]))
        #expect(!key(.h264, [0x7C, 0x81, 0x9A]))
        #expect(!key(.h264, [0x7C]))
        #expect(!key(.h264, []))
    }

    @Test func av1() {
        #expect(key(.av1, [0x18, 0x0A]))  // W=1, N=1
        #expect(!key(.av1, [0x10, 0x30]))  // N=0
        #expect(!key(.av1, []))
    }

    @Test func otherNever() {
        #expect(!key(.other, [0x65, 0xFF]))
    }

    @Test func codecFromEncodingName() {
        #expect(VideoCodecKind(encodingName: "VP8") == .vp8)
        #expect(VideoCodecKind(encodingName: "vp9") == .vp9)
        #expect(VideoCodecKind(encodingName: "H264") == .h264)
        #expect(VideoCodecKind(encodingName: "AV1") == .av1)
        #expect(VideoCodecKind(encodingName: "rtx") == .other)
    }

    @Test func everyPrefixNeverTraps() {
        let samples: [[UInt8]] = [
            [0x90, 0xE0, 0x80 | 0x12, 0x34, 0x05, 0x40, 0x50], [0x78, 0x00, 0x02, 0x67, 0x42, 0x00, 0x02, 0x68, 0xCE],
            [0x7C, 0x85, 0x88], [0x8A, 0x80], [0x18],
        ]
        for s in samples {
            for n in 0...s.count {
                for c in [VideoCodecKind.vp8, .vp9, .h264, .av1, .other] { _ = key(c, Array(s[..<n])) }
            }
        }
    }
}
