internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import Metrics

/// Member methods and lifecycle: join (with the room password checked off the actor), keepalive
/// and takeover, removal, keepalive expiry, and transport failures reported by the workers.
extension RoomService {
    public func join(_ r: JoinRequest, from channel: ClientChannel) async throws -> JoinResult {
        let grant = try grant(of: channel)
        let roomId = r.roomId
        let name = try Validate.name(r.name, key: "name")
        let metadata = try Validate.metadata(r.metadata, key: "metadata") ?? ""
        let password = try Validate.password(r.password, key: "password")
        let interval = r.keepaliveIntervalSec ?? configuration.defaultKeepaliveIntervalSec
        let gap = r.keepaliveIntervalGapSec ?? configuration.defaultKeepaliveIntervalGapSec
        let replace = r.replace
        let type = r.type ?? "person"
        guard interval >= 1, gap >= 0 else {
            throw RoomError.invalidParameter("keepaliveIntervalSec must be at least 1 and keepaliveIntervalGapSec at least 0.")
        }
        guard interval <= configuration.maxKeepaliveIntervalSec else {
            throw RoomError.limitExceeded("keepaliveIntervalSec may be at most \(configuration.maxKeepaliveIntervalSec) (rooms.maxKeepaliveIntervalSec).")
        }
        guard gap <= configuration.maxKeepaliveIntervalGapSec else {
            throw RoomError.limitExceeded("keepaliveIntervalGapSec may be at most \(configuration.maxKeepaliveIntervalGapSec) (rooms.maxKeepaliveIntervalGapSec).")
        }
        guard type == "person" || type == "bot" else { throw RoomError.invalidParameter("type must be \"person\" or \"bot\".") }
        let room = try room(roomId)
        if let grant {
            let rules = grant.rules(forRoom: room.name)
            guard !rules.isEmpty else { throw RoomError.insufficientPermissions(Self.noRoomRule(room.name)) }
            guard rules.contains(where: { r in r.member.map { globMatches($0.name, name ?? "") } ?? false }) else {
                throw RoomError.insufficientPermissions("The token's scope has no member rule matching the name '\(name ?? "")' in room '\(room.name ?? room.id)'.")
            }
        }
        /// Everything that may change while the password is being checked is checked again after.
        func check() throws -> LocalSFURoomMember? {
            try stillOpen(room)
            let existing = name.flatMap { n in room.members.first { $0.name == n } }
            if let existing, !replace { throw RoomError.memberNameDuplicated(existing.name ?? "") }
            try checkMemberLimits(room: room, channel: channel, replacing: existing)
            return existing
        }
        _ = try check()
        let site = await site(forMemberOn: channel, in: room)
        if let hash = room.password {
            guard let password, await checkPassword(hash, password, channel: channel) else { throw RoomError.wrongPassword() }
        }
        if let existing = try check() { removeMember(existing, from: room, reason: "replaced") }
        let member = LocalSFURoomMember(id: newId(), name: name, metadata: metadata, type: type,
                                        roomId: room.id, channel: channel, keepaliveIntervalSec: interval,
                                        keepaliveIntervalGapSec: gap, now: clock.now)
        // The room may have grown onto other nodes meanwhile (cluster.maxNodesPerRoom).
        if let nodes = mediaNodes, !room.sites.contains(site), room.sites.count >= nodes.maxNodesPerRoom {
            member.site = .home
        } else {
            member.site = site
        }
        room.members.append(member)
        room.emptySince = nil
        armSweep()
        emit(room, "memberJoined", ["member": member.json])
        logger.info("member joined", metadata: ["room": "\(room.id)", "member": "\(member.id)", "site": "\(member.site)"])
        return JoinResult(member: member.json, room: room.json, reconnectSecret: member.reconnectSecret,
                          iceServers: configuration.iceServers.servers(for: member.id, now: Date()))
    }

    /// Members per room, on the server, and owned by one connection (`replacing` leaves, so it
    /// does not count).
    func checkMemberLimits(room: Room, channel: ClientChannel, replacing: LocalSFURoomMember?) throws(RoomError) {
        if replacing == nil, room.members.count >= configuration.maxMembersPerRoom {
            throw .limitExceeded("The room has its maximum of \(configuration.maxMembersPerRoom) members (rooms.maxMembersPerRoom).")
        }
        let total = rooms.reduce(0) { $0 + $1.members.count }
        if replacing == nil, total >= configuration.maxMembers {
            throw .limitExceeded("The server has its maximum of \(configuration.maxMembers) members (rooms.maxMembers).")
        }
        var owned = 0
        for r in rooms { for m in r.members where m.channel?.id == channel.id && m !== replacing { owned += 1 } }
        if owned >= configuration.maxMembersPerConnection {
            throw .limitExceeded("This connection has \(owned) members, its maximum (rooms.maxMembersPerConnection).")
        }
    }

    /// Compares a password off the actor, after the connection's throttle delay: each wrong
    /// password (and each check still running) on a connection doubles its next wait, to 4 s.
    func checkPassword(_ hash: PasswordHash, _ password: String, channel: ClientChannel) async -> Bool {
        var ledger = connections[channel.id] ?? ConnectionLedger()
        let delay = PasswordChecks.delay(afterFailures: ledger.passwordFailures + ledger.passwordChecksRunning)
        ledger.passwordChecksRunning += 1
        connections[channel.id] = ledger
        let ok = await passwords.matches(hash, password, after: delay)
        if var after = connections[channel.id] {
            after.passwordChecksRunning = max(0, after.passwordChecksRunning - 1)
            after.passwordFailures = ok ? 0 : after.passwordFailures + 1
            connections[channel.id] = after
        }
        if !ok { Counter(label: "minato_wrong_passwords_total").increment() }
        return ok
    }

    /// Keeps the member alive; from another connection it takes the member over (a reconnect),
    /// which needs `reconnectSecret`. Returns the member's time to live in seconds.
    public func keepalive(memberId id: String, reconnectSecret: String?, from channel: ClientChannel) throws -> Int {
        guard let (room, member) = findMember(id) else { throw RoomError.memberNotFound(id) }
        // A reconnecting client takes its member over on the new connection, with the secret
        // its join returned (a member id alone is public: getRoom lists it).
        let tookOver = member.channel?.id != channel.id
        if tookOver {
            guard let secret = reconnectSecret, constantTimeEquals(secret, member.reconnectSecret) else {
                throw RoomError.insufficientPermissions(
                    "Member '\(id)' belongs to another connection; taking it over needs the reconnectSecret its join returned.")
            }
            try checkMemberLimits(room: room, channel: channel, replacing: member)
        }
        member.channel = channel
        member.disconnectedAt = nil
        member.lastSeen = clock.now
        // A server offer sent to (or held for) the lost connection may never have arrived:
        // offer the current receive state again on the new one.
        if tookOver { perform(member.receive.reconnected(), for: member) }
        return member.keepaliveIntervalSec + member.keepaliveIntervalGapSec
    }

    public func leave(memberId: String, from channel: ClientChannel) throws {
        let (room, member) = try joinedMember(memberId, channel: channel)
        removeMember(member, from: room, reason: "left")
    }

    public func updateMemberMetadata(memberId: String, metadata: String, from channel: ClientChannel) throws {
        let (room, member) = try joinedMember(memberId, channel: channel)
        member.metadata = try Validate.metadata(metadata, key: "metadata") ?? ""
        emit(room, "memberMetadataUpdated", ["member": member.json])
    }

    /// Removes a member: its publications are unpublished (events first), its subscriptions end,
    /// its transports close, and everyone (the member too) sees `memberLeft` with `reason`.
    func removeMember(_ member: LocalSFURoomMember, from room: Room, reason: String) {
        guard !member.removed else { return }
        member.removed = true
        perform(member.receive.close(), for: member)
        member.failAllWaiters()
        for pub in room.publications where pub.publisherId == member.id { unpublish(pub, in: room) }
        for sub in room.subscriptions where sub.subscriberId == member.id { endSubscription(sub, in: room, offerToSubscriber: false) }
        for t in [member.send.description, member.recv.description].compactMap({ $0 }) {
            if member.site == .home { transportOwners[t.id] = nil }
            postSite(member.site, room, .closeTransport(t.id))
        }
        if let secret = member.mediaSession?.secret {
            mediaSessions[secret] = nil
            if reason == "transportClosed" { rememberEndedSession(secret) }
        }
        emit(room, "memberLeft", ["member": member.json], reason: reason)
        room.members.removeAll { $0 === member }
        if room.members.isEmpty {
            room.emptySince = clock.now
            armSweep()
        }
        logger.info("member left", metadata: ["room": "\(room.id)", "member": "\(member.id)", "reason": "\(reason)"])
    }

    /// Removes members whose keepalive or reconnect gap ran out and warns of expiring tokens
    /// (run by the expiry timer, `armSweep`).
    func sweep() {
        if verifier != nil { warnExpiringTokens() }
        let now = clock.now
        for room in rooms {
            // A media session has no signaling connection to keep alive: its transport's
            // timeout (media.transportTimeoutSec) ends it instead.
            for m in room.members where m.mediaSession == nil && !m.plainIngress {
                let ttl = Duration.seconds(m.keepaliveIntervalSec + m.keepaliveIntervalGapSec)
                if let gone = m.disconnectedAt, now - gone > .seconds(m.keepaliveIntervalGapSec) {
                    removeMember(m, from: room, reason: "keepaliveExpired")
                } else if now - m.lastSeen > ttl {
                    removeMember(m, from: room, reason: "keepaliveExpired")
                }
            }
        }
        // Rooms with no member for rooms.emptyTimeoutSec (after the expiries above emptied some).
        for room in rooms {
            if let due = room.closesWhenEmpty(after: configuration.emptyTimeoutSec), now >= due {
                logger.info("room closed: empty", metadata: ["room": "\(room.id)", "emptyTimeoutSec": "\(configuration.emptyTimeoutSec)"])
                close(room, reason: "emptyTimeout")
            }
        }
        flushOutbox()
    }

    func workerEvent(_ event: WorkerEvent) {
        switch event {
        case .transportConnected(let id, let after):
            logger.debug("transport connected", metadata: ["transport": "\(id)"])
            let (seconds, attoseconds) = after.components
            Timer(label: "minato_transport_connect_seconds")
                .recordNanoseconds(seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000)
        case .dataSubscriptionOverflow(let sid):
            dataSubscriptionOverflowed(sid)
        case .dataChannelError(let id, let label, let reason, let detail):
            dataChannelError(id, label: label, reason: reason, detail: detail)
        case .iceRestarted(let id):
            logger.debug("ICE restart completed", metadata: ["transport": "\(id)"])
            Counter(label: "minato_ice_restarts_total").increment()
        case .activeSpeakers(let router, let list):
            speakersChanged(router: router, list)
        case .transportClosed(let id, let reason):
            if hostedTransportClosed(id, reason: reason) || homeRelayTransportClosed(id, reason: reason) { return }
            guard let owner = transportOwners[id], let room = rooms.first(where: { $0.id == owner.room }),
                  let member = room.member(owner.member) else { return }
            logger.info("transport closed", metadata: ["member": "\(member.id)", "reason": "\(reason)"])
            let kind = transportFailureKind(reason)
            Counter(label: "minato_transport_failures_total", dimensions: [("kind", kind)]).increment()
            removeMember(member, from: room, reason: "transportClosed")
            flushOutbox()
        }
    }

}

/// Compares two strings in time that depends only on their lengths.
public func constantTimeEquals(_ a: String, _ b: String) -> Bool {
    let x = Array(a.utf8), y = Array(b.utf8)
    var diff = UInt8(x.count == y.count ? 0 : 1)
    for i in 0..<max(x.count, y.count) { diff |= (i < x.count ? x[i] : 0) ^ (i < y.count ? y[i] : 0) }
    return diff == 0
}
