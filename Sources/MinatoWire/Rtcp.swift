/// RTCP packet types (RFC 3550, RFC 4585).
public enum RtcpPacketType {
    public static let senderReport: UInt8 = 200
    public static let receiverReport: UInt8 = 201
    public static let sourceDescription: UInt8 = 202
    public static let goodbye: UInt8 = 203
    /// Transport-layer feedback (RFC 4585): FMT 1 generic NACK, FMT 15 transport-wide CC.
    public static let transportFeedback: UInt8 = 205
    /// Payload-specific feedback (RFC 4585): FMT 1 PLI, FMT 4 FIR, FMT 15 REMB (AFB).
    public static let payloadFeedback: UInt8 = 206
}

/// One RTCP packet inside a compound packet; a view, owns nothing.
public struct RtcpPacket {
    public let packetType: UInt8
    /// The 5-bit RC / SC / FMT field.
    public let countOrFormat: UInt8
    /// The whole packet, header included (length from the header's length field).
    public let bytes: UnsafeRawBufferPointer
    /// Byte offset of this packet in the compound packet.
    public let offset: Int

    @inlinable
    public init(packetType: UInt8, countOrFormat: UInt8, bytes: UnsafeRawBufferPointer, offset: Int) {
        self.packetType = packetType
        self.countOrFormat = countOrFormat
        self.bytes = bytes
        self.offset = offset
    }

    @inlinable public var hasPadding: Bool { bytes[0] & 0x20 != 0 }

    /// Bytes after the padding is removed (the whole packet when P is clear or the padding
    /// count is unusable).
    @inlinable public var unpaddedLength: Int {
        guard hasPadding else { return bytes.count }
        let pad = Int(bytes[bytes.count - 1])
        return pad >= 1 && pad <= bytes.count - 4 ? bytes.count - pad : bytes.count
    }
}

/// Walks a compound RTCP packet without allocating. `next()` returns nil at the end, or at
/// the first header that is malformed (version != 2, fewer than 4 bytes left, or a length
/// running past the end); `malformed` then says which.
public struct RtcpIterator {
    @usableFromInline let base: UnsafeRawBufferPointer
    @usableFromInline var position = 0
    @usableFromInline var stoppedOnBadInput = false
    /// True when `next()` stopped because of a malformed header (not at the clean end).
    @inlinable public var malformed: Bool { stoppedOnBadInput }

    @inlinable public init(_ b: UnsafeRawBufferPointer) { base = b }

    @inlinable
    public mutating func next() -> RtcpPacket? {
        guard !stoppedOnBadInput, position < base.count else { return nil }
        let remaining = base.count - position
        guard remaining >= 4, base[position] >> 6 == 2 else {
            stoppedOnBadInput = true
            return nil
        }
        let length = (Int(base.wireU16(position + 2)) + 1) * 4
        guard length <= remaining else {
            stoppedOnBadInput = true
            return nil
        }
        let packet = RtcpPacket(
            packetType: base[position + 1], countOrFormat: base[position] & 0x1F,
            bytes: UnsafeRawBufferPointer(rebasing: base[position ..< position + length]),
            offset: position)
        position += length
        return packet
    }
}

/// A reception report block (RFC 3550 §6.4.1). A parsed value; also used by `RtcpWriter`.
public struct ReportBlock: Sendable, Equatable {
    public var ssrc: UInt32
    public var fractionLost: UInt8
    /// 24-bit signed on the wire; clamped to -8388608...8388607 when written.
    public var cumulativeLost: Int32
    public var extendedHighestSequence: UInt32
    public var jitter: UInt32
    public var lastSR: UInt32
    public var delaySinceLastSR: UInt32

    @inlinable
    public init(
        ssrc: UInt32, fractionLost: UInt8, cumulativeLost: Int32, extendedHighestSequence: UInt32,
        jitter: UInt32, lastSR: UInt32, delaySinceLastSR: UInt32
    ) {
        self.ssrc = ssrc
        self.fractionLost = fractionLost
        self.cumulativeLost = cumulativeLost
        self.extendedHighestSequence = extendedHighestSequence
        self.jitter = jitter
        self.lastSR = lastSR
        self.delaySinceLastSR = delaySinceLastSR
    }

    public static let size = 24

    /// Reads a block at `offset`; the caller checked that 24 bytes fit.
    @inlinable
    init(reading b: UnsafeRawBufferPointer, at o: Int) {
        let raw = b.wireU24(o + 5)
        let lost = raw & 0x80_0000 != 0 ? Int32(bitPattern: raw | 0xFF00_0000) : Int32(raw)
        self.init(
            ssrc: b.wireU32(o), fractionLost: b[o + 4], cumulativeLost: lost,
            extendedHighestSequence: b.wireU32(o + 8), jitter: b.wireU32(o + 12),
            lastSR: b.wireU32(o + 16), delaySinceLastSR: b.wireU32(o + 20))
    }

    @inlinable
    func write(into b: UnsafeMutableRawBufferPointer, at o: Int) {
        b.setWireU32(o, ssrc)
        b[o + 4] = fractionLost
        let lost = UInt32(bitPattern: min(max(cumulativeLost, -0x80_0000), 0x7F_FFFF)) & 0xFF_FFFF
        b[o + 5] = UInt8(truncatingIfNeeded: lost >> 16)
        b[o + 6] = UInt8(truncatingIfNeeded: lost >> 8)
        b[o + 7] = UInt8(truncatingIfNeeded: lost)
        b.setWireU32(o + 8, extendedHighestSequence)
        b.setWireU32(o + 12, jitter)
        b.setWireU32(o + 16, lastSR)
        b.setWireU32(o + 20, delaySinceLastSR)
    }
}

/// Sender report (PT 200). A view over `RtcpPacket.bytes`.
public struct SenderReport {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.senderReport,
              p.bytes.count >= 28 + Int(p.countOrFormat) * ReportBlock.size else { return nil }
        bytes = p.bytes
    }

    @inlinable public var ssrc: UInt32 { bytes.wireU32(4) }
    /// 64-bit NTP timestamp (seconds << 32 | fraction).
    @inlinable public var ntpTimestamp: UInt64 { bytes.wireU64(8) }
    /// The middle 32 bits of the NTP timestamp, as echoed in a report block's LSR.
    @inlinable public var compactNtp: UInt32 { UInt32(truncatingIfNeeded: ntpTimestamp >> 16) }
    @inlinable public var rtpTimestamp: UInt32 { bytes.wireU32(16) }
    @inlinable public var packetCount: UInt32 { bytes.wireU32(20) }
    @inlinable public var octetCount: UInt32 { bytes.wireU32(24) }
    @inlinable public var reportCount: Int { Int(bytes[0] & 0x1F) }

    @inlinable public func reportBlock(at i: Int) -> ReportBlock? {
        guard i >= 0, i < reportCount else { return nil }
        return ReportBlock(reading: bytes, at: 28 + i * ReportBlock.size)
    }

    /// Rewrites an SR's sender fields in place (used when forwarding a publisher's SR to a
    /// subscriber). `bytes` starts at the SR header. Returns false (and writes nothing) when
    /// `bytes` is not an SR of at least 28 bytes.
    @inlinable @discardableResult
    public static func rewrite(
        _ bytes: UnsafeMutableRawBufferPointer, ssrc: UInt32, rtpTimestamp: UInt32,
        packetCount: UInt32, octetCount: UInt32
    ) -> Bool {
        guard bytes.count >= 28, bytes[0] >> 6 == 2, bytes[1] == RtcpPacketType.senderReport else { return false }
        bytes.setWireU32(4, ssrc)
        bytes.setWireU32(16, rtpTimestamp)
        bytes.setWireU32(20, packetCount)
        bytes.setWireU32(24, octetCount)
        return true
    }
}

/// Receiver report (PT 201). A view over `RtcpPacket.bytes`.
public struct ReceiverReport {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.receiverReport,
              p.bytes.count >= 8 + Int(p.countOrFormat) * ReportBlock.size else { return nil }
        bytes = p.bytes
    }

    @inlinable public var ssrc: UInt32 { bytes.wireU32(4) }
    @inlinable public var reportCount: Int { Int(bytes[0] & 0x1F) }

    @inlinable public func reportBlock(at i: Int) -> ReportBlock? {
        guard i >= 0, i < reportCount else { return nil }
        return ReportBlock(reading: bytes, at: 8 + i * ReportBlock.size)
    }
}

/// Source description (PT 202); minimal: chunk count and each chunk's SSRC/CSRC.
public struct Sdes {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.sourceDescription else { return nil }
        bytes = p.bytes
    }

    @inlinable public var chunkCount: Int { Int(bytes[0] & 0x1F) }

    /// SSRC/CSRC of chunk `index`, or nil if absent or the chunks before it are malformed.
    @inlinable public func ssrc(at index: Int) -> UInt32? {
        guard index >= 0, index < chunkCount else { return nil }
        var o = 4
        var k = 0
        while true {
            guard o + 4 <= bytes.count else { return nil }
            if k == index { return bytes.wireU32(o) }
            // Skip items until the null item, then to the next 32-bit boundary.
            var i = o + 4
            while true {
                guard i < bytes.count else { return nil }
                if bytes[i] == 0 { break }
                guard i + 1 < bytes.count else { return nil }
                i += 2 + Int(bytes[i + 1])
            }
            o = (i + 4) & ~3
            k += 1
        }
    }
}

/// Goodbye (PT 203).
public struct Bye {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.goodbye,
              p.bytes.count >= 4 + 4 * Int(p.countOrFormat) else { return nil }
        bytes = p.bytes
    }

    @inlinable public var ssrcCount: Int { Int(bytes[0] & 0x1F) }
    @inlinable public func ssrc(at i: Int) -> UInt32? {
        guard i >= 0, i < ssrcCount else { return nil }
        return bytes.wireU32(4 + 4 * i)
    }
}

/// Picture loss indication (PT 206, FMT 1; RFC 4585 §6.3.1).
public struct PictureLossIndication {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.payloadFeedback, p.countOrFormat == 1,
              p.bytes.count >= 12 else { return nil }
        bytes = p.bytes
    }

    @inlinable public var senderSsrc: UInt32 { bytes.wireU32(4) }
    @inlinable public var mediaSsrc: UInt32 { bytes.wireU32(8) }
}

/// Full intra request (PT 206, FMT 4; RFC 5104 §4.3.1). Entries of 8 bytes after the
/// 12-byte common header (media SSRC there is unused and 0).
public struct FullIntraRequest {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.payloadFeedback, p.countOrFormat == 4,
              p.bytes.count >= 12 else { return nil }
        bytes = p.bytes
    }

    @inlinable public var senderSsrc: UInt32 { bytes.wireU32(4) }
    @inlinable public var mediaSsrc: UInt32 { bytes.wireU32(8) }
    @inlinable public var entryCount: Int { (bytes.count - 12) / 8 }
    @inlinable public func entry(at i: Int) -> (ssrc: UInt32, seq: UInt8)? {
        guard i >= 0, i < entryCount else { return nil }
        return (bytes.wireU32(12 + 8 * i), bytes[16 + 8 * i])
    }
}

/// Generic NACK (PT 205, FMT 1; RFC 4585 §6.2.1).
public struct GenericNack {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == RtcpPacketType.transportFeedback, p.countOrFormat == 1,
              p.bytes.count >= 12 else { return nil }
        bytes = p.bytes
    }

    @inlinable public var senderSsrc: UInt32 { bytes.wireU32(4) }
    @inlinable public var mediaSsrc: UInt32 { bytes.wireU32(8) }
    @inlinable public var pairCount: Int { (bytes.count - 12) / 4 }
    /// Packet id and bitmask of following lost packets (bit i = pid + i + 1).
    @inlinable public func pair(at i: Int) -> (pid: UInt16, blp: UInt16)? {
        guard i >= 0, i < pairCount else { return nil }
        return (bytes.wireU16(12 + 4 * i), bytes.wireU16(14 + 4 * i))
    }
}

/// Receiver estimated maximum bitrate (PT 206, FMT 15, "REMB"; draft-alvestrand-rmcat-remb).
public struct Remb {
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        let b = p.bytes
        guard p.packetType == RtcpPacketType.payloadFeedback, p.countOrFormat == 15,
              b.count >= 20, b.wireU32(12) == 0x5245_4D42,  // "REMB"
              b.count >= 20 + 4 * Int(b[16]) else { return nil }
        bytes = b
    }

    @inlinable public var senderSsrc: UInt32 { bytes.wireU32(4) }
    /// Bits per second: 18-bit mantissa << 6-bit exponent (saturating at UInt64.max).
    @inlinable public var bitrate: UInt64 {
        let exp = UInt64(bytes[17] >> 2)
        let mantissa = UInt64(bytes.wireU24(17) & 0x3_FFFF)
        guard mantissa != 0 else { return 0 }
        if exp >= 64 || mantissa.leadingZeroBitCount < exp { return .max }
        return mantissa << exp
    }
    @inlinable public var ssrcCount: Int { Int(bytes[16]) }
    @inlinable public func ssrc(at i: Int) -> UInt32? {
        guard i >= 0, i < ssrcCount else { return nil }
        return bytes.wireU32(20 + 4 * i)
    }
}

/// Rewrites the sender and media SSRC of an RTCP feedback packet (PT 205/206) in place, e.g.
/// when relaying a subscriber's PLI/NACK to a publisher. Returns false when `bytes` is not a
/// feedback packet of at least 12 bytes.
@inlinable @discardableResult
public func rewriteFeedbackSsrcs(_ bytes: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, mediaSsrc: UInt32) -> Bool {
    guard bytes.count >= 12, bytes[0] >> 6 == 2,
          bytes[1] == RtcpPacketType.transportFeedback || bytes[1] == RtcpPacketType.payloadFeedback
    else { return false }
    bytes.setWireU32(4, senderSsrc)
    bytes.setWireU32(8, mediaSsrc)
    return true
}

/// Builders that write one RTCP packet at the start of a caller buffer and return the bytes
/// written, or 0 (writing nothing) when it does not fit. Stateless.
public enum RtcpWriter {
    @inlinable
    static func header(_ b: UnsafeMutableRawBufferPointer, count: UInt8, type: UInt8, length: Int) {
        b[0] = 0x80 | (count & 0x1F)
        b[1] = type
        b.setWireU16(2, UInt16(length / 4 - 1))
    }

    @inlinable
    public static func pli(into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, mediaSsrc: UInt32) -> Int {
        guard b.count >= 12 else { return 0 }
        header(b, count: 1, type: RtcpPacketType.payloadFeedback, length: 12)
        b.setWireU32(4, senderSsrc)
        b.setWireU32(8, mediaSsrc)
        return 12
    }

    @inlinable
    public static func fir(
        into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, mediaSsrc: UInt32, sequence: UInt8
    ) -> Int {
        guard b.count >= 20 else { return 0 }
        header(b, count: 4, type: RtcpPacketType.payloadFeedback, length: 20)
        b.setWireU32(4, senderSsrc)
        b.setWireU32(8, 0)
        b.setWireU32(12, mediaSsrc)
        b.setWireU32(16, UInt32(sequence) << 24)
        return 20
    }

    @inlinable
    public static func senderReport(
        into b: UnsafeMutableRawBufferPointer, ssrc: UInt32, ntpTimestamp: UInt64, rtpTimestamp: UInt32,
        packetCount: UInt32, octetCount: UInt32
    ) -> Int {
        guard b.count >= 28 else { return 0 }
        header(b, count: 0, type: RtcpPacketType.senderReport, length: 28)
        b.setWireU32(4, ssrc)
        b.setWireU64(8, ntpTimestamp)
        b.setWireU32(16, rtpTimestamp)
        b.setWireU32(20, packetCount)
        b.setWireU32(24, octetCount)
        return 28
    }

    @inlinable
    public static func receiverReport(into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, block: ReportBlock?) -> Int {
        let length = block == nil ? 8 : 32
        guard b.count >= length else { return 0 }
        header(b, count: block == nil ? 0 : 1, type: RtcpPacketType.receiverReport, length: length)
        b.setWireU32(4, senderSsrc)
        block?.write(into: b, at: 8)
        return length
    }

    @inlinable
    public static func nack(
        into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, mediaSsrc: UInt32, pid: UInt16, blp: UInt16
    ) -> Int {
        guard b.count >= 16 else { return 0 }
        header(b, count: 1, type: RtcpPacketType.transportFeedback, length: 16)
        b.setWireU32(4, senderSsrc)
        b.setWireU32(8, mediaSsrc)
        b.setWireU16(12, pid)
        b.setWireU16(14, blp)
        return 16
    }

    /// One generic NACK for `count` sequence numbers in increasing order (modulo 2^16), packed
    /// into as few (pid, blp) pairs as fit: each pair covers its pid and the 16 numbers after
    /// it. Returns 0 (writing nothing) when `count` is 0 or not even one pair fits; when the
    /// buffer fills, the later numbers are left out.
    @inlinable
    public static func nack(
        into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, mediaSsrc: UInt32,
        sequences: UnsafePointer<UInt16>, count: Int
    ) -> Int {
        guard count > 0, b.count >= 16 else { return 0 }
        b.setWireU32(4, senderSsrc)
        b.setWireU32(8, mediaSsrc)
        var length = 12
        var i = 0
        while i < count, length + 4 <= b.count {
            let pid = sequences[i]
            var blp: UInt16 = 0
            i += 1
            while i < count {
                let d = sequences[i] &- pid
                guard d >= 1, d <= 16 else { break }
                blp |= 1 << (d - 1)
                i += 1
            }
            b.setWireU16(length, pid)
            b.setWireU16(length + 2, blp)
            length += 4
        }
        header(b, count: 1, type: RtcpPacketType.transportFeedback, length: length)
        return length
    }

    /// REMB with one media SSRC. `bitrate` is encoded with the smallest exponent that fits
    /// the 18-bit mantissa (rounding down).
    @inlinable
    public static func remb(into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, bitrate: UInt64, mediaSsrc: UInt32) -> Int {
        guard b.count >= 24 else { return 0 }
        header(b, count: 15, type: RtcpPacketType.payloadFeedback, length: 24)
        b.setWireU32(4, senderSsrc)
        b.setWireU32(8, 0)
        b.setWireU32(12, 0x5245_4D42)
        var exp: UInt64 = 0
        var mantissa = bitrate
        while mantissa > 0x3_FFFF { mantissa >>= 1; exp += 1 }
        b[16] = 1
        b[17] = UInt8(truncatingIfNeeded: exp << 2 | mantissa >> 16)
        b.setWireU16(18, UInt16(truncatingIfNeeded: mantissa))
        b.setWireU32(20, mediaSsrc)
        return 24
    }

    /// BYE for one SSRC, no reason.
    @inlinable
    public static func bye(into b: UnsafeMutableRawBufferPointer, ssrc: UInt32) -> Int {
        guard b.count >= 8 else { return 0 }
        header(b, count: 1, type: RtcpPacketType.goodbye, length: 8)
        b.setWireU32(4, ssrc)
        return 8
    }
}
