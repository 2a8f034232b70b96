/// Video codecs whose RTP payload format this module understands for keyframe detection.
public enum VideoCodecKind: Sendable, Equatable, Codable {
    case vp8, vp9, h264, av1, other

    /// Maps a video rtpmap encoding name (case-insensitive) to a codec kind through the codec
    /// map (`ForwardedCodec`); names it does not list are `.other`.
    public init(encodingName: String) {
        self = ForwardedCodec(kind: "video", encodingName: encodingName)?.videoCodec ?? .other
    }
}

/// True when `payload` (the RTP payload, after the RTP header) starts a keyframe:
/// - VP8 (RFC 7741): S=1, PID=0 and the VP8 payload header's P bit is 0.
/// - VP9 (RFC 9628): B=1 (start of frame) and P=0 (not inter-picture predicted).
/// - H.264 (RFC 6184): an IDR slice (5) or SPS (7) as a single NAL unit, inside a STAP-A, or
///   as the first fragment (S=1) of an FU-A.
/// - AV1 (AV1 RTP spec §4.4): N=1 in the aggregation header (first packet of a coded video
///   sequence).
/// Never traps; short or malformed payloads are "not a keyframe".
@inlinable
public func isKeyframe(codec: VideoCodecKind, payload: UnsafeRawBufferPointer) -> Bool {
    switch codec {
    case .vp8: return vp8IsKeyframe(payload)
    case .vp9: return vp9IsKeyframe(payload)
    case .h264: return h264IsKeyframe(payload)
    case .av1: return payload.count >= 1 && payload[0] & 0x08 != 0
    case .other: return false
    }
}

@inlinable
func vp8IsKeyframe(_ p: UnsafeRawBufferPointer) -> Bool {
    guard p.count >= 1 else { return false }
    let b0 = p[0]
    // S bit and partition index 0.
    guard b0 & 0x10 != 0, b0 & 0x0F == 0 else { return false }
    var i = 1
    if b0 & 0x80 != 0 {  // X: extension byte
        guard p.count > i else { return false }
        let x = p[i]
        i += 1
        if x & 0x80 != 0 {  // I: picture id, 7 or 15 bits (M bit)
            guard p.count > i else { return false }
            i += p[i] & 0x80 != 0 ? 2 : 1
        }
        if x & 0x40 != 0 { i += 1 }  // L: TL0PICIDX
        if x & 0x30 != 0 { i += 1 }  // T or K: TID/Y/KEYIDX
    }
    guard p.count > i else { return false }
    return p[i] & 0x01 == 0  // P bit of the VP8 payload header: 0 = key frame
}

@inlinable
func vp9IsKeyframe(_ p: UnsafeRawBufferPointer) -> Bool {
    guard p.count >= 1 else { return false }
    let b0 = p[0]
    // P (0x40) clear and B (0x08) set.
    return b0 & 0x40 == 0 && b0 & 0x08 != 0
}

@inlinable
func h264IsKeyframe(_ p: UnsafeRawBufferPointer) -> Bool {
    guard p.count >= 1 else { return false }
    let type = p[0] & 0x1F
    switch type {
    case 5, 7:
        return true
    case 24:  // STAP-A: [16-bit size][NAL unit]...
        var i = 1
        while i + 2 < p.count {
            let size = Int(p.wireU16(i))
            i += 2
            guard size > 0, i + size <= p.count else { return false }
            let t = p[i] & 0x1F
            if t == 5 || t == 7 { return true }
            i += size
        }
        return false
    case 28, 29:  // FU-A / FU-B: FU header S bit and original type
        guard p.count >= 2 else { return false }
        let fu = p[1]
        let t = fu & 0x1F
        return fu & 0x80 != 0 && (t == 5 || t == 7)
    default:
        return false
    }
}
