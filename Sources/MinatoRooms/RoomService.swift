internal import Foundation
public import Logging
public import MinatoTransport
internal import MinatoMedia
internal import MinatoWire
internal import Metrics

/// The room core of one server: every Room, Member, Publication and Subscription, the event
/// log, keepalive expiry and the media negotiation, behind a typed API (RoomAPI.swift; one
/// method per request of docs/protocol.md). One actor owns all of it; media work goes to the
/// room's `MediaWorker` through its inbox. Front doors (JSON-RPC over WebSocket in
/// `MinatoSignaling`, the REST admin API) translate their wire formats to this API.
public actor RoomService {
    let configuration: RoomConfiguration
    let workers: [MediaWorker]
    let logger: Logger
    var rooms: [Room] = []
    var transportOwners: [TransportId: (room: String, member: String)] = [:]
    var nextTransportId: UInt64 = 1
    var nextRouterId: Int32 = 1
    /// Notifications waiting to go out after the current response (events, offers).
    var outbox: [(ClientChannel, String)] = []
    let clock = ContinuousClock()
    private var started = false
    /// The expiry timer (`armSweep`) and the deadline it is armed for.
    var sweepTask: Task<Void, Never>?
    var sweepDeadline: ContinuousClock.Instant?
    /// Verifies client tokens; nil = auth off (every request allowed).
    let verifier: TokenVerifier?
    /// Authenticated connections, by channel id.
    var sessions: [UInt64: AuthSession] = [:]
    /// What each open connection has used of its per-connection limits, by channel id.
    var connections: [UInt64: ConnectionLedger] = [:]
    /// Room password hashing, on a thread of its own.
    let passwords = PasswordChecks()
    /// Transports being created (they count against `maxTransports` already).
    var transportsBeingCreated = 0
    /// WHIP/WHEP sessions by their secret (the id in the session URL): the room and member ids.
    var mediaSessions: [String: (room: String, member: String)] = [:]
    /// Sessions that ended because their transport closed, and when: a DELETE that raced the
    /// ending (a client sends DELETE as it closes DTLS) is answered as done, not 404. (A session
    /// kicked or replaced stays 404: its client should hear that it was taken away.) At most
    /// `recentlyEndedLimit`, each for `recentlyEndedFor`.
    var recentlyEndedSessions: [String: ContinuousClock.Instant] = [:]
    static let recentlyEndedLimit = 1024
    static let recentlyEndedFor = Duration.seconds(30)
    /// New WHIP/WHEP sessions per client address (`whip.maxNewSessionsPerSecPerAddress`).
    lazy var sessionStarts = AddressRateLimiter(perSecond: configuration.maxNewMediaSessionsPerSecPerAddress)
    var nextWaiterToken: UInt64 = 0
    /// Recordings, running and ended (the newest `RecordingConfiguration.keptEnded` ended ones
    /// are kept for listing), in start order (RoomService+Recording.swift).
    var recordings: [Recording] = []
    /// Plain RTP egress transports made through the admin API (RoomService+PlainEgress.swift).
    var plainEgresses: [PlainEgress] = []
    /// Publications fed by plain RTP senders (RoomService+PlainIngress.swift).
    var plainIngresses: [PlainIngress] = []
    /// Recordings played into rooms, running and ended (RoomService+Playback.swift).
    var playbacks: [Playback] = []
    /// Told when a room opens or closes (the cluster records where rooms are); nil = nobody.
    var roomObserver: (@Sendable (RoomLifecycle) -> Void)?
    /// The other nodes, for rooms across nodes (RoomService+Sites); nil on a single node.
    var mediaNodes: (any MediaNodes)?
    /// Media this node serves for rooms homed on other nodes, by `HostedMedia.key`, and the
    /// owner of each transport made for them.
    var hosted: [String: HostedMedia] = [:]
    var hostedTransports: [TransportId: String] = [:]
    /// Commands to other nodes that need no answer, in order, one queue per node.
    var remotePosts: [String: AsyncStream<JSONValue>.Continuation] = [:]

    public init(configuration: RoomConfiguration, workers: [MediaWorker], logger: Logger, verifier: TokenVerifier? = nil) {
        self.configuration = configuration
        self.workers = workers
        self.logger = logger
        self.verifier = verifier
    }

    /// Sets who is told when a room opens or closes (called on the actor, in order).
    public func setRoomObserver(_ observer: (@Sendable (RoomLifecycle) -> Void)?) { roomObserver = observer }

    /// A new id for a room, member, publication or subscription: `rooms.idPrefix` (a cluster
    /// node's id and a dot, so any node can tell which node made it) and a random UUID.
    func newId() -> String { configuration.idPrefix + UUID().uuidString.lowercased() }

    /// Starts the keepalive sweep and listens to worker events; call once.
    public func start() {
        guard !started else { return }
        started = true
        for w in workers {
            Task { [weak self] in
                for await event in w.events { await self?.workerEvent(event) }
            }
        }
        armSweep()
    }

    // MARK: Expiry by deadline

    /// Arms the expiry timer for the soonest deadline (a member's keepalive or reconnect gap, a
    /// token's expiry notice) unless it is armed for that or earlier already. Called where a
    /// sooner deadline can appear: a join, a closed connection, a bound token, and after a sweep.
    func armSweep() {
        guard started, let next = nextExpiry() else { return }
        if let armed = sweepDeadline, armed <= next { return }
        sweepTask?.cancel()
        sweepDeadline = next
        sweepTask = Task { [weak self] in
            // Expiry compares with ">": wake just after the deadline.
            try? await Task.sleep(until: next + .milliseconds(5), clock: .continuous)
            guard !Task.isCancelled else { return }
            await self?.sweepDue()
        }
    }

    private func sweepDue() {
        sweepDeadline = nil
        sweepTask = nil
        sweep()
        armSweep()
    }

    /// The soonest moment something may expire, or nil when nothing can.
    func nextExpiry() -> ContinuousClock.Instant? {
        var soonest: ContinuousClock.Instant?
        func consider(_ t: ContinuousClock.Instant) { if soonest.map({ t < $0 }) ?? true { soonest = t } }
        for room in rooms {
            if let due = room.closesWhenEmpty(after: configuration.emptyTimeoutSec) { consider(due) }
            for m in room.members where m.mediaSession == nil && !m.plainIngress {
                consider(m.lastSeen + .seconds(m.keepaliveIntervalSec + m.keepaliveIntervalGapSec))
                if let gone = m.disconnectedAt { consider(gone + .seconds(m.keepaliveIntervalGapSec)) }
            }
        }
        if verifier != nil {
            let wallNow = Date().timeIntervalSince1970, now = clock.now
            for (_, session) in sessions where !session.warned {
                let wait = session.grant.expiresAt - Double(configuration.tokenExpiringNoticeSec) - wallNow
                consider(now + .milliseconds(Int(exactly: (max(0, min(wait, 86_400)) * 1000).rounded(.up)) ?? 0))
            }
        }
        return soonest
    }

    /// The connection closed: its members stay for their keepalive gap, waiting for a reconnect.
    public func channelClosed(_ channelId: UInt64) {
        let now = clock.now
        sessions[channelId] = nil
        connections[channelId] = nil
        for room in rooms {
            room.listeners[channelId] = nil
            for m in room.members where m.channel?.id == channelId {
                m.channel = nil
                m.disconnectedAt = now
            }
        }
        armSweep()
    }

    /// Runs one request on the core and hands its outcome to `respond` on the actor, before
    /// the notifications the request caused (events, offers) are sent: a client always gets a
    /// response before the events of its own request. Errors that are not `RoomError`s are
    /// logged and become `internal` with a sentence.
    public func run(_ body: @Sendable (isolated RoomService) async throws -> JSONValue,
                    respond: @Sendable (Result<JSONValue, RoomError>) -> Void) async {
        let outcome: Result<JSONValue, RoomError>
        do {
            outcome = .success(try await body(self))
        } catch let error as RoomError {
            outcome = .failure(error)
        } catch {
            logger.error("request failed", metadata: ["error": "\(error)"])
            outcome = .failure(.internalError("The server could not complete this request; it has been logged."))
        }
        respond(outcome)
        flushOutbox()
    }

    // MARK: Lookup and validation

    func room(_ id: String) throws(RoomError) -> Room {
        guard let r = rooms.first(where: { $0.id == id }) else { throw RoomError.roomNotFound("with id '\(id)'") }
        return r
    }

    func findMember(_ id: String) -> (Room, LocalSFURoomMember)? {
        for r in rooms { if let m = r.member(id) { return (r, m) } }
        return nil
    }

    /// The member `id`, which must be joined on this connection.
    func joinedMember(_ id: String, channel: ClientChannel) throws(RoomError) -> (Room, LocalSFURoomMember) {
        guard let (room, member) = findMember(id) else { throw RoomError.memberNotFound(id) }
        guard member.channel?.id == channel.id else {
            throw RoomError.notJoined("Member '\(id)' is not joined on this connection; join, or call keepalive to take it over after a reconnect.")
        }
        member.lastSeen = clock.now
        return (room, member)
    }

    /// The subscription `sid` and its subscriber, which must be joined on this connection.
    func ownSubscription(_ sid: String, channel: ClientChannel) throws(RoomError) -> (Room, LocalSFURoomMember, RoomSubscription) {
        for room in rooms {
            if let sub = room.subscription(sid), let member = room.member(sub.subscriberId) {
                guard member.channel?.id == channel.id else {
                    throw RoomError.insufficientPermissions("Only the subscriber may change subscription '\(sid)'.")
                }
                member.lastSeen = clock.now
                return (room, member, sub)
            }
        }
        throw RoomError.subscriptionNotFound(sid)
    }

    /// The publication `pid`, whose publisher must be joined on this connection.
    func ownPublication(_ pid: String, channel: ClientChannel) throws(RoomError) -> (Room, RoomPublication) {
        for room in rooms {
            if let pub = room.publication(pid) {
                guard let member = room.member(pub.publisherId), member.channel?.id == channel.id else {
                    throw RoomError.insufficientPermissions("Only the publisher may change publication '\(pid)'.")
                }
                member.lastSeen = clock.now
                return (room, pub)
            }
        }
        throw RoomError.publicationNotFound(pid)
    }

    func stillJoined(_ member: LocalSFURoomMember, _ room: Room) throws(RoomError) {
        if member.removed { throw RoomError.memberNotFound(member.id) }
        try stillOpen(room)
    }

    func stillOpen(_ room: Room) throws(RoomError) {
        if !rooms.contains(where: { $0 === room }) { throw RoomError.roomClosed(room.id) }
    }

    // MARK: Events and sending

    func emit(_ room: Room, _ type: String, _ data: JSONValue, reason: String? = nil) {
        room.version += 1
        var event: [String: JSONValue] = ["roomId": .string(room.id), "version": .int(room.version),
                                          "type": .string(type), "data": data]
        if let reason { event["reason"] = .string(reason) }
        let text = Self.notification("roomEvent", .object(event))
        room.log(.object(event), bytes: text.utf8.count, maxCount: configuration.maxEventLog, maxBytes: configuration.maxEventLogBytes)
        var sent = Set<UInt64>()
        for m in room.members { if let c = m.channel, sent.insert(c.id).inserted { outbox.append((c, text)) } }
        for (id, c) in room.listeners where sent.insert(id).inserted { outbox.append((c, text)) }
    }

    func flushOutbox() {
        let items = outbox
        outbox.removeAll()
        for (channel, text) in items { channel.send(text) }
    }

    /// A notification frame (docs/protocol.md: JSON-RPC 2.0 without an id), the form in which
    /// the core tells connections what happened (`roomEvent`, `offer`, `tokenExpiring`).
    static func notification(_ method: String, _ params: JSONValue) -> String {
        JSONValue.object(["jsonrpc": "2.0", "method": .string(method), "params": params]).serialized()
    }

    // MARK: Introspection (admin, tests)

    public func snapshot() -> JSONValue { ["rooms": .array(rooms.map(\.json))] }

    /// Closes every room (members leave with reason `roomClosed`, then `closed`): used on
    /// shutdown so clients hear why their media stopped, and by the fuzzer between inputs.
    public func closeAllRooms() {
        for room in rooms { close(room) }
        flushOutbox()
    }

    /// What this server carries, for the cluster's placement: rooms, members, transports.
    /// Rooms and members here; media transports on this node (its rooms' and those it serves
    /// for rooms of other nodes) and their limit (`media.maxTransports`).
    public func load() -> (rooms: Int, members: Int, transports: Int, maxTransports: Int) {
        (rooms.count, rooms.reduce(0) { $0 + $1.members.count }, transportOwners.count + hostedTransports.count,
         configuration.maxTransports)
    }

    /// The rooms open now (id, name): what a cluster node re-claims after its store lost them.
    public func openRooms() -> [(id: String, name: String?)] { rooms.map { ($0.id, $0.name) } }

    /// Closes the room `id` if it is open here, with `reason` on its `closed` event (the cluster
    /// closes a copy that another node owns after a partition healed).
    public func closeRoom(id: String, reason: String) {
        guard let room = rooms.first(where: { $0.id == id }) else { return }
        close(room, reason: reason)
        flushOutbox()
    }

    public func counts() -> (rooms: Int, members: Int, publications: Int, subscriptions: Int) {
        (rooms.count, rooms.reduce(0) { $0 + $1.members.count }, rooms.reduce(0) { $0 + $1.publications.count },
         rooms.reduce(0) { $0 + $1.subscriptions.count })
    }
}
