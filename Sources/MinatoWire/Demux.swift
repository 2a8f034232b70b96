/// What a datagram on a bundled, rtcp-muxed WebRTC 5-tuple carries.
public enum PacketKind: Sendable, Equatable {
    case stun, dtls, rtp, rtcp, unknown
}

/// Classifies a datagram by its first byte (RFC 7983 §7) and, for RTP/RTCP, by the second
/// byte (RFC 5761 §4: RTCP packet types 192...223 put `byte & 0x7F` in 64...95).
/// Empty input, a 1-byte RTP-range datagram, and the ZRTP/TURN-channel ranges are `.unknown`.
@inlinable
public func classifyPacket(_ b: UnsafeRawBufferPointer) -> PacketKind {
    guard let first = b.first else { return .unknown }
    switch first {
    case 0...3: return .stun
    case 20...63: return .dtls
    case 128...191:
        guard b.count >= 2 else { return .unknown }
        let pt = b[1] & 0x7F
        return (64...95).contains(pt) ? .rtcp : .rtp
    default: return .unknown
    }
}
