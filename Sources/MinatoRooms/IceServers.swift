public import Foundation
internal import Crypto

/// The ICE servers the server hands its clients (docs/protocol.md "ICE servers"): a TURN server
/// (coturn, config `media.turn.*`) with time-limited credentials minted per member, and static
/// STUN/TURN URLs (`media.clientIceServers`). Minato embeds no TURN server; it only mints the
/// credentials coturn's `use-auth-secret` ("TURN REST API") scheme checks: username
/// `<unix expiry>:<id>`, password base64(HMAC-SHA1(static-auth-secret, username)).
///
/// A value type read by the room actor (join, getIceServers) and the WHIP/WHEP handlers.
public struct IceServerConfiguration: Sendable, Equatable {
    /// `media.turn.urls`: `turn:`/`turns:`/`stun:` URLs of the TURN server; empty = no TURN.
    public var turnUrls: [String] = []
    /// `media.turn.secret`: coturn's `static-auth-secret` (never logged).
    public var turnSecret = ""
    /// `media.turn.ttlSec`: how long a minted credential is valid.
    public var turnTtlSec = 86_400
    /// `media.clientIceServers`: URLs handed out without credentials.
    public var staticUrls: [String] = []

    /// The bounds of `media.turn.ttlSec`: a minute (shorter would expire before a browser has
    /// finished connecting) to a week.
    public static let ttlRange = 60...604_800
    /// The shortest `media.turn.secret` accepted, in bytes.
    public static let minSecretBytes = 16

    public init() {}

    /// TURN is configured (`media.turn.urls` set).
    public var hasTurn: Bool { !turnUrls.isEmpty }

    /// The ICE servers for the member or session `id` at `now`: the TURN server with a fresh
    /// credential (when configured), then the static `stun:` URLs of `media.clientIceServers`.
    /// Static `turn:`/`turns:` URLs have no credentials, which a browser refuses in an
    /// `RTCIceServer`, so they are only ever WHIP/WHEP `Link` headers.
    public func servers(for id: String, now: Date) -> [IceServer] {
        var out: [IceServer] = []
        if let credential = credential(for: id, now: now) {
            out.append(IceServer(urls: turnUrls, username: credential.username, credential: credential.password))
        }
        let stun = staticUrls.filter { $0.lowercased().hasPrefix("stun:") || $0.lowercased().hasPrefix("stuns:") }
        if !stun.isEmpty { out.append(IceServer(urls: stun, username: nil, credential: nil)) }
        return out
    }

    /// A TURN credential for `id` valid `turnTtlSec` from `now`; nil without TURN.
    public func credential(for id: String, now: Date) -> TurnCredential? {
        guard hasTurn, !turnSecret.isEmpty else { return nil }
        let seconds = now.timeIntervalSince1970
        let nowSec = seconds.isFinite && seconds > 0 && seconds < 1e15 ? Int(seconds) : 0
        return Self.turnCredential(secret: turnSecret, id: id, expiresAt: nowSec + turnTtlSec)
    }

    /// coturn's REST credential: username `"<expiresAt>:<id>"`, password
    /// base64(HMAC-SHA1(secret, username)).
    public static func turnCredential(secret: String, id: String, expiresAt: Int) -> TurnCredential {
        let username = "\(expiresAt):\(id)"
        let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Data(username.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return TurnCredential(username: username, password: Data(mac).base64EncodedString(), expiresAt: expiresAt)
    }

    /// Why `url` is not a usable ICE server URL (RFC 7064 / 7065: `stun:host[:port]`,
    /// `turn:host[:port][?transport=udp|tcp]`, `turns:host[:port][?transport=tcp]`; a host is a
    /// DNS name, an IPv4 address or a bracketed IPv6 address), or nil when it is.
    public static func urlProblem(_ url: String) -> String? {
        let lower = url.lowercased()
        let scheme: String
        if lower.hasPrefix("turns:") { scheme = "turns" }
        else if lower.hasPrefix("turn:") { scheme = "turn" }
        else if lower.hasPrefix("stun:") { scheme = "stun" }
        else { return "'\(url.prefix(80))' must start with turn:, turns: or stun:" }
        var rest = Substring(url.dropFirst(scheme.count + 1))
        var query: Substring?
        if let q = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: q)...]
            rest = rest[..<q]
        }
        if rest.hasPrefix("//") { return "'\(url.prefix(80))' has '//': write \(scheme):host[:port] (RFC 7064/7065)" }
        var host = rest
        var port: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return "'\(url.prefix(80))' has an unclosed '[' in its host" }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return "'\(url.prefix(80))' has text after its IPv6 host" }
                port = after.dropFirst()
            }
            var v6 = in6_addr()
            guard inet_pton(AF_INET6, String(host), &v6) == 1 else { return "'\(url.prefix(80))' has a bad IPv6 address" }
        } else {
            if let colon = rest.firstIndex(of: ":") {
                host = rest[..<colon]
                port = rest[rest.index(after: colon)...]
            }
            guard !host.isEmpty, host.utf8.count <= 253,
                  host.utf8.allSatisfy({ isAlnum($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }) else {
                return "'\(url.prefix(80))' needs a host name or address after '\(scheme):'"
            }
        }
        if let port {
            guard let p = Int(port), (1...65535).contains(p), port.utf8.allSatisfy(isDigit) else {
                return "'\(url.prefix(80))' has a port that is not 1...65535"
            }
        }
        if let query {
            guard scheme != "stun" else { return "'\(url.prefix(80))': a stun: URL takes no '?transport='" }
            let transport = query.lowercased()
            switch transport {
            case "transport=tcp": break
            case "transport=udp" where scheme == "turn": break
            case "transport=udp": return "'\(url.prefix(80))': turns: runs over TLS, so its transport can only be tcp"
            default: return "'\(url.prefix(80))' may only end with ?transport=udp or ?transport=tcp"
            }
        }
        return nil
    }

    /// Why this configuration cannot be used (checked at start), or nil.
    public var problem: String? {
        for url in turnUrls {
            if let p = Self.urlProblem(url) { return "media.turn.urls: \(p)" }
        }
        if hasTurn, turnSecret.isEmpty {
            return "media.turn.secret must be set when media.turn.urls is (coturn's static-auth-secret)"
        }
        if !hasTurn, !turnSecret.isEmpty {
            return "media.turn.secret is set but media.turn.urls is empty: name the TURN server's URLs too"
        }
        if !turnSecret.isEmpty, turnSecret.utf8.count < Self.minSecretBytes {
            return "media.turn.secret must be at least \(Self.minSecretBytes) bytes"
        }
        if !Self.ttlRange.contains(turnTtlSec) {
            return "media.turn.ttlSec must be \(Self.ttlRange.lowerBound)...\(Self.ttlRange.upperBound)"
        }
        return nil
    }
}

private func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }
private func isAlnum(_ c: UInt8) -> Bool {
    isDigit(c) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
}

/// One time-limited TURN credential (coturn `use-auth-secret`). `password` is a secret: it goes
/// to the member it was minted for and nowhere else (never logged).
public struct TurnCredential: Sendable, Equatable {
    public let username: String
    public let password: String
    /// Unix seconds at which coturn stops accepting it.
    public let expiresAt: Int
}

/// One entry of `iceServers`, shaped as WebRTC's `RTCIceServer`.
public struct IceServer: Sendable, Equatable {
    public let urls: [String]
    public let username: String?
    public let credential: String?

    public init(urls: [String], username: String?, credential: String?) {
        self.urls = urls; self.username = username; self.credential = credential
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["urls": .array(urls.map { .string($0) })]
        if let username { o["username"] = .string(username) }
        if let credential { o["credential"] = .string(credential) }
        return .object(o)
    }

    /// RFC 9725 §4.6 `Link` header values, one per URL.
    public var linkValues: [String] {
        urls.map { url in
            var v = "<\(url)>; rel=\"ice-server\""
            if let username, let credential {
                v += "; username=\"\(Self.quoted(username))\"; credential=\"\(Self.quoted(credential))\"; credential-type=\"password\""
            }
            return v
        }
    }

    private static func quoted(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    }
}
