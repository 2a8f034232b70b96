internal import Foundation

/// Token checks (PROTOCOL.md "Auth"): with a verifier configured, a connection authenticates
/// once (`?token=` or `authenticate`), may refresh with `updateAuthToken`, and every request is
/// checked against its grant's SkyWay scope.
extension RoomService {
    /// Member-scoped methods and the member permission each needs (nil = only room access).
    static func memberAction(_ method: String, _ p: Params) -> String?? {
        switch method {
        case "leave", "keepalive": return .some(nil)
        case "updateMemberMetadata": return "updateMetadata"
        case "publish", "negotiate", "unpublish", "enablePublication", "disablePublication", "updatePublicationMetadata":
            return "publish"
        case "subscribe", "unsubscribe", "answer", "changePreferredEncoding": return "subscribe"
        case "iceCandidate": return (try? p.string("direction")) == "send" ? "publish" : "subscribe"
        default: return nil   // not member-scoped
        }
    }

    /// The grant this request runs under (nil when auth is off), after the checks every
    /// member-scoped method shares. Room-level checks happen in each method.
    func authorize(method: String, params: Params, channel: ClientChannel) async throws -> AuthGrant? {
        guard verifier != nil, method != "authenticate", method != "updateAuthToken" else { return nil }
        guard let session = sessions[channel.id] else {
            throw RoomError.invalidAuthToken("This server requires a token: connect to /ws?token=… or call authenticate {token} first.")
        }
        let grant = session.grant
        if grant.expiresAt <= Date().timeIntervalSince1970 {
            throw RoomError.authTokenExpired("The token expired at \(Self.isoTime(grant.expiresAt)); call updateAuthToken with a new one.")
        }
        if case .some(let action) = Self.memberAction(method, params), let (room, member) = memberTarget(params) {
            try permit(grant, room: room, memberName: member.name, action: action)
        }
        return grant
    }

    /// The member a member-scoped request acts as, found without changing anything.
    func memberTarget(_ p: Params) -> (Room, LocalSFURoomMember)? {
        if let id = try? p.string("memberId") { return findMember(id) }
        if let pid = try? p.string("publicationId") {
            for room in rooms { if let pub = room.publication(pid), let m = room.member(pub.publisherId) { return (room, m) } }
        }
        if let sid = try? p.string("subscriptionId") {
            for room in rooms { if let sub = room.subscription(sid), let m = room.member(sub.subscriberId) { return (room, m) } }
        }
        return nil
    }

    static func noRoomRule(_ name: String?) -> String {
        "The token's scope has no rule for room '\(name ?? "(unnamed)")'; mint one whose scope.rooms[].name matches it."
    }

    /// Any access to `room` (read, join): some scope rule must match its name.
    func permit(_ grant: AuthGrant?, room: Room) throws {
        try permit(grant, roomNamed: room.name, action: nil)
    }

    /// A room method (`create`, `close`, `updateMetadata`) or, with nil, plain access.
    func permit(_ grant: AuthGrant?, roomNamed name: String?, action: String?) throws {
        guard let grant else { return }
        let rules = grant.rules(forRoom: name)
        guard !rules.isEmpty else { throw RoomError.insufficientPermissions(Self.noRoomRule(name)) }
        if let action, !rules.contains(where: { $0.methods.contains(action) }) {
            throw RoomError.insufficientPermissions("The token may not \(action) room '\(name ?? "(unnamed)")' (scope.rooms[].methods lacks \"\(action)\").")
        }
    }

    /// A member method (`publish`, `subscribe`, `updateMetadata`) or, with nil, room access.
    func permit(_ grant: AuthGrant?, room: Room, memberName: String?, action: String?) throws {
        guard let grant else { return }
        let rules = grant.rules(forRoom: room.name)
        guard !rules.isEmpty else { throw RoomError.insufficientPermissions(Self.noRoomRule(room.name)) }
        guard let action else {
            // leave / keepalive act as the member (keepalive takes it over after a reconnect):
            // the token must be one that could have joined under that name.
            guard rules.contains(where: { r in r.member.map { globMatches($0.name, memberName ?? "") } ?? false }) else {
                throw RoomError.insufficientPermissions(
                    "The token's scope has no member rule matching '\(memberName ?? "")' in room '\(room.name ?? room.id)'; it cannot act as that member.")
            }
            return
        }
        let allowed = rules.contains { rule in
            guard let m = rule.member, globMatches(m.name, memberName ?? ""), m.methods.contains(action) else { return false }
            return action == "updateMetadata" || rule.sfuEnabled
        }
        guard allowed else {
            throw RoomError.insufficientPermissions(
                "The token does not let member '\(memberName ?? "")' \(action) in room '\(room.name ?? room.id)' (scope.rooms[].member.methods lacks \"\(action)\", or sfu.enabled is false).")
        }
    }

    /// The smallest `sfu.maxSubscribersLimit` among the rules for `room`, if any.
    func tokenSubscriberLimit(channel: ClientChannel, room: Room) -> Int? {
        guard let grant = sessions[channel.id]?.grant else { return nil }
        return grant.rules(forRoom: room.name).compactMap(\.maxSubscribersLimit).min()
    }

    /// `authenticate {token}` / `updateAuthToken {token}`: verifies and binds the token to this
    /// connection. An update must keep the appId.
    func authenticate(_ p: Params, channel: ClientChannel, update: Bool) async throws -> JSONValue {
        let token = try p.string("token")
        guard let verifier else {
            // Auth off: accept and ignore, so clients written for auth work unchanged.
            return ["expiresAt": .null]
        }
        let grant: AuthGrant
        switch await verifier(token) {
        case .success(let g): grant = g
        case .failure(let e): throw e
        }
        if update, let old = sessions[channel.id], old.grant.appId != grant.appId {
            throw RoomError.invalidAuthToken("The new token is for app '\(grant.appId)', this connection's for '\(old.grant.appId)'.")
        }
        sessions[channel.id] = AuthSession(grant: grant, channel: channel)
        return ["expiresAt": .string(Self.isoTime(grant.expiresAt))]
    }

    /// Binds a token given at connect time (`/ws?token=`); the caller closes the socket on failure.
    public func authenticate(token: String, channel: ClientChannel) async -> RoomError? {
        guard let verifier else { return nil }
        switch await verifier(token) {
        case .success(let g):
            sessions[channel.id] = AuthSession(grant: g, channel: channel)
            return nil
        case .failure(let e): return e
        }
    }

    /// Sends `tokenExpiring {expiresAt, remainingSec}` once per token, `tokenExpiringNoticeSec`
    /// before its `exp`.
    func warnExpiringTokens() {
        let now = Date().timeIntervalSince1970
        for (id, session) in sessions where !session.warned {
            let remaining = session.grant.expiresAt - now
            guard remaining <= Double(configuration.tokenExpiringNoticeSec) else { continue }
            sessions[id]?.warned = true
            let note: JSONValue = ["jsonrpc": "2.0", "method": "tokenExpiring",
                                   "params": ["expiresAt": .string(Self.isoTime(session.grant.expiresAt)),
                                              "remainingSec": .int(max(0, Int(remaining.rounded(.down))))]]
            outbox.append((session.channel, note.serialized()))
        }
    }

    static func isoTime(_ seconds: Double) -> String {
        let f = ISO8601DateFormatter()
        return f.string(from: Date(timeIntervalSince1970: seconds))
    }
}
