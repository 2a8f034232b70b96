import Testing
@testable import MinatoWire

@Suite struct RtcpTests {
    /// Writes with `write` into a 64-byte buffer and returns the written bytes.
    func written(_ write: (UnsafeMutableRawBufferPointer) -> Int) -> [UInt8] {
        var b = [UInt8](repeating: 0xEE, count: 64)
        let n = b.withUnsafeMutableBytes { write($0) }
        return Array(b[..<n])
    }

    /// The single packet in `bytes`.
    func single<R>(_ bytes: [UInt8], _ body: (RtcpPacket) throws -> R) throws -> R {
        try withBytes(bytes) { raw in
            var it = RtcpIterator(raw)
            let first = it.next()
            let second = it.next()
            let p = try #require(first)
            #expect(second == nil)
            #expect(!it.malformed)
            return try body(p)
        }
    }

    @Test func pliRoundTrip() throws {
        let b = written { RtcpWriter.pli(into: $0, senderSsrc: 1, mediaSsrc: 0xABCD_EF01) }
        #expect(b == [0x81, 206, 0, 2] + be32(1) + be32(0xABCD_EF01))
        try single(b) { p in
            #expect(p.packetType == 206 && p.countOrFormat == 1 && p.offset == 0)
            let pli = try #require(PictureLossIndication(p))
            #expect(pli.senderSsrc == 1 && pli.mediaSsrc == 0xABCD_EF01)
            #expect(FullIntraRequest(p) == nil)
            #expect(GenericNack(p) == nil)
            #expect(Remb(p) == nil)
        }
    }

    @Test func firRoundTrip() throws {
        let b = written { RtcpWriter.fir(into: $0, senderSsrc: 5, mediaSsrc: 77, sequence: 9) }
        #expect(b.count == 20)
        try single(b) { p in
            let fir = try #require(FullIntraRequest(p))
            #expect(fir.senderSsrc == 5)
            #expect(fir.entryCount == 1)
            let e = try #require(fir.entry(at: 0))
            #expect(e.ssrc == 77 && e.seq == 9)
            #expect(fir.entry(at: 1) == nil)
            #expect(PictureLossIndication(p) == nil)
        }
    }

    @Test func senderReportRoundTripAndRewrite() throws {
        var b = written {
            RtcpWriter.senderReport(into: $0, ssrc: 0x1111_2222, ntpTimestamp: 0x0102_0304_0506_0708,
                                    rtpTimestamp: 90000, packetCount: 10, octetCount: 12000)
        }
        #expect(b.count == 28)
        try single(b) { p in
            let sr = try #require(SenderReport(p))
            #expect(sr.ssrc == 0x1111_2222)
            #expect(sr.ntpTimestamp == 0x0102_0304_0506_0708)
            #expect(sr.compactNtp == 0x0304_0506)
            #expect(sr.rtpTimestamp == 90000)
            #expect(sr.packetCount == 10)
            #expect(sr.octetCount == 12000)
            #expect(sr.reportCount == 0)
            #expect(sr.reportBlock(at: 0) == nil)
            #expect(ReceiverReport(p) == nil)
        }
        let ok = b.withUnsafeMutableBytes {
            SenderReport.rewrite($0, ssrc: 42, rtpTimestamp: 7, packetCount: 8, octetCount: 9)
        }
        #expect(ok)
        try single(b) { p in
            let sr = try #require(SenderReport(p))
            #expect(sr.ssrc == 42 && sr.rtpTimestamp == 7 && sr.packetCount == 8 && sr.octetCount == 9)
            #expect(sr.ntpTimestamp == 0x0102_0304_0506_0708)
        }
        var rr = written { RtcpWriter.receiverReport(into: $0, senderSsrc: 1, block: nil) }
        #expect(!rr.withUnsafeMutableBytes { SenderReport.rewrite($0, ssrc: 0, rtpTimestamp: 0, packetCount: 0, octetCount: 0) })
    }

    @Test func receiverReportRoundTrip() throws {
        let block = ReportBlock(ssrc: 99, fractionLost: 25, cumulativeLost: -3, extendedHighestSequence: 0x0001_0005,
                                jitter: 17, lastSR: 0xAABB_CCDD, delaySinceLastSR: 65536)
        let b = written { RtcpWriter.receiverReport(into: $0, senderSsrc: 7, block: block) }
        #expect(b.count == 32)
        #expect(Array(b[12..<16]) == [25, 0xFF, 0xFF, 0xFD])
        try single(b) { p in
            let rr = try #require(ReceiverReport(p))
            #expect(rr.ssrc == 7)
            #expect(rr.reportCount == 1)
            #expect(rr.reportBlock(at: 0) == block)
            #expect(rr.reportBlock(at: 1) == nil)
        }
        let empty = written { RtcpWriter.receiverReport(into: $0, senderSsrc: 7, block: nil) }
        #expect(empty == [0x80, 201, 0, 1] + be32(7))
    }

    @Test func cumulativeLostClampsTo24Bits() throws {
        for (value, expected) in [(Int32.max, Int32(0x7F_FFFF)), (Int32.min, -0x80_0000), (0x12_3456, 0x12_3456)] {
            let block = ReportBlock(ssrc: 1, fractionLost: 0, cumulativeLost: value, extendedHighestSequence: 0,
                                    jitter: 0, lastSR: 0, delaySinceLastSR: 0)
            let b = written { RtcpWriter.receiverReport(into: $0, senderSsrc: 7, block: block) }
            try single(b) { p in #expect(ReceiverReport(p)?.reportBlock(at: 0)?.cumulativeLost == expected) }
        }
    }

    @Test func nackRoundTrip() throws {
        let b = written { RtcpWriter.nack(into: $0, senderSsrc: 3, mediaSsrc: 4, pid: 65535, blp: 0b101) }
        #expect(b.count == 16)
        try single(b) { p in
            let n = try #require(GenericNack(p))
            #expect(n.senderSsrc == 3 && n.mediaSsrc == 4 && n.pairCount == 1)
            let pair = try #require(n.pair(at: 0))
            #expect(pair.pid == 65535 && pair.blp == 5)
            #expect(n.pair(at: 1) == nil)
            #expect(TransportFeedback(p) == nil)
        }
    }

    @Test func rembRoundTrip() throws {
        for bitrate: UInt64 in [0, 1, 300_000, 2_500_000, 1 << 40] {
            let b = written { RtcpWriter.remb(into: $0, senderSsrc: 1, bitrate: bitrate, mediaSsrc: 0xFEED) }
            #expect(b.count == 24)
            try single(b) { p in
                let r = try #require(Remb(p))
                #expect(r.senderSsrc == 1)
                #expect(r.ssrcCount == 1 && r.ssrc(at: 0) == 0xFEED && r.ssrc(at: 1) == nil)
                // Exact when the mantissa fits; otherwise rounded down by < 1 part in 2^17.
                #expect(r.bitrate <= bitrate && bitrate - r.bitrate <= bitrate >> 17)
            }
        }
    }

    @Test func rembSaturates() throws {
        // exponent 63, mantissa 0x3FFFF
        let b: [UInt8] = [0x8F, 206, 0, 5] + be32(1) + be32(0) + Array("REMB".utf8) + [1, 0xFF, 0xFF, 0xFF] + be32(2)
        try single(b) { p in #expect(Remb(p)?.bitrate == .max) }
    }

    @Test func transportWideFeedbackHeader() throws {
        // Run-length chunk: 3 packets received with small deltas (1, 2, 3), then zero padding.
        let b: [UInt8] = [0x8F, 205, 0, 6] + be32(1) + be32(2) + be16(500) + be16(3) + [0xFF, 0xFF, 0xFE, 7]
            + [0x20, 0x03, 1, 2] + [3, 0, 0, 0]
        try single(b) { p in
            let t = try #require(TransportFeedback(p))
            #expect(t.senderSsrc == 1 && t.mediaSsrc == 2)
            #expect(t.baseSequence == 500 && t.statusCount == 3)
            #expect(t.referenceTime == -2)
            #expect(t.feedbackCount == 7)
            #expect(GenericNack(p) == nil)
        }
    }

    @Test func byeAndSdes() throws {
        let bye = written { RtcpWriter.bye(into: $0, ssrc: 0x0A0B_0C0D) }
        try single(bye) { p in
            let b = try #require(Bye(p))
            #expect(b.ssrcCount == 1 && b.ssrc(at: 0) == 0x0A0B_0C0D && b.ssrc(at: 1) == nil)
        }
        // Two chunks: CNAME "abc" for ssrc 1; CNAME "ab" + NOTE "x" for ssrc 2.
        let sdes: [UInt8] = [0x82, 202, 0, 7]
            + be32(1) + [1, 3] + Array("abc".utf8) + [0, 0, 0]
            + be32(2) + [1, 2] + Array("ab".utf8) + [7, 1] + Array("x".utf8) + [0, 0, 0, 0, 0]
        #expect(sdes.count == 32)
        try single(sdes) { p in
            let s = try #require(Sdes(p))
            #expect(s.chunkCount == 2)
            #expect(s.ssrc(at: 0) == 1)
            #expect(s.ssrc(at: 1) == 2)
            #expect(s.ssrc(at: 2) == nil)
        }
    }

    @Test func compoundIterates() throws {
        var b = written {
            RtcpWriter.senderReport(into: $0, ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5)
        }
        b += [0x81, 202, 0, 3] + be32(1) + [1, 4] + Array("cnam".utf8) + [0, 0]
        b += written { RtcpWriter.pli(into: $0, senderSsrc: 1, mediaSsrc: 2) }
        b += written { RtcpWriter.nack(into: $0, senderSsrc: 1, mediaSsrc: 2, pid: 10, blp: 0) }
        withBytes(b) { raw in
            var it = RtcpIterator(raw)
            var types: [UInt8] = []
            var offsets: [Int] = []
            while let p = it.next() {
                types.append(p.packetType)
                offsets.append(p.offset)
            }
            #expect(types == [200, 202, 206, 205])
            #expect(offsets == [0, 28, 44, 56])
            #expect(!it.malformed)
            let after = it.next()
            #expect(after == nil)
        }
    }

    @Test func malformedStops() {
        let pli = written { RtcpWriter.pli(into: $0, senderSsrc: 1, mediaSsrc: 2) }
        // Length field past the end.
        var longer = pli + pli
        longer[13 + 2] = 0  // second packet length field: set to 0x00?? -> keep high byte
        longer[12 + 3] = 9
        // Version 1 in the second packet.
        var badVersion = pli + pli
        badVersion[12] = 0x41
        // 3 trailing bytes.
        let trailing = pli + [0x80, 200, 0]
        for (bytes, goodCount) in [(longer, 1), (badVersion, 1), (trailing, 1), ([0x40, 200, 0, 0], 0)] {
            withBytes(bytes) { raw in
                var it = RtcpIterator(raw)
                var n = 0
                while it.next() != nil { n += 1 }
                #expect(n == goodCount)
                #expect(it.malformed)
                let after = it.next()
                #expect(after == nil)
            }
        }
        withBytes([]) { raw in
            var it = RtcpIterator(raw)
            let first = it.next()
            #expect(first == nil)
            #expect(!it.malformed)
        }
    }

    @Test func typedReadersRejectShortPackets() throws {
        // SR claiming one report block but only 28 bytes long.
        var sr = written {
            RtcpWriter.senderReport(into: $0, ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5)
        }
        sr[0] = 0x81
        try single(sr) { p in #expect(SenderReport(p) == nil) }
        // RR claiming 2 blocks with 1.
        let block = ReportBlock(ssrc: 1, fractionLost: 0, cumulativeLost: 0, extendedHighestSequence: 0, jitter: 0,
                                lastSR: 0, delaySinceLastSR: 0)
        var rr = written { RtcpWriter.receiverReport(into: $0, senderSsrc: 7, block: block) }
        rr[0] = 0x82
        try single(rr) { p in #expect(ReceiverReport(p) == nil) }
        // PLI of 8 bytes.
        try single([0x81, 206, 0, 1] + be32(1)) { p in #expect(PictureLossIndication(p) == nil) }
        // BYE claiming 2 SSRCs with 1.
        try single([0x82, 203, 0, 1] + be32(1)) { p in #expect(Bye(p) == nil) }
        // REMB with wrong identifier, and with too few SSRCs.
        try single([0x8F, 206, 0, 4] + be32(1) + be32(0) + Array("REMX".utf8) + [0, 0, 0, 0]) { p in #expect(Remb(p) == nil) }
        try single([0x8F, 206, 0, 4] + be32(1) + be32(0) + Array("REMB".utf8) + [2, 0, 0, 0]) { p in #expect(Remb(p) == nil) }
        // TWCC of 16 bytes.
        try single([0x8F, 205, 0, 3] + be32(1) + be32(2) + be32(3)) { p in #expect(TransportFeedback(p) == nil) }
    }

    @Test func writersReturnZeroWhenTooSmall() {
        var b = [UInt8](repeating: 0, count: 64)
        b.withUnsafeMutableBytes { full in
            func cut(_ n: Int) -> UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(rebasing: full[0..<n]) }
            let block = ReportBlock(ssrc: 1, fractionLost: 0, cumulativeLost: 0, extendedHighestSequence: 0,
                                    jitter: 0, lastSR: 0, delaySinceLastSR: 0)
            #expect(RtcpWriter.pli(into: cut(11), senderSsrc: 1, mediaSsrc: 2) == 0)
            #expect(RtcpWriter.fir(into: cut(19), senderSsrc: 1, mediaSsrc: 2, sequence: 0) == 0)
            #expect(RtcpWriter.senderReport(into: cut(27), ssrc: 1, ntpTimestamp: 0, rtpTimestamp: 0,
                                            packetCount: 0, octetCount: 0) == 0)
            #expect(RtcpWriter.receiverReport(into: cut(31), senderSsrc: 1, block: block) == 0)
            #expect(RtcpWriter.receiverReport(into: cut(7), senderSsrc: 1, block: nil) == 0)
            #expect(RtcpWriter.nack(into: cut(15), senderSsrc: 1, mediaSsrc: 2, pid: 0, blp: 0) == 0)
            #expect(RtcpWriter.remb(into: cut(23), senderSsrc: 1, bitrate: 0, mediaSsrc: 2) == 0)
            #expect(RtcpWriter.bye(into: cut(7), ssrc: 1) == 0)
        }
        #expect(b.allSatisfy { $0 == 0 })
    }

    @Test func feedbackSsrcRewrite() throws {
        var b = written { RtcpWriter.pli(into: $0, senderSsrc: 1, mediaSsrc: 2) }
        #expect(b.withUnsafeMutableBytes { rewriteFeedbackSsrcs($0, senderSsrc: 10, mediaSsrc: 20) })
        try single(b) { p in
            let pli = try #require(PictureLossIndication(p))
            #expect(pli.senderSsrc == 10 && pli.mediaSsrc == 20)
        }
        var sr = written {
            RtcpWriter.senderReport(into: $0, ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5)
        }
        #expect(!sr.withUnsafeMutableBytes { rewriteFeedbackSsrcs($0, senderSsrc: 10, mediaSsrc: 20) })
    }

    @Test func everyTruncationOfACompoundNeverTraps() {
        var b = written {
            RtcpWriter.senderReport(into: $0, ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5)
        }
        b += [0x82, 202, 0, 7] + be32(1) + [1, 3] + Array("abc".utf8) + [0, 0, 0] + be32(2) + [1, 2, 0x61, 0x62, 7, 1, 0x78, 0, 0, 0, 0, 0]
        b += [0x8F, 206, 0, 5] + be32(1) + be32(0) + Array("REMB".utf8) + [1, 0x0A, 0xBC, 0xDE] + be32(9)
        for n in 0...b.count {
            withBytes(Array(b[..<n])) { raw in
                var it = RtcpIterator(raw)
                while let p = it.next() {
                    _ = SenderReport(p)?.reportBlock(at: 0)
                    _ = ReceiverReport(p)?.reportBlock(at: 0)
                    if let s = Sdes(p) { for i in 0..<s.chunkCount { _ = s.ssrc(at: i) } }
                    _ = Remb(p)?.bitrate
                    if let t = TransportFeedback(p) { for _ in t {} }
                    _ = GenericNack(p)?.pair(at: 0)
                    _ = FullIntraRequest(p)?.entry(at: 0)
                    _ = Bye(p)?.ssrc(at: 0)
                }
            }
        }
    }
}
