internal import Foundation

/// What a client's token allows: SkyWay's v3 `scope` (docs/protocol.md "Auth"), decoded and
/// verified by the server's `TokenVerifier`. Checked by `RoomService` on every request.
public struct AuthGrant: Sendable, Equatable {
    /// One `scope.rooms[]` entry: rooms whose name matches `name` (a glob, `*` = any run of
    /// characters), the room methods allowed there, and what members may do.
    public struct RoomRule: Sendable, Equatable {
        public var name: String
        /// Subset of `create`, `close`, `updateMetadata`.
        public var methods: Set<String>
        public var member: MemberRule?
        /// `sfu.enabled` (default true): false forbids publish and subscribe.
        public var sfuEnabled: Bool
        /// `sfu.maxSubscribersLimit`: the largest maxSubscribers a publication may have.
        public var maxSubscribersLimit: Int?
        public init(name: String, methods: Set<String>, member: MemberRule?, sfuEnabled: Bool = true, maxSubscribersLimit: Int? = nil) {
            self.name = name; self.methods = methods; self.member = member
            self.sfuEnabled = sfuEnabled; self.maxSubscribersLimit = maxSubscribersLimit
        }
    }
    /// `member`: members whose name matches `name` may join, with these methods (subset of
    /// `publish`, `subscribe`, `updateMetadata`).
    public struct MemberRule: Sendable, Equatable {
        public var name: String
        public var methods: Set<String>
        public init(name: String, methods: Set<String>) { self.name = name; self.methods = methods }
    }

    public var appId: String
    public var rooms: [RoomRule]
    /// `scope.admin`: the token may use the admin API too.
    public var admin: Bool
    /// `exp`, seconds since 1970.
    public var expiresAt: Double
    public var tokenId: String?

    public init(appId: String, rooms: [RoomRule], admin: Bool = false, expiresAt: Double, tokenId: String? = nil) {
        self.appId = appId; self.rooms = rooms; self.admin = admin; self.expiresAt = expiresAt; self.tokenId = tokenId
    }

    /// The rules of the rooms named `name` (an unnamed room matches only `*`).
    func rules(forRoom name: String?) -> [RoomRule] {
        rooms.filter { globMatches($0.name, name ?? "") }
    }
}

/// Verifies a token and returns its grant, or a `RoomError` named `invalidAuthToken` or
/// `authTokenExpired`. Supplied by the server; `nil` on `RoomService` means auth is off.
public typealias TokenVerifier = @Sendable (String) async -> Result<AuthGrant, RoomError>

/// SkyWay-style name globs: `*` matches any run of characters (also none); everything else,
/// `%` and `.` included, matches itself.
public func globMatches(_ pattern: String, _ text: String) -> Bool {
    let p = Array(pattern.utf8), t = Array(text.utf8)
    var pi = 0, ti = 0, star = -1, mark = 0
    while ti < t.count {
        if pi < p.count && p[pi] == UInt8(ascii: "*") {
            star = pi; mark = ti; pi += 1
        } else if pi < p.count && p[pi] == t[ti] {
            pi += 1; ti += 1
        } else if star >= 0 {
            pi = star + 1; mark += 1; ti = mark
        } else {
            return false
        }
    }
    while pi < p.count && p[pi] == UInt8(ascii: "*") { pi += 1 }
    return pi == p.count
}

/// Per connection: the grant it authenticated with, and whether it was warned of expiry.
struct AuthSession {
    var grant: AuthGrant
    var channel: ClientChannel
    var warned = false
}
