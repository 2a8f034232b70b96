// Codec validation for what an SFU forwards: which rtpmap entries of an offer are usable, and
// the fmtp parameters reduced to short safe tokens so they can be written into another
// peer's SDP. Control path; plain Sendable values.

/// The codec map: every codec Minato forwards, with its media kind, the encoding name Minato
/// writes, the RTP clock rate its payload format fixes and its MIME type (RFC 7587 opus,
/// RFC 7741 VP8, RFC 9628 VP9, RFC 6184 H.264, AV1 RTP spec §7). The server (reading a
/// publisher's offer, writing subscribers' SDP) and the client SDK (writing its offers and
/// answers) both look codecs up here and nowhere else.
public enum ForwardedCodec: String, Sendable, CaseIterable, Equatable {
    case opus, vp8, vp9, h264, av1

    /// Matches an rtpmap encoding name (ASCII case-insensitive) for the m-line's media kind.
    public init?(kind: String, encodingName: String) {
        let lower = encodingName.asciiLowercased
        guard let codec = Self.allCases.first(where: { $0.kind == kind && $0.encodingName.asciiLowercased == lower }) else {
            return nil
        }
        self = codec
    }

    /// Matches a MIME type such as "video/VP8" or "audio/opus" (ASCII case-insensitive).
    public init?(mimeType: String) {
        guard let slash = mimeType.firstIndex(of: "/") else { return nil }
        self.init(kind: mimeType[..<slash].asciiLowercased, encodingName: String(mimeType[mimeType.index(after: slash)...]))
    }

    /// "audio" or "video": the m-line media kind this codec travels in.
    public var kind: String { self == .opus ? "audio" : "video" }

    /// "audio/opus", "video/VP8", ...
    public var mimeType: String { kind + "/" + encodingName }

    /// The encoding name as Minato writes it (never the publisher's spelling).
    public var encodingName: String {
        switch self {
        case .opus: return "opus"
        case .vp8: return "VP8"
        case .vp9: return "VP9"
        case .h264: return "H264"
        case .av1: return "AV1"
        }
    }

    /// The only clock rate the payload format allows.
    public var clockRate: UInt32 { self == .opus ? 48_000 : 90_000 }

    public var videoCodec: VideoCodecKind {
        switch self {
        case .opus: return .other
        case .vp8: return .vp8
        case .vp9: return .vp9
        case .h264: return .h264
        case .av1: return .av1
        }
    }
}

/// The parameters of an `a=fmtp` line, reduced to what is safe to write into another peer's
/// SDP: `key=value` pairs (separated by `;`, spaces around them ignored) whose key is 1–32 and
/// value 1–64 bytes of letters, digits and `- _ . / ,`; at most 16, in the sender's order.
/// Everything else (flags without `=`, other characters, longer tokens, more parameters) is
/// dropped, never copied. A plain value.
public struct FmtpParameters: Sendable, Equatable {
    public struct Parameter: Sendable, Equatable {
        public var key: String
        public var value: String
    }

    public static let maxKeyLength = 32
    public static let maxValueLength = 64
    public static let maxCount = 16

    public private(set) var parameters: [Parameter]

    public init() { parameters = [] }

    /// Parses the text after `a=fmtp:<pt> `.
    public init(parsing text: String) {
        var kept: [Parameter] = []
        for raw in text.utf8.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: true) {
            guard kept.count < Self.maxCount else { break }
            var item = raw[...]
            while item.first == UInt8(ascii: " ") { item = item.dropFirst() }
            while item.last == UInt8(ascii: " ") { item = item.dropLast() }
            guard let eq = item.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = item[item.startIndex..<eq], value = item[item.index(after: eq)...]
            guard Self.isToken(key, maxLength: Self.maxKeyLength), Self.isToken(value, maxLength: Self.maxValueLength)
            else { continue }
            kept.append(Parameter(key: String(decoding: key, as: UTF8.self), value: String(decoding: value, as: UTF8.self)))
        }
        parameters = kept
    }

    /// The value of `key` (ASCII case-insensitive, as MIME parameter names are), or nil.
    public subscript(key: String) -> String? {
        let wanted = key.lowercased()
        return parameters.first { $0.key.lowercased() == wanted }?.value
    }

    public var isEmpty: Bool { parameters.isEmpty }

    /// Sets `key` to `value`: the first parameter with that key (ASCII case-insensitive) takes
    /// the value, else the pair is appended (the last parameter makes room when `maxCount` are
    /// kept). Nothing changes unless both are tokens as `init(parsing:)` keeps them.
    public mutating func set(_ key: String, to value: String) {
        guard Self.isToken(key.utf8, maxLength: Self.maxKeyLength), Self.isToken(value.utf8, maxLength: Self.maxValueLength)
        else { return }
        let wanted = key.lowercased()
        if let i = parameters.firstIndex(where: { $0.key.lowercased() == wanted }) {
            parameters[i].value = value
            return
        }
        if parameters.count >= Self.maxCount { parameters.removeLast() }
        parameters.append(Parameter(key: key, value: value))
    }

    /// `key=value;key=value`, or nil when nothing was kept.
    public var text: String? {
        parameters.isEmpty ? nil : parameters.map { $0.key + "=" + $0.value }.joined(separator: ";")
    }

    static func isToken<C: Collection>(_ bytes: C, maxLength: Int) -> Bool where C.Element == UInt8 {
        let n = bytes.count
        guard n >= 1, n <= maxLength else { return false }
        return bytes.allSatisfy(isSafeTokenByte)
    }
}

extension StringProtocol {
    /// ASCII letters lowered, everything else unchanged (no locale, no Foundation).
    var asciiLowercased: String {
        String(decoding: utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }
}

/// Letters, digits and `- _ . / ,`: what Minato lets through from one peer's SDP to another's.
@inline(__always)
func isSafeTokenByte(_ b: UInt8) -> Bool {
    switch b {
    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
    case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "/"), UInt8(ascii: ","): return true
    default: return false
    }
}

/// True when `mid` is 1–32 characters of `A-Z a-z 0-9 _ -` (what Minato accepts as an
/// `a=mid` value; RFC 8843 allows more, no browser sends more).
public func isValidMid<S: StringProtocol>(_ mid: S) -> Bool { isSdpIdentifier(mid, maxLength: 32) }

/// 1...`maxLength` characters of `[A-Za-z0-9_-]`: the identifiers (mid, RID) the SFU writes
/// back into other peers' SDP.
public func isSdpIdentifier<S: StringProtocol>(_ s: S, maxLength: Int) -> Bool {
    let utf8 = s.utf8
    guard utf8.count >= 1, utf8.count <= maxLength else { return false }
    return utf8.allSatisfy { b in
        (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b)
            || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
    }
}

/// One codec of an m-line that Minato can forward, validated: payload type 0...127, the
/// codec's own clock rate, opus with 1 or 2 channels (absent means 2), H.264 with
/// packetization-mode=1. Every text field is Minato's own or a safe token.
public struct ForwardableCodec: Sendable, Equatable {
    public var payloadType: UInt8
    public var codec: ForwardedCodec
    /// Always `codec.clockRate`.
    public var clockRate: UInt32
    /// opus: 1 or 2; video: nil.
    public var channels: UInt8?
    public var parameters: FmtpParameters
    /// `a=rtcp-fb` values for this payload type (wildcards included), e.g. "nack pli".
    public var feedback: [String]

    /// A codec to write: the clock rate is the codec map's; `channels` is kept for opus only
    /// (1, else 2) and dropped for video.
    public init(payloadType: UInt8, codec: ForwardedCodec, channels: UInt8? = nil,
                parameters: FmtpParameters = FmtpParameters(), feedback: [String] = []) {
        self.payloadType = payloadType & 0x7F
        self.codec = codec
        self.clockRate = codec.clockRate
        self.channels = codec == .opus ? (channels == 1 ? 1 : 2) : nil
        self.parameters = parameters
        self.feedback = feedback
    }

    /// The `a=rtpmap` value in Minato's spelling: "111 opus/48000/2", "96 VP8/90000".
    public var rtpMap: RtpMap {
        RtpMap(payloadType: payloadType, encodingName: codec.encodingName, clockRate: Int(clockRate),
               channels: channels.map(Int.init))
    }

    /// `a=rtpmap`, `a=fmtp` (the rebuilt parameters, when any were kept) and one `a=rtcp-fb`
    /// per value of `feedback`, in that order.
    public func attributes(feedback: [String]) -> [SdpAttribute] {
        var out = [SdpAttribute(name: "rtpmap", value: rtpMap.attributeValue)]
        if let text = parameters.text { out.append(SdpAttribute(name: "fmtp", value: "\(payloadType) \(text)")) }
        for fb in feedback { out.append(SdpAttribute(name: "rtcp-fb", value: "\(payloadType) \(fb)")) }
        return out
    }
}

extension MediaDescription {
    /// The codecs of this m-line Minato can forward, in the sender's preference order (the
    /// m= format list). A format is skipped when its rtpmap is missing, names another codec or
    /// a codec of the other media kind, has a clock rate other than the codec's, has an opus
    /// channel count other than 1 or 2, or (H.264) lacks packetization-mode=1. Linear in the
    /// m-section's size (one pass builds its `PayloadTypeIndex`).
    public var forwardableCodecs: [ForwardableCodec] { forwardableCodecs(payloadTypeIndex) }

    /// `forwardableCodecs` read from this m-section's `index`.
    public func forwardableCodecs(_ index: PayloadTypeIndex) -> [ForwardableCodec] {
        var out: [ForwardableCodec] = []
        for pt in index.listed {
            guard let map = index.rtpMap(for: pt),
                  let codec = ForwardedCodec(kind: kind, encodingName: map.encodingName),
                  map.clockRate == Int(codec.clockRate) else { continue }
            var channels: UInt8?
            if codec == .opus {
                switch map.channels {
                case .none, .some(2): channels = 2
                case .some(1): channels = 1
                default: continue
                }
            }
            let parameters = index.fmtp(for: pt).map(FmtpParameters.init(parsing:)) ?? FmtpParameters()
            if codec == .h264, parameters["packetization-mode"] != "1" { continue }
            out.append(ForwardableCodec(payloadType: pt, codec: codec, channels: channels,
                                        parameters: parameters, feedback: index.rtcpFeedback(for: pt)))
        }
        return out
    }
}
