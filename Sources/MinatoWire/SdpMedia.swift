/// One media section (`m=` and the lines after it until the next `m=`). All attributes are
/// kept verbatim and in order; the typed accessors read (and, where settable, edit) them.
public struct MediaDescription: Sendable, Equatable {
    /// "audio", "video", "application", or anything else a peer sent.
    public var kind: String
    public var port: Int
    /// The `/<n>` after the port, if present.
    public var portCount: Int?
    public var proto: String
    public var formats: [String]
    /// The `c=` value.
    public var connection: String?
    /// `b=` values, e.g. "AS:500", "TIAS:500000".
    public var bandwidths: [String]
    /// Lines kept uninterpreted (`i=`, `k=`, extra `c=`, unknown letters), in order.
    public var otherLines: [SdpLine]
    /// All `a=` lines, in order, verbatim.
    public var attributes: [SdpAttribute]

    public init(
        kind: String, port: Int = 9, portCount: Int? = nil, proto: String = "UDP/TLS/RTP/SAVPF",
        formats: [String], connection: String? = "IN IP4 0.0.0.0", bandwidths: [String] = [],
        otherLines: [SdpLine] = [], attributes: [SdpAttribute] = []
    ) {
        self.kind = kind
        self.port = port
        self.portCount = portCount
        self.proto = proto
        self.formats = formats
        self.connection = connection
        self.bandwidths = bandwidths
        self.otherLines = otherLines
        self.attributes = attributes
    }

    init(mediaLine value: Substring, maxFormats: Int = .max) throws(SdpSyntaxError) {
        let f = value.sdpFields
        guard f.count >= 1, !f[0].isEmpty else { throw SdpSyntaxError("m= line has no media type") }
        guard f.count >= 2 else { throw SdpSyntaxError("m= line has no port") }
        guard f.count >= 3 else { throw SdpSyntaxError("m= line has no protocol") }
        guard f.count - 3 <= maxFormats else {
            throw SdpSyntaxError("m= line lists \(f.count - 3) formats, more than \(maxFormats)", overFormatLimit: true)
        }
        let portField = f[1].split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let port = Int(decimal: portField[0]), port <= 65535 else { throw SdpSyntaxError("m= port is not a number in 0...65535") }
        var count: Int?
        if portField.count == 2 {
            guard let c = Int(decimal: portField[1]), c >= 1 else { throw SdpSyntaxError("m= port count is not a positive number") }
            count = c
        }
        let proto = String(f[2])
        let formats = f.dropFirst(3).map(String.init)
        if proto.contains("RTP") {
            for fmt in formats {
                guard let pt = Int(decimal: Substring(fmt)), pt <= 127 else {
                    throw SdpSyntaxError("m= payload type \(fmt) is not a number in 0...127")
                }
            }
        }
        self.init(kind: String(f[0]), port: port, portCount: count, proto: proto, formats: formats, connection: nil)
    }

    /// The value of the `m=` line.
    public var mediaLine: String {
        var s = kind + " " + String(port)
        if let portCount { s += "/" + String(portCount) }
        s += " " + proto
        for f in formats { s += " " + f }
        return s
    }

    /// Formats as payload types (RTP profiles); non-numeric formats are skipped.
    public var payloadTypes: [UInt8] { formats.compactMap { UInt8(decimal: Substring($0)) } }

    // MARK: Typed accessors

    public var mid: String? {
        get { attributes.firstValue(named: "mid") }
        set { attributes.set("mid", newValue) }
    }

    /// The first direction attribute; `.sendrecv` when none (RFC 8866 §6.7). Setting replaces
    /// the first direction attribute in place (removing any others) or appends one.
    public var direction: MediaDirection {
        get {
            for a in attributes where a.value == nil {
                if let d = MediaDirection(rawValue: a.name) { return d }
            }
            return .sendrecv
        }
        set {
            let isDirection: (SdpAttribute) -> Bool = { $0.value == nil && MediaDirection(rawValue: $0.name) != nil }
            if let i = attributes.firstIndex(where: isDirection) {
                attributes[i] = SdpAttribute(name: newValue.rawValue)
                attributes.removeAll(after: i, where: isDirection)
            } else {
                attributes.append(SdpAttribute(name: newValue.rawValue))
            }
        }
    }

    public var rtcpMux: Bool {
        get { attributes.contains(named: "rtcp-mux") }
        set { attributes.setFlag("rtcp-mux", newValue) }
    }
    public var rtcpReducedSize: Bool { attributes.contains(named: "rtcp-rsize") }
    public var bundleOnly: Bool { attributes.contains(named: "bundle-only") }

    public var rtpMaps: [RtpMap] { attributes.values(named: "rtpmap").compactMap(RtpMap.init(attributeValue:)) }
    public func rtpMap(for payloadType: UInt8) -> RtpMap? { rtpMaps.first { $0.payloadType == payloadType } }

    /// The `a=fmtp:<pt> <params>` parameters for `payloadType`.
    public func fmtp(for payloadType: UInt8) -> String? {
        for v in attributes.values(named: "fmtp") {
            if let (pt, rest) = v.splitPayloadType(), pt == String(payloadType) { return rest }
        }
        return nil
    }

    /// `a=rtcp-fb` values for `payloadType`, e.g. ["nack", "nack pli", "ccm fir"], including
    /// `a=rtcp-fb:* ...` wildcard lines, in order.
    public func rtcpFeedback(for payloadType: UInt8) -> [String] {
        attributes.values(named: "rtcp-fb").compactMap { v in
            guard let (pt, rest) = v.splitPayloadType(), pt == "*" || pt == String(payloadType) else { return nil }
            return rest
        }
    }

    public var extMaps: [ExtMap] { attributes.values(named: "extmap").compactMap(ExtMap.init(attributeValue:)) }

    public var ssrcs: [SsrcLine] { attributes.values(named: "ssrc").compactMap(SsrcLine.init(attributeValue:)) }
    /// Distinct SSRCs from `a=ssrc` lines, in first-seen order.
    public var ssrcIds: [UInt32] {
        var seen = Set<UInt32>(), out: [UInt32] = []
        for s in ssrcs where seen.insert(s.ssrc).inserted { out.append(s.ssrc) }
        return out
    }
    public var ssrcGroups: [SsrcGroup] {
        attributes.values(named: "ssrc-group").compactMap(SsrcGroup.init(attributeValue:))
    }

    public var msid: String? { attributes.firstValue(named: "msid") }
    public var iceUfrag: String? { attributes.firstValue(named: "ice-ufrag") }
    public var icePwd: String? { attributes.firstValue(named: "ice-pwd") }
    public var iceOptions: String? { attributes.firstValue(named: "ice-options") }
    public var setup: String? { attributes.firstValue(named: "setup") }
    public var fingerprint: Fingerprint? { fingerprints.first }
    public var fingerprints: [Fingerprint] {
        attributes.values(named: "fingerprint").compactMap(Fingerprint.init(attributeValue:))
    }

    /// `a=candidate:` values, whole ("1 1 udp 2130706431 127.0.0.1 5000 typ host ...").
    public var candidates: [String] { attributes.values(named: "candidate") }
    public var endOfCandidates: Bool { attributes.contains(named: "end-of-candidates") }

    public var rids: [Rid] { attributes.values(named: "rid").compactMap(Rid.init(attributeValue:)) }
    /// The `a=simulcast:` value, e.g. "send q;h;f".
    public var simulcast: String? { attributes.firstValue(named: "simulcast") }
}

/// `a=rtpmap:<pt> <encoding>/<clock>[/<channels>]`.
public struct RtpMap: Sendable, Equatable {
    public var payloadType: UInt8
    public var encodingName: String
    public var clockRate: Int
    public var channels: Int?

    public init(payloadType: UInt8, encodingName: String, clockRate: Int, channels: Int? = nil) {
        self.payloadType = payloadType
        self.encodingName = encodingName
        self.clockRate = clockRate
        self.channels = channels
    }

    public init?(attributeValue v: String) {
        guard let (ptText, rest) = v.splitPayloadType(), let pt = UInt8(decimal: Substring(ptText)), pt <= 127 else { return nil }
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, !parts[0].isEmpty, !parts[0].contains(" "),
              let rate = Int(decimal: parts[1]), rate > 0 else { return nil }
        var channels: Int?
        if parts.count == 3 {
            guard let c = Int(decimal: parts[2]), c > 0 else { return nil }
            channels = c
        }
        self.init(payloadType: pt, encodingName: String(parts[0]), clockRate: rate, channels: channels)
    }

    public var attributeValue: String {
        "\(payloadType) \(encodingName)/\(clockRate)" + (channels.map { "/\($0)" } ?? "")
    }
}

/// `a=extmap:<id>[/<direction>] <uri> [<extension attributes>]` (RFC 8285 §8).
public struct ExtMap: Sendable, Equatable {
    public var id: UInt8
    public var direction: String?
    public var uri: String
    public var extensionAttributes: String?

    public init(id: UInt8, direction: String? = nil, uri: String, extensionAttributes: String? = nil) {
        self.id = id
        self.direction = direction
        self.uri = uri
        self.extensionAttributes = extensionAttributes
    }

    public init?(attributeValue v: String) {
        let f = Substring(v).sdpFields
        guard f.count >= 2 else { return nil }
        let idParts = f[0].split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let id = UInt8(decimal: idParts[0]), id >= 1 else { return nil }
        var direction: String?
        if idParts.count == 2 {
            guard MediaDirection(rawValue: String(idParts[1])) != nil else { return nil }
            direction = String(idParts[1])
        }
        let extra = f.count > 2 ? f.dropFirst(2).joined(separator: " ") : nil
        self.init(id: id, direction: direction, uri: String(f[1]), extensionAttributes: extra)
    }

    public var attributeValue: String {
        var s = String(id)
        if let direction { s += "/" + direction }
        s += " " + uri
        if let extensionAttributes { s += " " + extensionAttributes }
        return s
    }
}

/// `a=ssrc:<ssrc> <attribute>[:<value>]` (RFC 5576).
public struct SsrcLine: Sendable, Equatable {
    public var ssrc: UInt32
    public var attribute: String
    public var value: String?

    public init(ssrc: UInt32, attribute: String, value: String? = nil) {
        self.ssrc = ssrc
        self.attribute = attribute
        self.value = value
    }

    public init?(attributeValue v: String) {
        guard let space = v.firstIndex(of: " "), let ssrc = UInt32(decimal: v[..<space]) else { return nil }
        let rest = v[v.index(after: space)...]
        guard !rest.isEmpty, rest.first != " " else { return nil }
        if let colon = rest.firstIndex(of: ":") {
            guard colon != rest.startIndex else { return nil }
            self.init(ssrc: ssrc, attribute: String(rest[..<colon]), value: String(rest[rest.index(after: colon)...]))
        } else {
            self.init(ssrc: ssrc, attribute: String(rest))
        }
    }

    public var attributeValue: String { "\(ssrc) \(attribute)" + (value.map { ":" + $0 } ?? "") }
}

/// `a=ssrc-group:<semantics> <ssrc>...` (RFC 5576 §4.2), e.g. FID, SIM.
public struct SsrcGroup: Sendable, Equatable {
    public var semantics: String
    public var ssrcs: [UInt32]

    public init(semantics: String, ssrcs: [UInt32]) {
        self.semantics = semantics
        self.ssrcs = ssrcs
    }

    public init?(attributeValue v: String) {
        let f = Substring(v).sdpFields
        guard f.count >= 2 else { return nil }
        var ssrcs: [UInt32] = []
        for s in f.dropFirst() {
            guard let n = UInt32(decimal: s) else { return nil }
            ssrcs.append(n)
        }
        self.init(semantics: String(f[0]), ssrcs: ssrcs)
    }

    public var attributeValue: String { ([semantics] + ssrcs.map { String($0) }).joined(separator: " ") }
}

/// `a=fingerprint:<hash-function> <hex:hex:...>` (RFC 8122).
public struct Fingerprint: Sendable, Equatable {
    /// e.g. "sha-256" (as sent; compare case-insensitively).
    public var algorithm: String
    /// Colon-separated uppercase-or-lowercase hex pairs, as sent.
    public var value: String

    public init(algorithm: String, value: String) {
        self.algorithm = algorithm
        self.value = value
    }

    public init?(attributeValue v: String) {
        let f = Substring(v).sdpFields
        guard f.count == 2, !f[0].isEmpty else { return nil }
        let pairs = f[1].split(separator: ":", omittingEmptySubsequences: false)
        for p in pairs {
            guard p.utf8.count == 2, p.utf8.allSatisfy(\.isHexDigit) else { return nil }
        }
        self.init(algorithm: String(f[0]), value: String(f[1]))
    }

    /// The digest bytes.
    public var bytes: [UInt8] {
        value.split(separator: ":").compactMap { UInt8($0, radix: 16) }
    }

    public var attributeValue: String { "\(algorithm) \(value)" }
}

/// `a=rid:<id> <send|recv> [<params>]` (RFC 8851).
public struct Rid: Sendable, Equatable {
    public var id: String
    /// "send" or "recv".
    public var direction: String
    /// e.g. "pt=96;max-width=640", or nil.
    public var params: String?

    public init(id: String, direction: String, params: String? = nil) {
        self.id = id
        self.direction = direction
        self.params = params
    }

    public init?(attributeValue v: String) {
        let f = Substring(v).sdpFields
        guard f.count >= 2, f[1] == "send" || f[1] == "recv" else { return nil }
        self.init(id: String(f[0]), direction: String(f[1]),
                  params: f.count > 2 ? f.dropFirst(2).joined(separator: " ") : nil)
    }

    public var attributeValue: String { "\(id) \(direction)" + (params.map { " " + $0 } ?? "") }
}

// MARK: - Attribute list helpers

extension Array where Element == SdpAttribute {
    public func contains(named name: String) -> Bool { contains { $0.name == name } }

    /// Value of the first attribute called `name` ("" for a flag attribute), or nil.
    public func firstValue(named name: String) -> String? {
        first { $0.name == name }.map { $0.value ?? "" }
    }

    /// Values of every attribute called `name`, in order ("" for flags).
    public func values(named name: String) -> [String] {
        filter { $0.name == name }.map { $0.value ?? "" }
    }

    /// Replaces the first `name` attribute's value in place (removing later ones), appends
    /// one if absent, or removes all of them when `value` is nil.
    public mutating func set(_ name: String, _ value: String?) {
        guard let value else {
            removeAll { $0.name == name }
            return
        }
        if let i = firstIndex(where: { $0.name == name }) {
            self[i].value = value
            removeAll(after: i) { $0.name == name }
        } else {
            append(SdpAttribute(name: name, value: value))
        }
    }

    /// Removes the attributes after index `i` that match, in one pass.
    mutating func removeAll(after i: Int, where matches: (SdpAttribute) -> Bool) {
        var kept = i + 1
        for k in (i + 1)..<count where !matches(self[k]) {
            if k != kept { self[kept] = self[k] }
            kept += 1
        }
        removeSubrange(kept...)
    }

    /// Adds (if absent) or removes a value-less flag attribute such as `rtcp-mux`.
    public mutating func setFlag(_ name: String, _ on: Bool) {
        if on {
            if !contains(named: name) { append(SdpAttribute(name: name)) }
        } else {
            removeAll { $0.name == name }
        }
    }
}

extension SdpAttribute {
    /// Splits `a=` line text at the first colon.
    init(line: Substring) {
        if let colon = line.firstIndex(of: ":") {
            self.init(name: String(line[..<colon]), value: String(line[line.index(after: colon)...]))
        } else {
            self.init(name: String(line))
        }
    }

    /// Why this attribute is malformed, for the attributes the server relies on; nil if fine.
    var syntaxProblem: String? {
        guard !name.isEmpty else { return "a= line has no attribute name" }
        let v = value ?? ""
        switch name {
        case "rtpmap":
            return RtpMap(attributeValue: v) == nil ? "bad rtpmap (want <pt> <encoding>/<clock>[/<channels>])" : nil
        case "fmtp":
            guard let (pt, _) = v.splitPayloadType(), let n = UInt8(decimal: Substring(pt)), n <= 127 else {
                return "bad fmtp (want <pt> <parameters>)"
            }
            return nil
        case "rtcp-fb":
            guard let (pt, rest) = v.splitPayloadType(), !rest.isEmpty,
                  pt == "*" || (UInt8(decimal: Substring(pt)).map { $0 <= 127 } ?? false) else {
                return "bad rtcp-fb (want <pt>|* <type> [<parameters>])"
            }
            return nil
        case "extmap":
            return ExtMap(attributeValue: v) == nil ? "bad extmap (want <id 1-255>[/<direction>] <uri>)" : nil
        case "ssrc":
            return SsrcLine(attributeValue: v) == nil ? "bad ssrc (want <ssrc> <attribute>[:<value>])" : nil
        case "ssrc-group":
            return SsrcGroup(attributeValue: v) == nil ? "bad ssrc-group (want <semantics> <ssrc>...)" : nil
        case "fingerprint":
            return Fingerprint(attributeValue: v) == nil ? "bad fingerprint (want <hash> <hex>:<hex>...)" : nil
        case "rid":
            return Rid(attributeValue: v) == nil ? "bad rid (want <id> send|recv [<params>])" : nil
        case "mid":
            return isValidMid(v) ? nil : "bad mid (want 1-32 characters of A-Z a-z 0-9 _ -)"
        default:
            return nil
        }
    }
}

// MARK: - Small text helpers (no Foundation)

extension StringProtocol {
    /// Space-separated fields, empty fields dropped.
    var sdpFields: [SubSequence] { split(separator: " ") }

    /// "<pt> <rest>" → (pt, rest); nil if there is no space or pt is empty.
    func splitPayloadType() -> (String, String)? {
        guard let space = firstIndex(of: " "), space != startIndex else { return nil }
        return (String(self[..<space]), String(self[index(after: space)...]))
    }
}

extension UInt8 {
    var isHexDigit: Bool {
        (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self)
    }
}

extension FixedWidthInteger {
    /// Only ASCII digits (no sign, no spaces), non-empty, in range.
    init?<S: StringProtocol>(decimal s: S) {
        guard !s.isEmpty, s.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        guard let v = Self(s, radix: 10) else { return nil }
        self = v
    }
}
