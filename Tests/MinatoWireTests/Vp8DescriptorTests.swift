import Testing
@testable import MinatoWire

/// The VP8 payload descriptor fields a simulcast SFU rewrites (RFC 7741 §4.2).
@Suite struct Vp8DescriptorTests {
    @Test func readsAndWritesPictureIdTl0AndTid() throws {
        // X=1 S=1; I L T set; 15-bit PictureID 0x1234; TL0PICIDX 7; TID 2 Y=1; then the VP8 header.
        var p: [UInt8] = [0x90, 0xE0, 0x92, 0x34, 0x07, 0xA0, 0x00]
        p.withUnsafeMutableBytes { b in
            let r = UnsafeRawBufferPointer(b)
            guard let d = Vp8PayloadDescriptor(r) else { Issue.record("did not parse"); return }
            #expect(d.pictureId(in: r) == 0x1234 && d.tl0PicIdx(in: r) == 7 && d.temporalLayer(in: r) == 2)
            d.setPictureId(0x7FFF &+ 2, in: b)          // wraps to 15 bits, M bit kept
            d.setTl0PicIdx(255, in: b)
        }
        #expect(p == [0x90, 0xE0, 0x80, 0x01, 0xFF, 0xA0, 0x00])
    }

    @Test func sevenBitPictureIdAndAbsentFields() throws {
        var p: [UInt8] = [0x90, 0x80, 0x7F, 0x01]
        p.withUnsafeMutableBytes { b in
            let r = UnsafeRawBufferPointer(b)
            let d = Vp8PayloadDescriptor(r)
            #expect(d?.pictureId(in: r) == 0x7F && d?.tl0PicIdx(in: r) == nil && d?.temporalLayer(in: r) == nil)
            d?.setPictureId(0x80, in: b)
        }
        #expect(p[2] == 0x00)
        let plain: [UInt8] = [0x10, 0x00]
        plain.withUnsafeBytes { #expect(Vp8PayloadDescriptor($0)?.pictureId(in: $0) == nil) }
    }

    @Test func truncatedDescriptorsAreNil() {
        for bytes: [UInt8] in [[], [0x80], [0x90, 0x80], [0x90, 0x80, 0x80], [0x90, 0xE0, 0x92, 0x34, 0x07], [0x90, 0xE0, 0x92, 0x34, 0x07, 0xA0]] {
            bytes.withUnsafeBytes { #expect(Vp8PayloadDescriptor($0) == nil) }
        }
    }
}
