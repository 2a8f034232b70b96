// SDP (RFC 8866) as WebRTC stacks send it. Control path: Strings and arrays are fine here.
// Every type is a plain Sendable value; use from any thread.

/// A parse failure: the 1-based line number, the line's text and a reason a person can act
/// on. Used by the server's `invalidSdp` protocol error with the offending line in `detail`.
public struct SdpError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var text: String
    public var reason: String
    /// Set when the description is well formed so far but goes over one of the `SdpLimits`
    /// the parse was given (then `text` is the line's first 64 characters).
    public var limit: SdpLimits.Limit?

    public init(line: Int, text: String, reason: String, limit: SdpLimits.Limit? = nil) {
        self.line = line
        self.text = text
        self.reason = reason
        self.limit = limit
    }

    /// "line 7: m= line has no port: m=audio"
    public var description: String { "line \(line): \(reason): \(text)" }
}

/// How much of each kind a description may hold, checked while it is parsed: the parse stops at
/// the first line over a limit (`SdpError.limit`), so a hostile description costs no more than
/// reading that far. The default is no limit.
public struct SdpLimits: Sendable, Equatable {
    /// m= sections in the description.
    public var maxMediaSections: Int
    /// Formats on one m= line, and `a=rtpmap` / `a=fmtp` lines in one m-section.
    public var maxFormatsPerSection: Int
    /// `a=candidate` lines in one m-section (or at session level).
    public var maxCandidatesPerSection: Int

    public init(maxMediaSections: Int = .max, maxFormatsPerSection: Int = .max, maxCandidatesPerSection: Int = .max) {
        self.maxMediaSections = maxMediaSections
        self.maxFormatsPerSection = maxFormatsPerSection
        self.maxCandidatesPerSection = maxCandidatesPerSection
    }

    public static let none = SdpLimits()

    /// Which limit a description went over.
    public enum Limit: Sendable, Equatable {
        case mediaSections, formatsPerSection, candidatesPerSection
    }
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

    /// The index of the first m-section with each mid, made in one pass: for looking many mids
    /// up in one description (each `media(mid:)` reads every m-section's attributes).
    public var mediaIndicesByMid: [String: Int] {
        var out: [String: Int] = [:]
        for (i, m) in media.enumerated() {
            if let mid = m.mid, out[mid] == nil { out[mid] = i }
        }
        return out
    }

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
    /// `mid` must be 1–32 characters of `A-Z a-z 0-9 _ -`. `limits` are checked as the lines
    /// come (see `SdpLimits`). Linear in the text's length.
    public static func parse(_ text: String, limits: SdpLimits = .none) throws(SdpError) -> SessionDescription {
        // Lines are read one at a time, so a parse that stops (a limit, an error) has not split
        // the rest of the text.
        let bytes = text.utf8
        var cursor = bytes.startIndex
        var index = -1
        var sawLine = false

        var session = SessionDescription(origin: SdpOrigin(sessionId: "0", sessionVersion: "0"), timing: nil)
        var current: MediaDescription?
        var sawOrigin = false
        var sawName = false
        // Counts for `limits`: m= sections, and per section (session level first) rtpmap, fmtp
        // and candidate lines.
        var sections = 0, rtpmaps = 0, fmtps = 0, candidates = 0

        while cursor < bytes.endIndex {
            let newline = bytes[cursor...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
            var line = bytes[cursor..<newline]
            cursor = newline == bytes.endIndex ? newline : bytes.index(after: newline)
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            index += 1
            let text = Substring(line)
            // Blank lines at the end are ignored; one before another line is an error (below).
            if text.isEmpty, Self.onlyBlankLines(bytes[cursor...]) { break }
            sawLine = true
            let number = index + 1
            func fail(_ reason: String) -> SdpError { SdpError(line: number, text: String(text), reason: reason) }
            func over(_ limit: SdpLimits.Limit, _ reason: String) -> SdpError {
                SdpError(line: number, text: String(text.prefix(64)), reason: reason, limit: limit)
            }
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
                sections += 1
                guard sections <= limits.maxMediaSections else {
                    throw over(.mediaSections, "more than \(limits.maxMediaSections) m= sections")
                }
                if let m = current { session.media.append(m) }
                rtpmaps = 0; fmtps = 0; candidates = 0
                do { current = try MediaDescription(mediaLine: value, maxFormats: limits.maxFormatsPerSection) } catch {
                    if error.overFormatLimit { throw over(.formatsPerSection, error.reason) }
                    throw fail(error.reason)
                }
            case "a":
                let attribute = SdpAttribute(line: value)
                switch attribute.name {
                case "rtpmap":
                    rtpmaps += 1
                    guard rtpmaps <= limits.maxFormatsPerSection else {
                        throw over(.formatsPerSection, "more than \(limits.maxFormatsPerSection) a=rtpmap lines in one section")
                    }
                case "fmtp":
                    fmtps += 1
                    guard fmtps <= limits.maxFormatsPerSection else {
                        throw over(.formatsPerSection, "more than \(limits.maxFormatsPerSection) a=fmtp lines in one section")
                    }
                case "candidate":
                    candidates += 1
                    guard candidates <= limits.maxCandidatesPerSection else {
                        throw over(.candidatesPerSection, "more than \(limits.maxCandidatesPerSection) a=candidate lines in one section")
                    }
                default:
                    break
                }
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
        guard sawLine else { throw SdpError(line: 1, text: "", reason: "empty description, v= missing") }
        guard sawOrigin else { throw SdpError(line: 2, text: "", reason: "o= line missing") }
        guard sawName else { throw SdpError(line: 3, text: "", reason: "s= line missing") }
        if let m = current { session.media.append(m) }
        return session
    }
}

extension SessionDescription {
    /// Whether `rest` is only line endings: every line of it empty (LF, or CR LF).
    static func onlyBlankLines(_ rest: Substring.UTF8View) -> Bool {
        var i = rest.startIndex
        while i < rest.endIndex {
            let b = rest[i]
            i = rest.index(after: i)
            if b == UInt8(ascii: "\n") { continue }
            guard b == UInt8(ascii: "\r"), i == rest.endIndex || rest[i] == UInt8(ascii: "\n") else { return false }
        }
        return true
    }

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
    /// The m= line lists more formats than the parse allows (`SdpLimits.maxFormatsPerSection`).
    var overFormatLimit = false
    init(_ reason: String, overFormatLimit: Bool = false) {
        self.reason = reason
        self.overFormatLimit = overFormatLimit
    }
}
