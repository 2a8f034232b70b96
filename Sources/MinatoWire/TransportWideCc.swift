// Transport-wide congestion control (draft-holmer-rmcat-transport-wide-cc-extensions-01): the
// feedback packet (§3.1) as a view and a writer, and the RTP header extension that carries the
// transport-wide sequence number (§2).

/// Transport-wide congestion control feedback (PT 205, FMT 15;
/// draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1): for each transport-wide sequence
/// number from `baseSequence` on, whether that packet arrived and, if it did, when.
///
/// A view over `RtcpPacket.bytes`; owns nothing and never allocates. `init?` checks every status
/// chunk and receive delta against the packet length, so iterating afterwards (`for (sequence,
/// arrival) in feedback`) yields exactly `statusCount` entries. Valid while the caller keeps the
/// memory alive; lives on whichever thread owns that buffer.
public struct TransportFeedback: Sequence {
    /// The whole packet, header and any padding included (passed by argument; not owned).
    public let bytes: UnsafeRawBufferPointer
    /// Offset of the first receive delta (just after the last status chunk).
    @usableFromInline let deltasOffset: Int
    /// End of the packet without its RTCP padding.
    @usableFromInline let end: Int

    /// The fate of one packet: whether it was received and, if so, its receive delta. A plain
    /// value; also the writer's input.
    public struct Arrival: Sendable, Equatable {
        public var received: Bool
        /// Receive delta in 250 µs units: this packet's arrival time minus the previous received
        /// packet's in the same feedback (for the first received packet, minus the reference
        /// time). 0 when not received. On the wire it is 0...255 ("small") or a signed 16-bit
        /// value ("large or negative").
        public var delta: Int32

        @inlinable
        public init(received: Bool, delta: Int32) {
            self.received = received
            self.delta = received ? delta : 0
        }

        /// A received packet with receive delta `delta` (250 µs units).
        @inlinable
        public init(delta: Int32) { self.init(received: true, delta: delta) }

        /// A packet that was not received.
        public static let notReceived = Arrival(received: false, delta: 0)
    }

    /// Validates a TWCC feedback packet; nil when it is another packet, shorter than its
    /// 20-byte header, reports no packets or more than `maxStatusCount`, uses the reserved
    /// status symbol, or its status chunks or receive deltas run past the end of the packet (its
    /// RTCP padding excluded). A 40-byte packet of run-length chunks can claim 65,535 statuses:
    /// `maxStatusCount` bounds the validation walk (and every later walk) before it starts.
    @inlinable
    public init?(_ p: RtcpPacket, maxStatusCount: Int = 0xFFFF) {
        let b = p.bytes
        guard p.packetType == RtcpPacketType.transportFeedback, p.countOrFormat == 15,
              b.count >= 20 else { return nil }
        let end = p.unpaddedLength
        let count = Int(b.wireU16(14))
        guard end >= 20, count > 0, count <= maxStatusCount else { return nil }
        var statuses = TransportFeedbackStatuses(b, from: 20, to: end)
        var deltaBytes = 0
        for _ in 0 ..< count {
            guard let symbol = statuses.next() else { return nil }
            switch symbol {
            case 0: break
            case 1: deltaBytes += 1
            case 2: deltaBytes += 2
            default: return nil  // reserved
            }
        }
        guard statuses.offset + deltaBytes <= end else { return nil }
        self.bytes = b
        self.deltasOffset = statuses.offset
        self.end = end
    }

    @inlinable public var senderSsrc: UInt32 { bytes.wireU32(4) }
    @inlinable public var mediaSsrc: UInt32 { bytes.wireU32(8) }
    /// Transport-wide sequence number of the first packet reported.
    @inlinable public var baseSequence: UInt16 { bytes.wireU16(12) }
    /// Number of packets reported (at least 1): `baseSequence` up to `baseSequence + statusCount
    /// - 1`, modulo 2^16.
    @inlinable public var statusCount: Int { Int(bytes.wireU16(14)) }
    /// Signed 24-bit reference time in multiples of 64 ms, on the feedback sender's own clock.
    @inlinable public var referenceTime: Int32 {
        let raw = bytes.wireU24(16)
        return raw & 0x80_0000 != 0 ? Int32(bitPattern: raw | 0xFF00_0000) : Int32(raw)
    }
    /// `referenceTime` in microseconds.
    @inlinable public var referenceTimeMicroseconds: Int64 { Int64(referenceTime) * 64_000 }
    /// The feedback sender's 8-bit count of feedback packets, to detect lost feedback.
    @inlinable public var feedbackCount: UInt8 { bytes[19] }

    /// The packet status count that `p` claims, read from its header without validating
    /// anything else (to price a feedback packet before walking it); nil when `p` is not a
    /// transport-wide feedback packet of at least 16 bytes.
    @inlinable
    public static func claimedStatusCount(_ p: RtcpPacket) -> Int? {
        guard p.packetType == RtcpPacketType.transportFeedback, p.countOrFormat == 15, p.bytes.count >= 16 else { return nil }
        return Int(p.bytes.wireU16(14))
    }

    @inlinable
    public func makeIterator() -> Iterator {
        Iterator(statuses: TransportFeedbackStatuses(bytes, from: 20, to: end), deltaOffset: deltasOffset,
                 end: end, remaining: statusCount, sequence: baseSequence)
    }

    /// Walks the reported packets in sequence-number order without allocating: each element is
    /// a transport-wide sequence number and its `Arrival`.
    public struct Iterator: IteratorProtocol {
        @usableFromInline var statuses: TransportFeedbackStatuses
        @usableFromInline var deltaOffset: Int
        @usableFromInline let end: Int
        @usableFromInline var remaining: Int
        @usableFromInline var sequence: UInt16

        @inlinable
        init(statuses: TransportFeedbackStatuses, deltaOffset: Int, end: Int, remaining: Int, sequence: UInt16) {
            self.statuses = statuses
            self.deltaOffset = deltaOffset
            self.end = end
            self.remaining = remaining
            self.sequence = sequence
        }

        @inlinable
        public mutating func next() -> (sequence: UInt16, arrival: Arrival)? {
            guard remaining > 0, let symbol = statuses.next() else { return nil }
            let arrival: Arrival
            switch symbol {
            case 0:
                arrival = .notReceived
            case 1:
                guard deltaOffset < end else { remaining = 0; return nil }
                arrival = Arrival(delta: Int32(statuses.bytes[deltaOffset]))
                deltaOffset += 1
            case 2:
                guard deltaOffset + 2 <= end else { remaining = 0; return nil }
                arrival = Arrival(delta: Int32(Int16(bitPattern: statuses.bytes.wireU16(deltaOffset))))
                deltaOffset += 2
            default:
                remaining = 0
                return nil
            }
            let s = sequence
            sequence &+= 1
            remaining -= 1
            return (s, arrival)
        }
    }
}

/// Reads the 2-bit status symbols (0 not received, 1 small delta, 2 large delta, 3 reserved)
/// out of a run of packet status chunks, one at a time; 1-bit vector symbols come out as 0 or 1.
/// Stops (nil) when the next chunk would cross `end`. `offset` is then, or after the last
/// symbol read, just past the chunk holding it.
@usableFromInline
struct TransportFeedbackStatuses {
    @usableFromInline let bytes: UnsafeRawBufferPointer
    @usableFromInline let end: Int
    @usableFromInline var offset: Int
    @usableFromInline var chunk: UInt16 = 0
    /// Symbols of `chunk` not read yet.
    @usableFromInline var left = 0
    /// Index in `chunk` of the next symbol.
    @usableFromInline var index = 0

    @inlinable
    init(_ bytes: UnsafeRawBufferPointer, from offset: Int, to end: Int) {
        self.bytes = bytes
        self.offset = offset
        self.end = min(end, bytes.count)
    }

    @inlinable
    mutating func next() -> UInt8? {
        while left == 0 {
            guard offset >= 0, offset + 2 <= end else { return nil }
            chunk = bytes.wireU16(offset)
            offset += 2
            index = 0
            if chunk & 0x8000 == 0 {
                left = Int(chunk & 0x1FFF)  // run length (0 is legal, if useless)
            } else {
                left = chunk & 0x4000 == 0 ? 14 : 7
            }
        }
        let symbol: UInt8
        if chunk & 0x8000 == 0 {
            symbol = UInt8(truncatingIfNeeded: chunk >> 13) & 3
        } else if chunk & 0x4000 == 0 {
            symbol = UInt8(truncatingIfNeeded: chunk >> (13 - index)) & 1
        } else {
            symbol = UInt8(truncatingIfNeeded: chunk >> (12 - 2 * index)) & 3
        }
        left -= 1
        index += 1
        return symbol
    }
}

extension RtcpWriter {
    /// Transport-wide congestion control feedback for `arrivals[k]`, the packet with
    /// transport-wide sequence number `baseSequence + k`, from `arrivals[0]` on.
    ///
    /// `referenceTime` is in 64 ms units (only its low 24 bits are sent, so it wraps about every
    /// 12 days) and each received arrival's delta is relative to the previous received one, the
    /// first to `referenceTime`. The packet ends early, before an arrival whose delta does not fit
    /// in 16 signed bits, after 65535 arrivals, or when `b` is full; `covered` says how many
    /// arrivals it reports, so the caller writes the rest, with a new reference time, in another
    /// packet. Returns (0, 0), writing nothing useful, when `arrivals` is empty, `arrivals[0]` is
    /// received with a delta that does not fit, or `b` has room for less than 24 bytes.
    @inlinable
    public static func transportFeedback(
        into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, mediaSsrc: UInt32, baseSequence: UInt16,
        referenceTime: Int32, feedbackCount: UInt8, arrivals: UnsafeBufferPointer<TransportFeedback.Arrival>
    ) -> (bytes: Int, covered: Int) {
        // Whole 32-bit words only, and never more than the 16-bit length field can describe.
        let capacity = min(b.count, 0x4_0000) & ~3
        guard capacity >= 24, !arrivals.isEmpty else { return (0, 0) }
        // Arrivals that can be encoded at all: 1...65535 of them, up to the first unencodable delta.
        let limit = min(arrivals.count, 0xFFFF)
        var n = 0
        while n < limit, twccSymbol(arrivals[n]) != 3 { n += 1 }
        guard n > 0 else { return (0, 0) }

        // Status chunks go at 20, 22, …; receive deltas follow the last one. Each chunk is
        // written as soon as it is chosen, then the deltas it covers are counted against the room.
        var i = 0
        var chunks = 0
        var deltaBytes = 0
        while i < n {
            let chunkOffset = 20 + 2 * chunks
            let room = capacity - chunkOffset - 2 - deltaBytes  // for this chunk's deltas
            guard room >= 0 else { break }
            let first = twccSymbol(arrivals[i])
            var run = 1
            while i + run < n, run < 0x1FFF, twccSymbol(arrivals[i + run]) == first { run += 1 }
            // kind: 0 run length, 1 one-bit vector (14 symbols), 2 two-bit vector (7 symbols).
            var kind = 2
            var span = min(7, n - i)
            if run == n - i || run >= 14 {
                kind = 0
                span = run
            } else if n - i > 7, twccFitsOneBit(arrivals, from: i, count: min(14, n - i)) {
                kind = 1
                span = min(14, n - i)
            } else if run >= 7 {
                kind = 0
                span = run
            }
            var take = 0
            var used = 0
            while take < span {
                let size = Int(twccSymbol(arrivals[i + take]))  // 0, 1 or 2 delta bytes
                guard used + size <= room else { break }
                used += size
                take += 1
            }
            guard take > 0 else { break }
            var chunk: UInt16
            switch kind {
            case 0:
                chunk = UInt16(first) << 13 | UInt16(truncatingIfNeeded: take)
            case 1:
                chunk = 0x8000
                for k in 0 ..< take where arrivals[i + k].received { chunk |= 1 << (13 - k) }
            default:
                chunk = 0xC000
                for k in 0 ..< take { chunk |= UInt16(twccSymbol(arrivals[i + k])) << (12 - 2 * k) }
            }
            b.setWireU16(chunkOffset, chunk)
            chunks += 1
            deltaBytes += used
            i += take
            if take < span { break }  // full
        }
        guard i > 0 else { return (0, 0) }

        var o = 20 + 2 * chunks
        for k in 0 ..< i {
            let a = arrivals[k]
            switch twccSymbol(a) {
            case 1:
                b[o] = UInt8(truncatingIfNeeded: a.delta)
                o += 1
            case 2:
                b.setWireU16(o, UInt16(truncatingIfNeeded: a.delta))
                o += 2
            default:
                break
            }
        }
        let length = (o + 3) & ~3
        let padding = length - o
        if padding > 0 {
            for k in o ..< length { b[k] = 0 }
            b[length - 1] = UInt8(truncatingIfNeeded: padding)
        }
        header(b, count: 15, type: RtcpPacketType.transportFeedback, length: length)
        if padding > 0 { b[0] |= 0x20 }
        b.setWireU32(4, senderSsrc)
        b.setWireU32(8, mediaSsrc)
        b.setWireU16(12, baseSequence)
        b.setWireU16(14, UInt16(truncatingIfNeeded: i))
        let time = UInt32(bitPattern: referenceTime)
        b[16] = UInt8(truncatingIfNeeded: time >> 16)
        b[17] = UInt8(truncatingIfNeeded: time >> 8)
        b[18] = UInt8(truncatingIfNeeded: time)
        b[19] = feedbackCount
        return (length, i)
    }

    /// Status symbol for `a` (0 not received, 1 small delta, 2 large delta), or 3 when its delta
    /// does not fit in 16 signed bits.
    @inlinable
    static func twccSymbol(_ a: TransportFeedback.Arrival) -> UInt8 {
        guard a.received else { return 0 }
        if a.delta >= 0, a.delta <= 255 { return 1 }
        if a.delta >= -0x8000, a.delta <= 0x7FFF { return 2 }
        return 3
    }

    /// True when none of `count` arrivals from `start` needs a large delta.
    @inlinable
    static func twccFitsOneBit(_ arrivals: UnsafeBufferPointer<TransportFeedback.Arrival>, from start: Int, count: Int) -> Bool {
        for k in start ..< start + count where twccSymbol(arrivals[k]) > 1 { return false }
        return true
    }
}

extension RtpPacketView {
    /// The transport-wide sequence number (draft-holmer-rmcat-transport-wide-cc-extensions-01
    /// §2) in the header extension element `id`, the id negotiated for
    /// `http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01`; nil when that
    /// element is absent or its value is not 2 bytes.
    @inlinable
    public func transportSequenceNumber(id: UInt8) -> UInt16? {
        guard let value = extensionValue(id: id), value.count == 2 else { return nil }
        return value.wireU16(0)
    }

    /// Overwrites the transport-wide sequence number in the header extension element `id` in
    /// place (an SFU numbers each subscriber's packets itself). Returns false, writing nothing,
    /// when that element is absent or its value is not 2 bytes.
    @inlinable @discardableResult
    public func setTransportSequenceNumber(_ sequence: UInt16, id: UInt8) -> Bool {
        guard let value = extensionValue(id: id), value.count == 2,
              let valueStart = value.baseAddress, let packetStart = buffer.baseAddress else { return false }
        let offset = UnsafeRawPointer(packetStart).distance(to: valueStart)
        guard offset >= 0, offset + 2 <= buffer.count else { return false }
        buffer.setWireU16(offset, sequence)
        return true
    }
}
