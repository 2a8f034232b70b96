// SDP (RFC 8866) as WebRTC stacks send it. Control path: Strings and arrays are fine here.
// Every type is a plain Sendable value; use from any thread.

/// A parse failure: the 1-based line number, the line's text and a reason a person can act
/// on. Used by the server's `invalidSdp` protocol error with the offending line in `detail`.
public struct SdpError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var text: String
    public var reason: String

    public init(line: Int, text: String, reason: String) {
        self.line = line
        self.text = text
        self.reason = reason
    }

    /// "line 7: m= line has no port: m=audio"
    public var description: String { "line \(line): \(reason): \(text)" }
}

/// One `a=` line: `a=name` (value nil) or `a=name:value` (value kept verbatim, may be "").
public struct SdpAttribute: Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var value: String?

    public init(name: String, value: String? = nil) {
        self.name = name
        self.value = value
    }

    /// The text after `a=`.
    public var description: String { value.map { "\(name):\($0)" } ?? name }
}

/// A line this model keeps without interpreting (`i=`, `u=`, `e=`, `p=`, `k=`, `r=`, `z=`,
/// extra `t=`/`c=`, and unknown letters), in the order parsed.
public struct SdpLine: Sendable, Equatable {
    public var type: Character
    public var value: String

    public init(type: Character, value: String) {
        self.type = type
        self.value = value
    }
}

/// The `o=` line (RFC 8866 §5.2). Session id and version are kept as text: some stacks
/// send numbers wider than 64 bits.
public struct SdpOrigin: Sendable, Equatable, CustomStringConvertible {
    public var username: String
    public var sessionId: String
    public var sessionVersion: String
    public var networkType: String
    public var addressType: String
    public var address: String

    public init(
        username: String = "-", sessionId: String, sessionVersion: String, networkType: String = "IN",
        addressType: String = "IP4", address: String = "0.0.0.0"
    ) {
        self.username = username
        self.sessionId = sessionId
        self.sessionVersion = sessionVersion
        self.networkType = networkType
        self.addressType = addressType
        self.address = address
    }

    public var description: String {
        "\(username) \(sessionId) \(sessionVersion) \(networkType) \(addressType) \(address)"
    }
}

public enum MediaDirection: String, Sendable, CaseIterable {
    case sendrecv, sendonly, recvonly, inactive

    /// The direction seen from the other side (sendonly <-> recvonly).
    public var reversed: MediaDirection {
        switch self {
        case .sendonly: return .recvonly
        case .recvonly: return .sendonly
        default: return self
        }
    }
}

/// A whole session description. `serialize()` writes lines in RFC 8866 order (v o s, then
/// i u e p, c, b, t, then r z k and unknown letters, then a=), each kind in parsed order,
/// which is the order every WebRTC stack uses, so parse → serialize reproduces their text.
public struct SessionDescription: Sendable, Equatable {
    public var version: Int
    public var origin: SdpOrigin
    public var sessionName: String
    /// The first `t=` value ("0 0" in WebRTC), or nil if absent.
    public var timing: String?
    /// Session-level `c=` value.
    public var connection: String?
    /// Session-level `b=` values, e.g. "AS:2000".
    public var bandwidths: [String]
    /// Lines kept uninterpreted (see `SdpLine`).
    public var otherLines: [SdpLine]
    /// Session-level attributes, in order, verbatim.
    public var attributes: [SdpAttribute]
    public var media: [MediaDescription]

    public init(
        version: Int = 0, origin: SdpOrigin, sessionName: String = "-", timing: String? = "0 0",
        connection: String? = nil, bandwidths: [String] = [], otherLines: [SdpLine] = [],
        attributes: [SdpAttribute] = [], media: [MediaDescription] = []
    ) {
        self.version = version
        self.origin = origin
        self.sessionName = sessionName
        self.timing = timing
        self.connection = connection
        self.bandwidths = bandwidths
        self.otherLines = otherLines
        self.attributes = attributes
        self.media = media
    }

    // MARK: Session-level conveniences

    /// Mids of `a=group:BUNDLE`, or nil without one.
    public var bundleGroup: [String]? {
        get {
            for a in attributes where a.name == "group" {
                let parts = (a.value ?? "").sdpFields
                if parts.first == "BUNDLE" { return parts.dropFirst().map(String.init) }
            }
            return nil
        }
        set {
            let index = attributes.firstIndex { $0.name == "group" && ($0.value ?? "").sdpFields.first == "BUNDLE" }
            guard let mids = newValue else {
                if let index { attributes.remove(at: index) }
                return
            }
            let attribute = SdpAttribute(name: "group", value: (["BUNDLE"] + mids).joined(separator: " "))
            if let index { attributes[index] = attribute } else { attributes.append(attribute) }
        }
    }

    public var iceLite: Bool {
        get { attributes.contains(named: "ice-lite") }
        set { attributes.setFlag("ice-lite", newValue) }
    }
    public var iceUfrag: String? { attributes.firstValue(named: "ice-ufrag") }
    public var icePwd: String? { attributes.firstValue(named: "ice-pwd") }
    public var iceOptions: String? { attributes.firstValue(named: "ice-options") }
    public var setup: String? { attributes.firstValue(named: "setup") }
    public var fingerprint: Fingerprint? { fingerprints.first }
    public var fingerprints: [Fingerprint] {
        attributes.values(named: "fingerprint").compactMap(Fingerprint.init(attributeValue:))
    }

    /// The media section with `mid`, if any.
    public func media(mid: String) -> MediaDescription? { media.first { $0.mid == mid } }

    // MARK: Serialize

    /// The SDP text with CRLF line endings (including after the last line).
    public func serialize() -> String {
        var out = ""
        func line(_ type: Character, _ value: String) {
            out.append(type)
            out.append("=")
            out.append(value)
            out.append("\r\n")
        }
        line("v", String(version))
        line("o", origin.description)
        line("s", sessionName)
        for l in otherLines where "iuep".contains(l.type) { line(l.type, l.value) }
        if let connection { line("c", connection) }
        for b in bandwidths { line("b", b) }
        if let timing { line("t", timing) }
        for l in otherLines where !"iuep".contains(l.type) { line(l.type, l.value) }
        for a in attributes { line("a", a.description) }
        for m in media {
            line("m", m.mediaLine)
            for l in m.otherLines where l.type == "i" { line(l.type, l.value) }
            if let c = m.connection { line("c", c) }
            for b in m.bandwidths { line("b", b) }
            for l in m.otherLines where l.type != "i" { line(l.type, l.value) }
            for a in m.attributes { line("a", a.description) }
        }
        return out
    }

    // MARK: Parse

    /// Parses SDP text (CRLF or LF line endings; trailing blank lines ignored; a CR elsewhere or
    /// a NUL byte in a line is an error). Strict where
    /// a mistake would confuse the server: `v=`, `o=`, `s=` must be the first three lines;
    /// every line must be `<letter>=<value>`; `m=` needs media, numeric port and proto (and
    /// numeric payload types for RTP profiles); `rtpmap`, `fmtp`, `rtcp-fb`, `extmap`,
    /// `ssrc`, `ssrc-group`, `fingerprint` and `rid` attributes must be well formed, and a
    /// `mid` must be 1–32 characters of `A-Z a-z 0-9 _ -`.
    public static func parse(_ text: String) throws(SdpError) -> SessionDescription {
        var lines: [Substring] = []
        for raw in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            var bytes = raw
            if bytes.last == UInt8(ascii: "\r") { bytes = bytes.dropLast() }
            lines.append(Substring(bytes))
        }
        while let last = lines.last, last.isEmpty { lines.removeLast() }

        var session = SessionDescription(origin: SdpOrigin(sessionId: "0", sessionVersion: "0"), timing: nil)
        var current: MediaDescription?
        var sawOrigin = false
        var sawName = false

        for (index, text) in lines.enumerated() {
            let number = index + 1
            func fail(_ reason: String) -> SdpError { SdpError(line: number, text: String(text), reason: reason) }
            let utf8 = text.utf8
            // A CR that is not part of the line ending, or a NUL, would let one line smuggle
            // another (or cut a C string short) wherever this text is copied.
            if utf8.contains(where: { $0 == 0x0D || $0 == 0x00 }) {
                throw SdpError(line: number, text: Self.escapingControlBytes(text), reason: "line contains a CR or NUL byte")
            }
            guard utf8.count >= 2, let letter = utf8.first,
                  (0x41...0x5A).contains(letter) || (0x61...0x7A).contains(letter),
                  utf8[utf8.index(after: utf8.startIndex)] == UInt8(ascii: "=") else {
                throw fail(text.isEmpty ? "empty line" : "line is not in <type>=<value> form")
            }
            let type = Character(Unicode.Scalar(letter))
            let value = text[utf8.index(utf8.startIndex, offsetBy: 2)...]

            switch index {
            case 0:
                guard type == "v" else { throw fail("first line must be v=") }
                guard let v = Int(decimal: value) else { throw fail("v= is not a number") }
                session.version = v
                continue
            case 1:
                guard type == "o" else { throw fail("second line must be o=") }
            case 2:
                guard type == "s" else { throw fail("third line must be s=") }
            default:
                break
            }

            switch type {
            case "v":
                throw fail("duplicate v= line")
            case "o":
                guard !sawOrigin else { throw fail("duplicate o= line") }
                let f = value.sdpFields
                guard f.count == 6 else { throw fail("o= line needs 6 fields") }
                session.origin = SdpOrigin(
                    username: String(f[0]), sessionId: String(f[1]), sessionVersion: String(f[2]),
                    networkType: String(f[3]), addressType: String(f[4]), address: String(f[5]))
                sawOrigin = true
            case "s":
                guard !sawName else { throw fail("duplicate s= line") }
                session.sessionName = String(value)
                sawName = true
            case "m":
                if let m = current { session.media.append(m) }
                do { current = try MediaDescription(mediaLine: value) } catch { throw fail(error.reason) }
            case "a":
                let attribute = SdpAttribute(line: value)
                if let problem = attribute.syntaxProblem { throw fail(problem) }
                if current != nil { current?.attributes.append(attribute) } else { session.attributes.append(attribute) }
            case "c":
                guard !value.isEmpty else { throw fail("empty c= line") }
                if current != nil {
                    if current?.connection == nil { current?.connection = String(value) }
                    else { current?.otherLines.append(SdpLine(type: "c", value: String(value))) }
                } else if session.connection == nil {
                    session.connection = String(value)
                } else {
                    session.otherLines.append(SdpLine(type: "c", value: String(value)))
                }
            case "b":
                if current != nil { current?.bandwidths.append(String(value)) } else { session.bandwidths.append(String(value)) }
            case "t":
                if current != nil { throw fail("t= line inside a media section") }
                if session.timing == nil { session.timing = String(value) }
                else { session.otherLines.append(SdpLine(type: "t", value: String(value))) }
            default:
                let l = SdpLine(type: type, value: String(value))
                if current != nil { current?.otherLines.append(l) } else { session.otherLines.append(l) }
            }
        }
        guard !lines.isEmpty else { throw SdpError(line: 1, text: "", reason: "empty description, v= missing") }
        guard sawOrigin else { throw SdpError(line: 2, text: "", reason: "o= line missing") }
        guard sawName else { throw SdpError(line: 3, text: "", reason: "s= line missing") }
        if let m = current { session.media.append(m) }
        return session
    }
}

extension SessionDescription {
    /// `text` with CR, LF and NUL written as `\r`, `\n`, `\0` (for error messages).
    static func escapingControlBytes(_ text: Substring) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\r": out += "\\r"
            case "\n": out += "\\n"
            case "\0": out += "\\0"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

/// An internal parse failure reason; `SessionDescription.parse` adds the line.
struct SdpSyntaxError: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
