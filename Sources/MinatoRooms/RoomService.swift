internal import Foundation
public import Logging
public import MinatoTransport
internal import MinatoMedia
internal import MinatoWire
internal import Metrics

/// The room model of one server: every Room, Member, Publication and Subscription, the event
/// log, keepalive expiry, and the JSON-RPC methods of PROTOCOL.md. One actor owns all of it;
/// media work goes to the room's `MediaWorker` through its inbox.
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
    var nextWaiterToken: UInt64 = 0

    public init(configuration: RoomConfiguration, workers: [MediaWorker], logger: Logger, verifier: TokenVerifier? = nil) {
        self.configuration = configuration
        self.workers = workers
        self.logger = logger
        self.verifier = verifier
    }

    public var authEnabled: Bool { verifier != nil }

    /// Starts the keepalive sweep and listens to worker events; call once.
    public func start() {
        guard !started else { return }
        started = true
        for w in workers {
            Task { [weak self] in
                for await event in w.events { await self?.workerEvent(event) }
            }
        }
        Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                guard let self else { return }
                await self.sweep()
            }
        }
    }

    // MARK: JSON-RPC entry points

    /// Parses one text frame from `channel` (on the caller's task) and handles it.
    public nonisolated func handle(text: String, channel: ClientChannel) async {
        switch JsonRpcRequest.parse(text) {
        case .success(let request): await handle(request, channel: channel)
        case .failure(let rejection): channel.send(rejection.responseText)
        }
    }

    /// Handles one request and sends its response (then any notifications it caused).
    public func handle(_ request: JsonRpcRequest, channel: ClientChannel) async {
        let method = request.method, params = Params(request.params)
        let known = Self.methods.contains(method) ? method : "unknown"
        Counter(label: "minato_signaling_requests_total", dimensions: [("method", known)]).increment()
        do {
            let grant = try await authorize(method: method, params: params, channel: channel)
            let result = try await dispatch(method: method, params: params, channel: channel, grant: grant)
            send(channel, JsonRpc.response(id: request.id, result: result))
        } catch let error as RoomError {
            Counter(label: "minato_signaling_errors_total", dimensions: [("name", error.name)]).increment()
            send(channel, JsonRpc.response(id: request.id, error: error))
        } catch {
            logger.error("request failed", metadata: ["method": "\(method)", "error": "\(error)"])
            Counter(label: "minato_signaling_errors_total", dimensions: [("name", "internal")]).increment()
            send(channel, JsonRpc.response(id: request.id, error: .internalError("The server could not complete this request; it has been logged.")))
        }
        flushOutbox()
    }

    /// Counts a request refused before it was handled (the connection's in-flight limit).
    public nonisolated func countRefused(_ request: JsonRpcRequest) {
        Counter(label: "minato_signaling_errors_total", dimensions: [("name", "limitExceeded")]).increment()
    }

    /// The WebSocket closed: its members stay for their keepalive gap, waiting for a reconnect.
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
    }

    static let methods: Set<String> = [
        "authenticate", "updateAuthToken", "listRooms", "createRoom", "findRoom", "findOrCreateRoom", "closeRoom",
        "updateRoomMetadata", "getRoom", "subscribeRoomEvents", "join", "leave", "keepalive", "updateMemberMetadata",
        "publish", "negotiate", "unpublish", "enablePublication", "disablePublication", "updatePublicationMetadata",
        "subscribe", "unsubscribe", "answer", "iceCandidate", "changePreferredEncoding",
    ]

    func dispatch(method: String, params: Params, channel: ClientChannel, grant: AuthGrant?) async throws -> JSONValue {
        switch method {
        case "authenticate", "updateAuthToken": return try await authenticate(params, channel: channel, update: method == "updateAuthToken")
        case "listRooms":
            let visible = rooms.filter { room in grant.map { !$0.rules(forRoom: room.name).isEmpty } ?? true }
            return ["rooms": .array(visible.map(\.summaryJSON))]
        case "createRoom": return try await createRoom(params, channel: channel, grant: grant)
        case "findRoom": return try findRoom(params, grant: grant)
        case "findOrCreateRoom": return try await findOrCreateRoom(params, channel: channel, grant: grant)
        case "closeRoom": return try closeRoom(params, grant: grant)
        case "updateRoomMetadata": return try updateRoomMetadata(params, grant: grant)
        case "getRoom":
            let room = try room(params.string("roomId"))
            try permit(grant, room: room)
            return ["room": room.json]
        case "subscribeRoomEvents": return try subscribeRoomEvents(params, channel: channel, grant: grant)
        case "join": return try await join(params, channel: channel, grant: grant)
        case "leave":
            let (room, member) = try joinedMember(params, channel: channel)
            removeMember(member, from: room, reason: "left")
            return [:]
        case "keepalive": return try keepalive(params, channel: channel)
        case "updateMemberMetadata":
            let (room, member) = try joinedMember(params, channel: channel)
            member.metadata = try params.requiredMetadata("metadata")
            emit(room, "memberMetadataUpdated", ["member": member.json])
            return [:]
        case "publish": return try await publish(params, channel: channel)
        case "negotiate": return try await negotiate(params, channel: channel)
        case "unpublish":
            let (room, pub) = try ownPublication(params, channel: channel)
            unpublish(pub, in: room)
            return [:]
        case "enablePublication", "disablePublication":
            let (room, pub) = try ownPublication(params, channel: channel)
            setEnabled(pub, method == "enablePublication", in: room)
            return [:]
        case "updatePublicationMetadata":
            let (room, pub) = try ownPublication(params, channel: channel)
            pub.metadata = try params.requiredMetadata("metadata")
            emit(room, "publicationMetadataUpdated", ["publication": pub.json])
            return [:]
        case "subscribe": return try await subscribe(params, channel: channel)
        case "unsubscribe": return try await unsubscribe(params, channel: channel)
        case "answer": return try await answer(params, channel: channel)
        case "iceCandidate": return try await iceCandidate(params, channel: channel)
        case "changePreferredEncoding":
            let (room, member) = try joinedMemberOfSubscription(params, channel: channel)
            let sid = try params.string("subscriptionId")
            guard let sub = room.subscription(sid), sub.subscriberId == member.id else { throw RoomError.subscriptionNotFound(sid) }
            let preferred = try params.string("preferredEncodingId")
            try Params.checkPreferredEncoding(preferred, of: room.publication(sub.publicationId))
            sub.preferredEncodingId = preferred
            return [:]
        default:
            throw RoomError.methodNotFound(method)
        }
    }

    // MARK: Lookup and validation

    func room(_ id: String) throws -> Room {
        guard let r = rooms.first(where: { $0.id == id }) else { throw RoomError.roomNotFound("with id '\(id)'") }
        return r
    }

    func findMember(_ id: String) -> (Room, LocalSFURoomMember)? {
        for r in rooms { if let m = r.member(id) { return (r, m) } }
        return nil
    }

    /// The member named by `memberId`, which must be joined on this connection.
    func joinedMember(_ p: Params, channel: ClientChannel) throws -> (Room, LocalSFURoomMember) {
        let id = try p.string("memberId")
        guard let (room, member) = findMember(id) else { throw RoomError.memberNotFound(id) }
        guard member.channel?.id == channel.id else {
            throw RoomError.notJoined("Member '\(id)' is not joined on this connection; join, or call keepalive to take it over after a reconnect.")
        }
        member.lastSeen = clock.now
        return (room, member)
    }

    func joinedMemberOfSubscription(_ p: Params, channel: ClientChannel) throws -> (Room, LocalSFURoomMember) {
        let sid = try p.string("subscriptionId")
        for room in rooms {
            if let sub = room.subscription(sid), let member = room.member(sub.subscriberId) {
                guard member.channel?.id == channel.id else {
                    throw RoomError.insufficientPermissions("Only the subscriber may change subscription '\(sid)'.")
                }
                member.lastSeen = clock.now
                return (room, member)
            }
        }
        throw RoomError.subscriptionNotFound(sid)
    }

    func ownPublication(_ p: Params, channel: ClientChannel) throws -> (Room, RoomPublication) {
        let pid = try p.string("publicationId")
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

    func stillJoined(_ member: LocalSFURoomMember, _ room: Room) throws {
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
        let text = JsonRpc.notification("roomEvent", .object(event)).serialized()
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

    func send(_ channel: ClientChannel, _ message: JSONValue) { channel.send(message.serialized()) }


    // MARK: Introspection (admin, tests)

    public func snapshot() -> JSONValue { ["rooms": .array(rooms.map(\.json))] }

    /// Closes every room (members leave with reason `roomClosed`, then `closed`): used on
    /// shutdown so clients hear why their media stopped, and by the fuzzer between inputs.
    public func closeAllRooms() {
        for room in rooms { close(room) }
        flushOutbox()
    }

    public func counts() -> (rooms: Int, members: Int, publications: Int, subscriptions: Int) {
        (rooms.count, rooms.reduce(0) { $0 + $1.members.count }, rooms.reduce(0) { $0 + $1.publications.count },
         rooms.reduce(0) { $0 + $1.subscriptions.count })
    }
}
