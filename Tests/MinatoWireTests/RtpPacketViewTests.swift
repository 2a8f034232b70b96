import Testing
@testable import MinatoWire

/// Builds an RTP packet by hand.
func rtpPacket(
    marker: Bool = false, pt: UInt8 = 96, seq: UInt16 = 0x1234, ts: UInt32 = 0xDEAD_BEEF,
    ssrc: UInt32 = 0x0102_0304, csrcs: [UInt32] = [], extensionProfile: UInt16? = nil,
    extensionData: [UInt8] = [], payload: [UInt8] = [1, 2, 3, 4, 5], padding: Int = 0
) -> [UInt8] {
    var b: [UInt8] = []
    var b0: UInt8 = 0x80 | UInt8(csrcs.count)
    if extensionProfile != nil { b0 |= 0x10 }
    if padding > 0 { b0 |= 0x20 }
    b.append(b0)
    b.append((marker ? 0x80 : 0) | pt)
    b += be16(seq) + be32(ts) + be32(ssrc)
    for c in csrcs { b += be32(c) }
    if let p = extensionProfile {
        precondition(extensionData.count % 4 == 0)
        b += be16(p) + be16(UInt16(extensionData.count / 4)) + extensionData
    }
    b += payload
    if padding > 0 { b += [UInt8](repeating: 0, count: padding - 1) + [UInt8(padding)] }
    return b
}

@Suite struct RtpPacketViewTests {
    @Test func minimalHeaderFields() throws {
        let bytes = rtpPacket(marker: true, pt: 111, seq: 65535, ts: 123_456, ssrc: 0xCAFE_BABE)
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.version == 2)
            #expect(v.marker)
            #expect(v.payloadType == 111)
            #expect(v.sequenceNumber == 65535)
            #expect(v.timestamp == 123_456)
            #expect(v.ssrc == 0xCAFE_BABE)
            #expect(v.headerLength == 12)
            #expect(v.payloadLength == 5)
            #expect(Array(v.payload) == [1, 2, 3, 4, 5])
            #expect(!v.hasPadding)
            #expect(!v.hasExtension)
            #expect(v.extensionProfile == nil)
            #expect(v.buffer.count == bytes.count)
            #expect(v.extensionValue(id: 1) == nil)
        }
    }

    @Test func settersWriteInPlaceAndKeepNeighbours() throws {
        let bytes = rtpPacket(marker: false, pt: 96, csrcs: [7])
        let (_, out) = try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            v.marker = true
            #expect(v.payloadType == 96)
            v.payloadType = 0xFF  // masked to 7 bits
            #expect(v.payloadType == 127)
            #expect(v.marker)
            v.payloadType = 100
            v.marker = false
            #expect(v.payloadType == 100)
            #expect(!v.marker)
            v.marker = true
            v.sequenceNumber = 0xABCD
            v.timestamp = 0x1122_3344
            v.ssrc = 0x5566_7788
            #expect(v.sequenceNumber == 0xABCD)
            #expect(v.timestamp == 0x1122_3344)
            #expect(v.ssrc == 0x5566_7788)
            #expect(v.csrc(at: 0) == 7)
            #expect(v.csrc(at: 1) == nil)
        }
        #expect(Array(out[0..<12]) == [0x81, 0x80 | 100, 0xAB, 0xCD, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88])
        #expect(Array(out[12...]) == be32(7) + [1, 2, 3, 4, 5])
    }

    @Test func csrcsAndPadding() throws {
        let bytes = rtpPacket(csrcs: [1, 2, 3], payload: [9, 9, 9], padding: 4)
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.csrcCount == 3)
            #expect(v.headerLength == 24)
            #expect(v.hasPadding)
            #expect(v.paddingLength == 4)
            #expect(v.payloadLength == 3)
            #expect(Array(v.payload) == [9, 9, 9])
            #expect(v.csrc(at: 2) == 3)
        }
    }

    @Test func paddingOnlyPacket() throws {
        // A padding probe: no payload, 10 padding bytes.
        let bytes = rtpPacket(payload: [], padding: 10)
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.payloadLength == 0)
            #expect(v.payload.count == 0)
        }
    }

    @Test func badPaddingRejected() {
        var bytes = rtpPacket(payload: [1, 2], padding: 1)
        bytes[bytes.count - 1] = 0  // zero padding count
        #expect(withPacket(bytes) { RtpPacketView($0) == nil }.0)
        bytes[bytes.count - 1] = 4  // more than payload+padding
        #expect(withPacket(bytes) { RtpPacketView($0) == nil }.0)
        bytes[bytes.count - 1] = 3  // exactly payload+padding: fine, payload empty
        #expect(withPacket(bytes) { RtpPacketView($0)?.payloadLength }.0 == 0)
    }

    @Test func versionMustBeTwo() {
        for version: UInt8 in [0, 1, 3] {
            var bytes = rtpPacket()
            bytes[0] = (bytes[0] & 0x3F) | version << 6
            #expect(withPacket(bytes) { RtpPacketView($0) == nil }.0)
        }
    }

    static let oneByteExt: [UInt8] = [
        0x10, 0xAA,  // id 1, len 1: value [AA]
        0x00,  // padding
        0x22, 0x01, 0x02, 0x03,  // id 2, len 3
        0xE0, 0x77,  // id 14, len 1
        0x00, 0x00, 0x00,
    ]

    static let twoByteExt: [UInt8] = [
        0x01, 0x01, 0xAA,  // id 1, len 1
        0x00,  // padding
        0x02, 0x00,  // id 2, len 0
        0x10, 0x03, 0x01, 0x02, 0x03,  // id 16, len 3
        0xFF, 0x02, 0x44, 0x55,  // id 255, len 2
        0x00,
    ]

    @Test func oneByteExtensions() throws {
        let bytes = rtpPacket(csrcs: [42], extensionProfile: 0xBEDE, extensionData: Self.oneByteExt)
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.headerLength == 12 + 4 + 4 + 12)
            #expect(v.extensionProfile == 0xBEDE)
            #expect(v.extensionValue(id: 1).map(Array.init) == [0xAA])
            #expect(v.extensionValue(id: 2).map(Array.init) == [1, 2, 3])
            #expect(v.extensionValue(id: 14).map(Array.init) == [0x77])
            #expect(v.extensionValue(id: 3) == nil)
            #expect(v.extensionValue(id: 0) == nil)
            #expect(v.extensionValue(id: 15) == nil)
            #expect(Array(v.payload) == [1, 2, 3, 4, 5])
        }
    }

    @Test func twoByteExtensions() throws {
        let bytes = rtpPacket(extensionProfile: 0x1000, extensionData: Self.twoByteExt)
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.extensionValue(id: 1).map(Array.init) == [0xAA])
            #expect(v.extensionValue(id: 2).map(Array.init) == [])
            #expect(v.extensionValue(id: 16).map(Array.init) == [1, 2, 3])
            #expect(v.extensionValue(id: 255).map(Array.init) == [0x44, 0x55])
            #expect(v.extensionValue(id: 3) == nil)
        }
        // 0x100X: low nibble is app bits, still the two-byte form.
        let other = rtpPacket(extensionProfile: 0x100F, extensionData: Self.twoByteExt)
        try withPacket(other) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.extensionValue(id: 255).map(Array.init) == [0x44, 0x55])
        }
    }

    @Test func unknownProfileHasNoElements() throws {
        let bytes = rtpPacket(extensionProfile: 0x1234, extensionData: [0x10, 0xAA, 0, 0])
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.extensionValue(id: 1) == nil)
            v.remapExtensionIds(.eraseAll)  // no effect
        }
        #expect(withPacket(bytes) { _ in 0 }.1 == bytes)
    }

    @Test func oneByteStopsAtId15AndOverrun() throws {
        // id 15 stops parsing; element after it is not seen.
        let stop = rtpPacket(extensionProfile: 0xBEDE, extensionData: [0xF0, 0x00, 0x10, 0xAA])
        try withPacket(stop) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.extensionValue(id: 1) == nil)
        }
        // id 1 claims 16 bytes in a 4-byte block.
        let overrun = rtpPacket(extensionProfile: 0xBEDE, extensionData: [0x1F, 0x00, 0x00, 0x00])
        try withPacket(overrun) { buf in
            let v = try #require(RtpPacketView(buf))
            #expect(v.extensionValue(id: 1) == nil)
            v.remapExtensionIds(.identity)
        }
    }

    @Test func remapOneByte() throws {
        var map = ExtensionIdMap()
        map[1] = 5  // rename
        map[2] = 0  // erase
        map[14] = 14
        let bytes = rtpPacket(extensionProfile: 0xBEDE, extensionData: Self.oneByteExt)
        let (_, out) = try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            v.remapExtensionIds(map)
            #expect(v.extensionValue(id: 5).map(Array.init) == [0xAA])
            #expect(v.extensionValue(id: 1) == nil)
            #expect(v.extensionValue(id: 2) == nil)
            #expect(v.extensionValue(id: 14).map(Array.init) == [0x77])
        }
        #expect(out.count == bytes.count)
        let ext = Array(out[16..<28])
        #expect(ext == [0x50, 0xAA, 0x00, 0x00, 0x00, 0x00, 0x00, 0xE0, 0x77, 0, 0, 0])
        // Payload untouched.
        #expect(Array(out[28...]) == [1, 2, 3, 4, 5])
    }

    @Test func remapOneByteToInvalidTargetErases() throws {
        var map = ExtensionIdMap()
        map[1] = 15  // 15 is not a valid one-byte id: erase
        let bytes = rtpPacket(extensionProfile: 0xBEDE, extensionData: [0x10, 0xAA, 0x20, 0xBB])
        let (_, out) = try withPacket(bytes) { buf in try #require(RtpPacketView(buf)).remapExtensionIds(map) }
        #expect(Array(out[16..<20]) == [0, 0, 0, 0])
    }

    @Test func remapTwoByte() throws {
        var map = ExtensionIdMap()
        map[1] = 200  // two-byte form may map to a high id
        map[2] = 3
        let bytes = rtpPacket(extensionProfile: 0x1000, extensionData: Self.twoByteExt)
        let (_, out) = try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(buf))
            v.remapExtensionIds(map)
            #expect(v.extensionValue(id: 200).map(Array.init) == [0xAA])
            #expect(v.extensionValue(id: 3).map(Array.init) == [])
            #expect(v.extensionValue(id: 16) == nil)  // high ids erased by a plain map
            #expect(v.extensionValue(id: 255) == nil)
        }
        #expect(Array(out[16..<32]) == [200, 1, 0xAA, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    }

    @Test func identityAndEraseAll() throws {
        for (data, profile) in [(Self.oneByteExt, UInt16(0xBEDE)), (Self.twoByteExt, 0x1000)] {
            let bytes = rtpPacket(extensionProfile: profile, extensionData: data)
            let (_, same) = try withPacket(bytes) { try #require(RtpPacketView($0)).remapExtensionIds(.identity) }
            #expect(same == bytes)
            let (_, erased) = try withPacket(bytes) { try #require(RtpPacketView($0)).remapExtensionIds(.eraseAll) }
            #expect(Array(erased[16..<16 + data.count]) == [UInt8](repeating: 0, count: data.count))
            #expect(Array(erased[..<16]) == Array(bytes[..<16]))
        }
    }

    @Test func extensionIdMapSubscript() {
        var m = ExtensionIdMap()
        for id in UInt8(0)...255 { #expect(m[id] == 0) }
        m[16] = 3  // ignored
        m[0] = 3  // ignored
        #expect(m[16] == 0 && m[0] == 0)
        for id in UInt8(1)...15 { m[id] = 16 - id }
        for id in UInt8(1)...15 { #expect(m[id] == 16 - id) }
        #expect(m[id: 7] == 9)
        #expect(ExtensionIdMap.identity[200] == 200)
        #expect(ExtensionIdMap.identity[15] == 15)
        #expect(ExtensionIdMap.eraseAll[3] == 0)
    }

    @Test func everyTruncationIsRejectedOrConsistent() {
        let samples = [
            rtpPacket(),
            rtpPacket(csrcs: [1, 2], extensionProfile: 0xBEDE, extensionData: Self.oneByteExt, padding: 3),
            rtpPacket(extensionProfile: 0x1000, extensionData: Self.twoByteExt, payload: [], padding: 0),
        ]
        for full in samples {
            for n in 0..<full.count {
                let cut = Array(full[..<n])
                withPacket(cut) { buf in
                    if let v = RtpPacketView(buf) {
                        // Only acceptable when the cut still forms a consistent packet
                        // (e.g. a shorter payload without padding).
                        #expect(v.headerLength + v.payloadLength + v.paddingLength == n)
                        _ = v.extensionValue(id: 1)
                        v.remapExtensionIds(.identity)
                    }
                }
            }
            // Everything shorter than the header is rejected.
            let header = withPacket(full) { RtpPacketView($0)!.headerLength }.0
            for n in 0..<header {
                #expect(withPacket(Array(full[..<n])) { RtpPacketView($0) == nil }.0, "length \(n)")
            }
        }
    }

    @Test func writeHeader() throws {
        var bytes = [UInt8](repeating: 0xFF, count: 20)
        let n = bytes.withUnsafeMutableBytes {
            RtpPacketView.writeHeader(into: $0, payloadType: 96, sequenceNumber: 7, timestamp: 9, ssrc: 11, marker: true)
        }
        #expect(n == 12)
        try withPacket(bytes) { buf in
            let v = try #require(RtpPacketView(UnsafeMutableRawBufferPointer(rebasing: buf[0..<12])))
            #expect(v.marker && v.payloadType == 96 && v.sequenceNumber == 7 && v.timestamp == 9 && v.ssrc == 11)
        }
        var small = [UInt8](repeating: 0, count: 11)
        #expect(small.withUnsafeMutableBytes {
            RtpPacketView.writeHeader(into: $0, payloadType: 0, sequenceNumber: 0, timestamp: 0, ssrc: 0)
        } == 0)
    }
}

/// `RtpPacketView.FixedHeader`: the clear header of an SRTP packet (no padding/length checks).
@Suite struct RtpFixedHeaderTests {
    @Test func readsTheClearFieldsOfAnEncryptedPacket() {
        // P bit set and a last byte that is really the SRTP tag: `RtpPacketView` refuses it,
        // the fixed header still reads.
        let bytes: [UInt8] = [0xA0, 0x80 | 111] + be16(65535) + be32(0xDEADBEEF) + be32(42) + [9, 9, 9, 0xFF]
        let (view, _) = withPacket(bytes) { RtpPacketView($0) }
        #expect(view == nil)
        let h = withBytes(bytes) { RtpPacketView.FixedHeader($0) }
        #expect(h == RtpPacketView.FixedHeader(marker: true, payloadType: 111, sequenceNumber: 65535, timestamp: 0xDEADBEEF, ssrc: 42))
        #expect(withBytes(Array(bytes.prefix(11))) { RtpPacketView.FixedHeader($0) } == nil)
        #expect(withBytes([0x40] + Array(bytes.dropFirst())) { RtpPacketView.FixedHeader($0) } == nil)
    }
}
