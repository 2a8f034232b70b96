import Testing
@testable import MinatoWire

/// Transport-wide congestion control: the feedback packet's writer and view, and the
/// transport-wide sequence number header extension.
@Suite struct TransportFeedbackTests {
    typealias Arrival = TransportFeedback.Arrival

    /// A deterministic generator (SplitMix64) so failures reproduce.
    struct Rng {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    }

    /// Writes `arrivals` into a buffer of `capacity` bytes; returns the packet and how many it covers.
    func write(
        _ arrivals: [Arrival], capacity: Int = 1500, base: UInt16 = 100, referenceTime: Int32 = 1000,
        feedbackCount: UInt8 = 9
    ) -> (bytes: [UInt8], covered: Int) {
        var b = [UInt8](repeating: 0xEE, count: capacity)
        let r = arrivals.withUnsafeBufferPointer { a in
            b.withUnsafeMutableBytes {
                RtcpWriter.transportFeedback(into: $0, senderSsrc: 0x0102_0304, mediaSsrc: 0x0A0B_0C0D,
                                             baseSequence: base, referenceTime: referenceTime,
                                             feedbackCount: feedbackCount, arrivals: a)
            }
        }
        return (Array(b[..<r.bytes]), r.covered)
    }

    /// Parses `bytes` as one RTCP packet and returns its TWCC entries, or nil when not a valid one.
    func parse(_ bytes: [UInt8]) -> (feedback: (UInt16, Int, Int32, UInt8), entries: [(UInt16, Arrival)])? {
        withBytes(bytes) { raw in
            var it = RtcpIterator(raw)
            guard let p = it.next(), let t = TransportFeedback(p) else { return nil }
            var entries: [(UInt16, Arrival)] = []
            for (sequence, arrival) in t { entries.append((sequence, arrival)) }
            return ((t.baseSequence, t.statusCount, t.referenceTime, t.feedbackCount), entries)
        }
    }

    /// Writes and parses back `arrivals`, expecting all of them covered.
    func roundTrip(_ arrivals: [Arrival], base: UInt16 = 100, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let (bytes, covered) = write(arrivals, base: base)
        #expect(covered == arrivals.count, sourceLocation: sourceLocation)
        #expect(bytes.count % 4 == 0 && bytes.count >= 24, sourceLocation: sourceLocation)
        let parsed = try #require(parse(bytes), sourceLocation: sourceLocation)
        #expect(parsed.feedback.0 == base && parsed.feedback.1 == arrivals.count, sourceLocation: sourceLocation)
        #expect(parsed.entries.count == arrivals.count, sourceLocation: sourceLocation)
        for (k, (sequence, arrival)) in parsed.entries.enumerated() {
            #expect(sequence == base &+ UInt16(truncatingIfNeeded: k), sourceLocation: sourceLocation)
            #expect(arrival == arrivals[k], sourceLocation: sourceLocation)
        }
    }

    // MARK: Byte layout (draft §3.1)

    @Test func twoBitVectorByteByByte() throws {
        // small delta 4, lost, large delta 1000: one 2-bit status vector chunk
        // 1 1 | 01 00 10 00 00 00 00 = 0xD200, deltas 04 | 03 E8, 3 bytes of padding (P bit set).
        let (bytes, covered) = write([Arrival(delta: 4), .notReceived, Arrival(delta: 1000)],
                                     base: 0xFFFE, referenceTime: -2, feedbackCount: 0x42)
        #expect(covered == 3)
        let expected: [UInt8] = [0xAF, 205, 0, 6] + be32(0x0102_0304) + be32(0x0A0B_0C0D)
            + be16(0xFFFE) + be16(3) + [0xFF, 0xFF, 0xFE, 0x42]
            + [0xD2, 0x00] + [0x04, 0x03, 0xE8] + [0, 0, 3]
        #expect(bytes == expected)
        let parsed = try #require(parse(bytes))
        #expect(parsed.feedback.2 == -2 && parsed.feedback.3 == 0x42)
        #expect(parsed.entries.map(\.0) == [0xFFFE, 0xFFFF, 0])
        #expect(parsed.entries.map(\.1) == [Arrival(delta: 4), .notReceived, Arrival(delta: 1000)])
    }

    @Test func runLengthByteByByte() throws {
        // 20 received with small delta 1: run-length chunk 0 01 0000000010100 = 0x2014.
        let (bytes, covered) = write(Array(repeating: Arrival(delta: 1), count: 20), base: 7, referenceTime: 0x12_3456)
        #expect(covered == 20)
        let expected: [UInt8] = [0xAF, 205, 0, 10] + be32(0x0102_0304) + be32(0x0A0B_0C0D)
            + be16(7) + be16(20) + [0x12, 0x34, 0x56, 9]
            + [0x20, 0x14] + [UInt8](repeating: 1, count: 20) + [0, 2]
        #expect(bytes == expected)
        try roundTrip(Array(repeating: Arrival(delta: 1), count: 20))
    }

    @Test func oneBitVectorByteByByte() throws {
        // received, lost, r, r, l, l, r, l, r, r (all small): 1 0 | 1011001011 0000 = 0xACB0.
        let pattern = [true, false, true, true, false, false, true, false, true, true]
        let arrivals = pattern.enumerated().map { $1 ? Arrival(delta: Int32($0)) : .notReceived }
        let (bytes, _) = write(arrivals, base: 1)
        #expect(Array(bytes[20 ..< 22]) == [0xAC, 0xB0])
        #expect(Array(bytes[22...]) == [0, 2, 3, 6, 8, 9])  // 28 bytes: no padding
        try roundTrip(arrivals)
    }

    @Test func parsesChunksOtherWritersUse() throws {
        // A run of 2 large deltas; a full 1-bit vector (received, then 13 lost); a 2-bit vector
        // (lost, small, lost) whose last 4 slots run past the count; trailing zero bytes and no
        // RTCP padding.
        let chunks: [UInt8] = [0x40, 0x02] + [0xA0, 0x00] + [0xC4, 0x00]
        let deltas: [UInt8] = be16(0xFFFF) + be16(0x0100) + [5] + [6]
        var body = be32(1) + be32(2) + be16(10) + be16(19) + [0, 0, 1, 0] + chunks + deltas + [0, 0]
        while body.count % 4 != 0 { body.append(0) }
        let bytes: [UInt8] = [0x8F, 205] + be16(UInt16(body.count / 4)) + body
        let parsed = try #require(parse(bytes))
        let expected: [Arrival] = [Arrival(delta: -1), Arrival(delta: 256), Arrival(delta: 5)]
            + Array(repeating: .notReceived, count: 13) + [.notReceived, Arrival(delta: 6), .notReceived]
        #expect(parsed.entries.map(\.1) == expected)
        #expect(parsed.entries.map(\.0) == Array(10 ..< 29))
    }

    // MARK: Round trips

    @Test func mixedStatusesAndDeltasRoundTrip() throws {
        var rng = Rng(state: 1)
        for trial in 0 ..< 300 {
            let count = 1 + rng.below(trial < 200 ? 60 : 400)
            let lossPercent = rng.below(100)
            var arrivals: [Arrival] = []
            var k = 0
            while k < count {
                // Runs of a kind now and then, so every chunk type is chosen.
                let run = rng.below(4) == 0 ? 1 + rng.below(40) : 1
                let kind = rng.below(100)
                for _ in 0 ..< min(run, count - k) {
                    if kind < lossPercent / 2 { arrivals.append(.notReceived) }
                    else if kind < 85 { arrivals.append(Arrival(delta: Int32(rng.below(256)))) }
                    else { arrivals.append(Arrival(delta: Int32(rng.below(65536)) - 32768)) }
                }
                k += run
            }
            try roundTrip(arrivals, base: UInt16(truncatingIfNeeded: rng.next()))
        }
    }

    @Test func largeAndNegativeDeltasRoundTrip() throws {
        let deltas: [Int32] = [0, 255, 256, -1, -32768, 32767, 1, -300, 1000, 0]
        try roundTrip(deltas.map { Arrival(delta: $0) })
        try roundTrip(Array(repeating: Arrival(delta: -32768), count: 30))
        try roundTrip([Arrival(delta: 32767)])
    }

    @Test func sequenceNumbersWrap() throws {
        let arrivals = (0 ..< 40).map { $0 % 3 == 0 ? Arrival.notReceived : Arrival(delta: Int32($0)) }
        try roundTrip(arrivals, base: 0xFFF0)
        try roundTrip(arrivals, base: 0xFFFF)
        let parsed = try #require(parse(write(arrivals, base: 0xFFF0).bytes))
        #expect(parsed.entries[15].0 == 0xFFFF && parsed.entries[16].0 == 0 && parsed.entries[39].0 == 23)
    }

    @Test func referenceTimeIsSigned24Bits() throws {
        for (written, read) in [(Int32(0), Int32(0)), (-1, -1), (-2, -2), (0x7F_FFFF, 0x7F_FFFF), (-0x80_0000, -0x80_0000),
                                (0x80_0000, -0x80_0000), (0x123_4567, 0x23_4567), (-0x80_0001, 0x7F_FFFF)] {
            let bytes = write([Arrival(delta: 1)], referenceTime: written).bytes
            withBytes(bytes) { raw in
                var it = RtcpIterator(raw)
                let t = it.next().flatMap { TransportFeedback($0) }
                #expect(t?.referenceTime == read)
                #expect(t?.referenceTimeMicroseconds == Int64(read) * 64_000)
            }
        }
    }

    @Test func longRunsAndTheStatusCountLimit() throws {
        try roundTrip(Array(repeating: .notReceived, count: 20_000))
        try roundTrip(Array(repeating: Arrival(delta: 3), count: 1400))
        let (bytes, covered) = write(Array(repeating: .notReceived, count: 70_000))
        #expect(covered == 65535)
        let parsed = try #require(parse(bytes))
        #expect(parsed.feedback.1 == 65535 && parsed.entries.count == 65535)
        #expect(parsed.entries.last?.0 == 100 &+ 65534)
    }

    // MARK: Ending early

    @Test func deltaBeyond16BitsEndsThePacket() throws {
        let arrivals = [Arrival(delta: 1), .notReceived, Arrival(delta: 40_000), Arrival(delta: 2)]
        let (bytes, covered) = write(arrivals)
        #expect(covered == 2)
        let parsed = try #require(parse(bytes))
        #expect(parsed.entries.map(\.1) == Array(arrivals[..<2]))
        for delta: Int32 in [32768, -32769, .max, .min] {
            #expect(write([Arrival(delta: delta), Arrival(delta: 1)]) == ([], 0))
        }
        // A lost packet's delta is ignored, however large.
        try roundTrip([Arrival(received: false, delta: .max), Arrival(delta: 1)])
        #expect(Arrival(received: false, delta: 77) == .notReceived)
    }

    @Test func smallBuffersCoverAPrefix() throws {
        var rng = Rng(state: 7)
        let arrivals = (0 ..< 120).map { _ -> Arrival in
            switch rng.below(5) {
            case 0: return .notReceived
            case 1: return Arrival(delta: -5)
            default: return Arrival(delta: Int32(rng.below(200)))
            }
        }
        let full = write(arrivals)
        #expect(full.covered == 120)
        var previous = 0
        for capacity in 0 ... full.bytes.count + 3 {
            let (bytes, covered) = write(arrivals, capacity: capacity)
            #expect(bytes.count <= capacity && bytes.count % 4 == 0)
            #expect(covered >= previous)
            previous = covered
            if capacity < 24 {
                #expect(covered == 0 && bytes.isEmpty)
                continue
            }
            #expect(covered > 0)
            let parsed = try #require(parse(bytes))
            #expect(parsed.entries.count == covered)
            #expect(parsed.entries.map(\.1) == Array(arrivals[..<covered]))
        }
        #expect(previous == 120)
        #expect(write([], capacity: 100) == ([], 0))
    }

    // MARK: Malformed input

    @Test func rejectsMalformedPackets() {
        func header(_ count: UInt16) -> [UInt8] { be32(1) + be32(2) + be16(0) + be16(count) + [0, 0, 0, 0] }
        func packet(_ body: [UInt8], first: UInt8 = 0x8F, type: UInt8 = 205) -> [UInt8] {
            var body = body
            while body.count % 4 != 0 { body.append(0) }
            return [first, type] + be16(UInt16(body.count / 4)) + body
        }
        #expect(parse(packet(header(1) + [0x20, 0x01, 9])) != nil)
        #expect(parse(packet(header(1) + [0x20, 0x01, 9], first: 0x81)) == nil)  // FMT 1: a NACK
        #expect(parse(packet(header(1) + [0x20, 0x01, 9], type: 206)) == nil)
        #expect(parse(packet(header(0) + [0x20, 0x01, 9])) == nil)  // reports nothing
        #expect(parse(packet(header(1) + [0x60, 0x01, 9])) == nil)  // reserved symbol in a run
        #expect(parse(packet(header(1) + [0xF0, 0x00, 9])) == nil)  // reserved symbol in a vector
        #expect(parse(packet(header(2) + [0x20, 0x01])) == nil)  // chunks cover 1 of 2
        #expect(parse(packet(header(5) + [0x40, 0x02, 0x20, 0x03, 1, 2, 3, 4, 5, 6, 7])) != nil)
        #expect(parse(packet(header(2) + [0x40, 0x02, 1, 2])) == nil)  // second large delta missing
        #expect(parse(packet(header(1))) == nil)  // no chunk at all
        #expect(parse(packet(header(1) + [0x00, 0x00, 0x20, 0x01, 5])) != nil)  // a zero-length run is skipped
        // Padding that would swallow the delta: P set, last byte says 4.
        #expect(parse([0xAF, 205, 0, 5] + header(1) + [0x20, 0x01, 0, 4]) == nil)
        // P set with a proper count: 1 byte of padding after the delta.
        #expect(parse([0xAF, 205, 0, 5] + header(1) + [0x20, 0x01, 7, 1]) != nil)
    }

    @Test func garbageNeverTraps() {
        var rng = Rng(state: 42)
        for trial in 0 ..< 20_000 {
            let words = rng.below(40)
            var body = (0 ..< 4 * words).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if words >= 4, trial % 2 == 0 {
                // Keep the status count small so the chunks are what gets tested.
                body[10] = 0
                body[11] = UInt8(truncatingIfNeeded: rng.below(60))
            }
            let first: UInt8 = trial % 3 == 0 ? 0xAF : 0x8F
            var bytes: [UInt8] = [first, 205] + be16(UInt16(words)) + body
            if trial % 5 == 0, !bytes.isEmpty { bytes.removeLast(rng.below(min(8, bytes.count))) }
            withBytes(bytes) { raw in
                var it = RtcpIterator(raw)
                while let p = it.next() {
                    guard let t = TransportFeedback(p) else { continue }
                    var n = 0
                    for _ in t { n += 1 }
                    #expect(n == t.statusCount)
                    _ = (t.senderSsrc, t.mediaSsrc, t.referenceTime, t.feedbackCount)
                }
            }
        }
        // Hand-made packet views shorter than any header.
        for n in 0 ..< 24 {
            withBytes([UInt8](repeating: 0xFF, count: n)) { raw in
                #expect(TransportFeedback(RtcpPacket(packetType: 205, countOrFormat: 15, bytes: raw, offset: 0)) == nil)
            }
        }
    }

    @Test func everyTruncationOfAValidPacketNeverTraps() {
        let arrivals = (0 ..< 50).map { $0 % 4 == 0 ? Arrival.notReceived : Arrival(delta: Int32($0 * 100 - 2000)) }
        let bytes = write(arrivals).bytes
        for n in 0 ..< bytes.count {
            var cut = Array(bytes[..<n])
            if n >= 4 { cut[2] = 0; cut[3] = UInt8(n / 4 - 1) }  // the length field agrees with the cut
            withBytes(cut) { raw in
                var it = RtcpIterator(raw)
                while let p = it.next() {
                    if let t = TransportFeedback(p) { for _ in t {} }
                }
            }
        }
    }

    // MARK: Header extension

    /// An RTP packet with a one-byte (0xBEDE) extension block: mid (id 1, "a") and transport-wide
    /// sequence number (id 5), then a payload byte.
    func rtpWithTwcc(_ sequence: UInt16) -> [UInt8] {
        [0x90, 96, 0, 1] + be32(1000) + be32(0x1234) + [0xBE, 0xDE, 0, 2]
            + [0x10, 0x61, 0x51] + be16(sequence) + [0, 0, 0] + [0xAA]
    }

    @Test func readsAndRewritesTheTransportSequenceNumber() throws {
        let (first, rewritten) = withPacket(rtpWithTwcc(0xFFFE)) { buffer -> UInt16? in
            guard let view = RtpPacketView(buffer) else { return nil }
            let before = view.transportSequenceNumber(id: 5)
            #expect(view.setTransportSequenceNumber(0x0102, id: 5))
            #expect(view.transportSequenceNumber(id: 5) == 0x0102)
            #expect(view.transportSequenceNumber(id: 1) == nil)  // 1 byte: not a TWCC element
            #expect(!view.setTransportSequenceNumber(9, id: 1))
            #expect(view.transportSequenceNumber(id: 3) == nil)
            #expect(!view.setTransportSequenceNumber(9, id: 3))
            return before
        }
        #expect(first == 0xFFFE)
        var expected = rtpWithTwcc(0x0102)
        #expect(rewritten == expected)
        expected[0] = 0x80  // no extension block
        withPacket(Array(expected[..<12]) + [0xAA]) { buffer in
            let view = RtpPacketView(buffer)
            #expect(view?.transportSequenceNumber(id: 5) == nil)
            #expect(view?.setTransportSequenceNumber(1, id: 5) == false)
        }
    }

    @Test func twoByteFormTransportSequenceNumber() throws {
        // 0x1000 profile: id 20, length 2.
        let bytes: [UInt8] = [0x90, 96, 0, 1] + be32(1000) + be32(0x1234) + [0x10, 0x00, 0, 1] + [20, 2] + be16(77) + [0xAA]
        let (_, out) = withPacket(bytes) { buffer in
            let view = RtpPacketView(buffer)
            #expect(view?.transportSequenceNumber(id: 20) == 77)
            #expect(view?.setTransportSequenceNumber(0xBEEF, id: 20) == true)
        }
        #expect(Array(out[18 ..< 20]) == [0xBE, 0xEF])
        #expect(out[20] == 0xAA)
    }
}
