/// RTCP extended report (PT 207, RFC 3611) — the two blocks that give a receive-only peer its
/// round-trip time: the receiver reference time (RRTR, block type 4) it sends, and the DLRR
/// (block type 5) answer that echoes it. A view over `RtcpPacket.bytes`.
public struct ExtendedReport {
    public static let packetType: UInt8 = 207
    public let bytes: UnsafeRawBufferPointer

    @inlinable
    public init?(_ p: RtcpPacket) {
        guard p.packetType == Self.packetType, p.bytes.count >= 8 else { return nil }
        bytes = p.bytes
    }

    @inlinable public var senderSsrc: UInt32 { bytes.wireU32(4) }

    /// The NTP timestamp of the first receiver reference time block, if any (blocks whose
    /// length runs past the packet end the walk).
    @inlinable public var receiverReferenceTime: UInt64? {
        var o = 8
        while o + 4 <= bytes.count {
            let blockType = bytes[o]
            let length = (Int(bytes.wireU16(o + 2)) + 1) * 4
            guard o + length <= bytes.count else { return nil }
            if blockType == 4, length == 12 { return bytes.wireU64(o + 4) }
            o += length
        }
        return nil
    }
}

extension RtcpWriter {
    /// An extended report with one DLRR block for one receiver (RFC 3611 4.5): `lastReference`
    /// is the middle 32 bits of its RRTR's NTP time, `delay` the time since that RRTR arrived in
    /// 1/65536 s. 24 bytes, or 0 when they do not fit.
    @inlinable
    public static func dlrr(into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32, receiverSsrc: UInt32,
                            lastReference: UInt32, delay: UInt32) -> Int {
        guard b.count >= 24 else { return 0 }
        header(b, count: 0, type: ExtendedReport.packetType, length: 24)
        b.setWireU32(4, senderSsrc)
        b[8] = 5
        b[9] = 0
        b.setWireU16(10, 3)
        b.setWireU32(12, receiverSsrc)
        b.setWireU32(16, lastReference)
        b.setWireU32(20, delay)
        return 24
    }

    /// An extended report with one RRTR block carrying `ntpTimestamp` (for tests and peers). 20 bytes.
    @inlinable
    public static func receiverReferenceTime(into b: UnsafeMutableRawBufferPointer, senderSsrc: UInt32,
                                             ntpTimestamp: UInt64) -> Int {
        guard b.count >= 20 else { return 0 }
        header(b, count: 0, type: ExtendedReport.packetType, length: 20)
        b.setWireU32(4, senderSsrc)
        b[8] = 4
        b[9] = 0
        b.setWireU16(10, 2)
        b.setWireU64(12, ntpTimestamp)
        return 20
    }
}
