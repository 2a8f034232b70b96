internal import Foundation

/// Token checks (docs/protocol.md "Auth"): with a verifier configured, a connection authenticates
/// once (`?token=` or `authenticate`), may refresh with `updateAuthToken`, and every request is
/// checked against its grant's SkyWay scope.
extension RoomService {
    /// Checks what a request needs of the caller's token before it runs (`Permission`, declared
    /// once per method by the front door): a bound, unexpired token, and for member-scoped
    /// requests a member rule matching the member it acts as. Room rules are checked inside the
    /// room methods. With auth off, everything passes.
    public func authorize(_ permission: Permission, target: MemberTarget?, from channel: ClientChannel) throws {
        guard verifier != nil, permission != .authenticate else { return }
        let grant = try grant(of: channel)
        if case .member(let action) = permission, let grant, let target, let (room, member) = memberTarget(target) {
            try permit(grant, room: room, memberName: member.name, action: action)
        }
    }

    /// The connection's grant (nil when auth is off); fails when it has none or it expired.
    func grant(of channel: ClientChannel) throws(RoomError) -> AuthGrant? {
        guard verifier != nil else { return nil }
        guard let session = sessions[channel.id] else {
            throw RoomError.invalidAuthToken("This server requires a token: connect to /ws?token=… or call authenticate {token} first.")
        }
        if session.grant.expiresAt <= Date().timeIntervalSince1970 {
            throw RoomError.authTokenExpired("The token expired at \(Self.isoTime(session.grant.expiresAt)); call updateAuthToken with a new one.")
        }
        return session.grant
    }

    /// The member a member-scoped request acts as, found without changing anything.
    func memberTarget(_ target: MemberTarget) -> (Room, LocalSFURoomMember)? {
        switch target {
        case .member(let id): return findMember(id)
        case .publication(let pid):
            for room in rooms { if let pub = room.publication(pid), let m = room.member(pub.publisherId) { return (room, m) } }
        case .subscription(let sid):
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
    /// connection. An update must keep the appId. With auth off, accepted and ignored (so
    /// clients written for auth work unchanged).
    public func authenticate(token: String, update: Bool, from channel: ClientChannel) async throws -> AuthenticateResult {
        guard let verifier else { return AuthenticateResult(expiresAt: nil) }
        let grant: AuthGrant
        switch await verifier(token) {
        case .success(let g): grant = g
        case .failure(let e): throw e
        }
        if update, let old = sessions[channel.id], old.grant.appId != grant.appId {
            throw RoomError.invalidAuthToken("The new token is for app '\(grant.appId)', this connection's for '\(old.grant.appId)'.")
        }
        sessions[channel.id] = AuthSession(grant: grant, channel: channel)
        armSweep()
        return AuthenticateResult(expiresAt: Self.isoTime(grant.expiresAt))
    }

    /// Binds a token given at connect time (`/ws?token=`); the caller closes the socket on failure.
    public func authenticate(token: String, channel: ClientChannel) async -> RoomError? {
        guard let verifier else { return nil }
        switch await verifier(token) {
        case .success(let g):
            sessions[channel.id] = AuthSession(grant: g, channel: channel)
            armSweep()
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
            let note = Self.notification("tokenExpiring", ["expiresAt": .string(Self.isoTime(session.grant.expiresAt)),
                                                           "remainingSec": .int(Int(exactly: max(0, remaining.rounded(.down))) ?? 0)])
            outbox.append((session.channel, note))
        }
    }

    static func isoTime(_ seconds: Double) -> String {
        let f = ISO8601DateFormatter()
        return f.string(from: Date(timeIntervalSince1970: seconds))
    }
}
