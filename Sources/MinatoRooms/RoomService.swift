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

    /// Handles one text frame from `channel` and sends the response (then any notifications).
    public func handle(text: String, channel: ClientChannel) async {
        let request: JSONValue
        do { request = try JSONValue.parse(text) } catch {
            send(channel, response(id: .null, error: .parseError("The frame is not valid JSON.")))
            return
        }
        guard case .object(let obj) = request else {
            send(channel, response(id: .null, error: .invalidRequest("A request must be a JSON object.")))
            return
        }
        let id = obj["id"] ?? .null
        guard obj["jsonrpc"]?.stringValue == "2.0", let method = obj["method"]?.stringValue else {
            send(channel, response(id: id, error: .invalidRequest("A request needs \"jsonrpc\":\"2.0\" and a string \"method\".")))
            return
        }
        switch id { case .int, .string, .null: break
        default:
            send(channel, response(id: .null, error: .invalidRequest("\"id\" must be a number or a string.")))
            return
        }
        let params: [String: JSONValue]
        switch obj["params"] {
        case nil, .null?: params = [:]
        case .object(let p)?: params = p
        default:
            send(channel, response(id: id, error: .invalidParams("\"params\" must be an object.")))
            return
        }
        let known = Self.methods.contains(method) ? method : "unknown"
        Counter(label: "minato_signaling_requests_total", dimensions: [("method", known)]).increment()
        do {
            let grant = try await authorize(method: method, params: Params(params), channel: channel)
            let result = try await dispatch(method: method, params: Params(params), channel: channel, grant: grant)
            send(channel, response(id: id, result: result))
        } catch let error as RoomError {
            Counter(label: "minato_signaling_errors_total", dimensions: [("name", error.name)]).increment()
            send(channel, response(id: id, error: error))
        } catch {
            logger.error("request failed", metadata: ["method": "\(method)", "error": "\(error)"])
            Counter(label: "minato_signaling_errors_total", dimensions: [("name", "internal")]).increment()
            send(channel, response(id: id, error: .internalError("The server failed: \(error)")))
        }
        flushOutbox()
    }

    /// The WebSocket closed: its members stay for their keepalive gap, waiting for a reconnect.
    public func channelClosed(_ channelId: UInt64) {
        let now = clock.now
        sessions[channelId] = nil
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
            let visible = rooms.filter { grant == nil || !grant!.rules(forRoom: $0.name).isEmpty }
            return ["rooms": .array(visible.map(\.summaryJSON))]
        case "createRoom": return try createRoom(params, grant: grant)
        case "findRoom": return try findRoom(params, grant: grant)
        case "findOrCreateRoom": return try findOrCreateRoom(params, grant: grant)
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
            member.metadata = try params.metadata("metadata", required: true)!
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
            pub.metadata = try params.metadata("metadata", required: true)!
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
            sub.preferredEncodingId = try params.string("preferredEncodingId")
            return [:]
        default:
            throw RoomError.methodNotFound(method)
        }
    }

    // MARK: Rooms

    func createRoom(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        let name = try p.name("name")
        try permit(grant, roomNamed: name, action: "create")
        if let name, rooms.contains(where: { $0.name == name }) { throw RoomError.roomNameDuplicated(name) }
        let room = makeRoom(name: name, metadata: try p.metadata("metadata") ?? "", password: try p.optionalString("password"))
        return ["room": room.json]
    }

    func makeRoom(name: String?, metadata: String, password: String?) -> Room {
        // Least-loaded worker by room count.
        var counts = [Int](repeating: 0, count: workers.count)
        for r in rooms { counts[r.worker] += 1 }
        let worker = counts.indices.min { counts[$0] < counts[$1] } ?? 0
        let room = Room(id: UUID().uuidString.lowercased(), name: name, metadata: metadata,
                        password: password.map { PasswordHash(password: $0) }, worker: worker, router: RouterId(nextRouterId))
        nextRouterId += 1
        rooms.append(room)
        logger.info("room created", metadata: ["room": "\(room.id)", "worker": "\(worker)"])
        return room
    }

    func findRoom(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        if let id = try p.optionalString("id") {
            let r = try room(id)
            try permit(grant, room: r)
            return ["room": r.json]
        }
        if let name = try p.name("name") {
            try permit(grant, roomNamed: name, action: nil)
            guard let r = rooms.first(where: { $0.name == name }) else { throw RoomError.roomNotFound("named '\(name)'") }
            return ["room": r.json]
        }
        throw RoomError.invalidParams("findRoom needs \"id\" or \"name\".")
    }

    func findOrCreateRoom(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        guard let name = try p.name("name") else { throw RoomError.invalidParams("findOrCreateRoom needs \"name\".") }
        try permit(grant, roomNamed: name, action: nil)
        if let r = rooms.first(where: { $0.name == name }) { return ["room": r.json] }
        try permit(grant, roomNamed: name, action: "create")
        let room = makeRoom(name: name, metadata: try p.metadata("metadata") ?? "", password: try p.optionalString("password"))
        return ["room": room.json]
    }

    func closeRoom(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        let room = try room(p.string("roomId"))
        try permit(grant, roomNamed: room.name, action: "close")
        close(room)
        return [:]
    }

    func close(_ room: Room) {
        // Members hear `closed` too (after their memberLeft), not only event listeners.
        for m in room.members {
            if let c = m.channel { room.listeners[c.id] = c }
            removeMember(m, from: room, reason: "roomClosed")
        }
        emit(room, "closed", [:])
        rooms.removeAll { $0 === room }
        logger.info("room closed", metadata: ["room": "\(room.id)"])
    }

    func updateRoomMetadata(_ p: Params, grant: AuthGrant?) throws -> JSONValue {
        let room = try room(p.string("roomId"))
        try permit(grant, roomNamed: room.name, action: "updateMetadata")
        room.metadata = try p.metadata("metadata", required: true)!
        emit(room, "metadataUpdated", ["room": room.summaryJSON])
        return [:]
    }

    func subscribeRoomEvents(_ p: Params, channel: ClientChannel, grant: AuthGrant?) throws -> JSONValue {
        let room = try room(p.string("roomId"))
        try permit(grant, room: room)
        let offset = try p.optionalInt("offset") ?? 0
        room.listeners[channel.id] = channel
        return ["events": .array(room.events.filter { ($0["version"]?.intValue ?? 0) > offset })]
    }

    // MARK: Members

    func join(_ p: Params, channel: ClientChannel, grant: AuthGrant?) async throws -> JSONValue {
        let room = try room(p.string("roomId"))
        let name = try p.name("name")
        if let grant {
            let rules = grant.rules(forRoom: room.name)
            guard !rules.isEmpty else { throw RoomError.insufficientPermissions(Self.noRoomRule(room.name)) }
            guard rules.contains(where: { r in r.member.map { globMatches($0.name, name ?? "") } ?? false }) else {
                throw RoomError.insufficientPermissions("The token's scope has no member rule matching the name '\(name ?? "")' in room '\(room.name ?? room.id)'.")
            }
        }
        let metadata = try p.metadata("metadata") ?? ""
        let password = try p.optionalString("password")
        let interval = try p.optionalInt("keepaliveIntervalSec") ?? configuration.defaultKeepaliveIntervalSec
        let gap = try p.optionalInt("keepaliveIntervalGapSec") ?? configuration.defaultKeepaliveIntervalGapSec
        let replace = try p.optionalBool("replace") ?? false
        let type = try p.optionalString("type") ?? "person"
        guard (1...3600).contains(interval), (0...3600).contains(gap) else {
            throw RoomError.invalidParameter("keepaliveIntervalSec must be 1...3600 and keepaliveIntervalGapSec 0...3600.")
        }
        guard type == "person" || type == "bot" else { throw RoomError.invalidParameter("type must be \"person\" or \"bot\".") }
        if let hash = room.password {
            guard let password, hash.matches(password) else { throw RoomError.wrongPassword() }
        }
        let existing = name.flatMap { n in room.members.first { $0.name == n } }
        if let existing, !replace { throw RoomError.memberNameDuplicated(existing.name ?? "") }
        if existing == nil, room.members.count >= configuration.maxMembersPerRoom {
            throw RoomError.limitExceeded("The room has its maximum of \(configuration.maxMembersPerRoom) members.")
        }
        if let existing { removeMember(existing, from: room, reason: "replaced") }
        let member = LocalSFURoomMember(id: UUID().uuidString.lowercased(), name: name, metadata: metadata, type: type,
                                        roomId: room.id, channel: channel, keepaliveIntervalSec: interval,
                                        keepaliveIntervalGapSec: gap, now: clock.now)
        room.members.append(member)
        emit(room, "memberJoined", ["member": member.json])
        logger.info("member joined", metadata: ["room": "\(room.id)", "member": "\(member.id)"])
        return ["member": member.json, "room": room.json]
    }

    func keepalive(_ p: Params, channel: ClientChannel) throws -> JSONValue {
        let id = try p.string("memberId")
        guard let (_, member) = findMember(id) else { throw RoomError.memberNotFound(id) }
        // A reconnecting client takes its member over on the new connection.
        let tookOver = member.channel?.id != channel.id
        member.channel = channel
        member.disconnectedAt = nil
        member.lastSeen = clock.now
        // A server offer sent to (or held for) the lost connection may never have arrived:
        // offer the current receive state again on the new one.
        if tookOver, member.recvTransport != nil, member.recvOfferPending || member.recvNeedsOffer {
            member.recvNeedsOffer = false
            sendOffer(member)
        }
        return ["ttlSec": .int(member.keepaliveIntervalSec + member.keepaliveIntervalGapSec)]
    }

    /// Removes a member: its publications are unpublished (events first), its subscriptions end,
    /// its transports close, and everyone (the member too) sees `memberLeft` with `reason`.
    func removeMember(_ member: LocalSFURoomMember, from room: Room, reason: String) {
        guard !member.removed else { return }
        member.removed = true
        for pub in room.publications where pub.publisherId == member.id { unpublish(pub, in: room) }
        for sub in room.subscriptions where sub.subscriberId == member.id { endSubscription(sub, in: room, offerToSubscriber: false) }
        let worker = workers[room.worker]
        for t in [member.sendTransport, member.recvTransport].compactMap({ $0 }) {
            transportOwners[t.id] = nil
            let id = t.id
            worker.post { $0.closeTransport(id) }
        }
        emit(room, "memberLeft", ["member": member.json], reason: reason)
        room.members.removeAll { $0 === member }
        logger.info("member left", metadata: ["room": "\(room.id)", "member": "\(member.id)", "reason": "\(reason)"])
    }

    func sweep() {
        if verifier != nil { warnExpiringTokens() }
        let now = clock.now
        for room in rooms {
            for m in room.members {
                let ttl = Duration.seconds(m.keepaliveIntervalSec + m.keepaliveIntervalGapSec)
                if let gone = m.disconnectedAt, now - gone > .seconds(m.keepaliveIntervalGapSec) {
                    removeMember(m, from: room, reason: "keepaliveExpired")
                } else if now - m.lastSeen > ttl {
                    removeMember(m, from: room, reason: "keepaliveExpired")
                }
            }
        }
        flushOutbox()
    }

    func workerEvent(_ event: WorkerEvent) {
        switch event {
        case .transportConnected(let id):
            logger.debug("transport connected", metadata: ["transport": "\(id)"])
        case .transportClosed(let id, let reason):
            guard let owner = transportOwners[id], let room = rooms.first(where: { $0.id == owner.room }),
                  let member = room.member(owner.member) else { return }
            logger.info("transport closed", metadata: ["member": "\(member.id)", "reason": "\(reason)"])
            let kind = reason.hasPrefix("ICE") ? "ice" : reason.contains("DTLS") ? "dtls" : "timeout"
            Counter(label: "minato_transport_failures_total", dimensions: [("kind", kind)]).increment()
            removeMember(member, from: room, reason: "transportClosed")
            flushOutbox()
        }
    }

    // MARK: Publications

    func publish(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let contentType = try p.string("contentType")
        guard contentType == "audio" || contentType == "video" else {
            throw RoomError.invalidParameter("contentType must be \"audio\" or \"video\".")
        }
        let mid = try p.string("mid")
        let sdp = try p.sessionDescription("offer", type: "offer")
        let metadata = try p.metadata("metadata") ?? ""
        let enabled = try p.optionalBool("isEnabled") ?? true
        var cap = configuration.maxSubscribersCap
        if let limit = tokenSubscriberLimit(channel: channel, room: room) { cap = min(cap, limit) }
        let maxSubscribers = try p.optionalInt("maxSubscribers") ?? min(configuration.defaultMaxSubscribers, cap)
        guard (1...max(1, cap)).contains(maxSubscribers) else {
            throw RoomError.invalidParameter("maxSubscribers must be 1...\(cap) (the server's cap and the token's sfu.maxSubscribersLimit).")
        }
        let encodings = try p.optionalArray("encodings") ?? []
        let sd = try SdpNegotiation.parse(sdp)
        guard let m = sd.media.first(where: { $0.mid == mid }) else {
            throw RoomError.invalidParameter("The offer has no m-line with mid '\(mid)'.")
        }
        guard m.kind == contentType else {
            throw RoomError.invalidParameter("m-line '\(mid)' is \(m.kind), not \(contentType).")
        }
        guard m.port != 0, m.direction == .sendonly || m.direction == .sendrecv else {
            throw RoomError.invalidParameter("m-line '\(mid)' must be sendonly (or sendrecv) to publish.")
        }
        if room.publications.contains(where: { $0.publisherId == member.id && $0.stream.mid == mid }) {
            throw RoomError.invalidParameter("m-line '\(mid)' is published already; unpublish it first.")
        }
        guard room.publications.filter({ $0.publisherId == member.id }).count < configuration.maxPublicationsPerMember else {
            throw RoomError.limitExceeded("A member may have at most \(configuration.maxPublicationsPerMember) publications.")
        }
        let stream = try SdpNegotiation.publishedStream(m)
        let remote = try SdpNegotiation.remoteTransport(of: sd)
        let local = try await ensureTransport(member, room: room, direction: "send")
        try stillJoined(member, room)
        if !member.sendRemoteApplied {
            member.sendRemoteApplied = true
            try await applyRemote(remote, to: local.id, member: member, room: room, direction: "send")
        }
        member.sendVersion += 1
        let answer = try SdpNegotiation.answerPublisherOffer(sd, local: local, version: member.sendVersion, sessionId: member.sessionId)
        let tid = local.id
        var ids = ExtensionIdMap()
        for (pub, sub) in stream.extensionIds { ids[pub] = sub }
        let extensionIds = ids
        let kind: MediaKind = contentType == "audio" ? .audio : .video
        let producer = try await workers[room.worker].perform { core in
            try core.addProducer(on: tid) { index in
                ProducerParameters(transport: index, kind: kind, ssrc: stream.ssrc, rtxSsrc: stream.rtxSsrc,
                                   payloadType: stream.codec.payloadType, clockRate: UInt32(stream.codec.clockRate),
                                   codec: stream.codec.videoCodec, keyFrameRequest: stream.codec.keyFrameRequest,
                                   paused: !enabled)
            }
        }
        _ = extensionIds
        guard !member.removed else {
            workers[room.worker].post { $0.removeProducer(producer) }
            throw RoomError.memberNotFound(member.id)
        }
        let pub = RoomPublication(id: UUID().uuidString.lowercased(), publisherId: member.id, contentType: contentType,
                                  metadata: metadata, enabled: enabled, stream: stream, maxSubscribers: maxSubscribers,
                                  encodings: encodings)
        pub.producer = producer
        room.publications.append(pub)
        emit(room, "streamPublished", ["publication": pub.json])
        return ["publication": pub.json, "answer": ["type": "answer", "sdp": .string(answer)]]
    }

    func negotiate(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let sd = try SdpNegotiation.parse(try p.sessionDescription("offer", type: "offer"))
        let remote = try SdpNegotiation.remoteTransport(of: sd)
        let local = try await ensureTransport(member, room: room, direction: "send")
        try stillJoined(member, room)
        if !member.sendRemoteApplied {
            member.sendRemoteApplied = true
            try await applyRemote(remote, to: local.id, member: member, room: room, direction: "send")
        }
        member.sendVersion += 1
        let answer = try SdpNegotiation.answerPublisherOffer(sd, local: local, version: member.sendVersion, sessionId: member.sessionId)
        return ["answer": ["type": "answer", "sdp": .string(answer)]]
    }

    /// Enables (forwarding resumes with a keyframe request) or disables (forwarding stops) a publication.
    func setEnabled(_ pub: RoomPublication, _ enable: Bool, in room: Room) {
        guard pub.enabled != enable else { return }
        pub.enabled = enable
        if let p = pub.producer { workers[room.worker].post { $0.setPaused(p, !enable) } }
        emit(room, enable ? "publicationEnabled" : "publicationDisabled", ["publication": pub.json])
    }

    /// Ends a publication: subscriptions end (events), `streamUnpublished`, new offers to subscribers.
    func unpublish(_ pub: RoomPublication, in room: Room) {
        for sub in room.subscriptions where sub.publicationId == pub.id { endSubscription(sub, in: room, offerToSubscriber: true) }
        if let producer = pub.producer { workers[room.worker].post { $0.removeProducer(producer) } }
        room.publications.removeAll { $0 === pub }
        emit(room, "streamUnpublished", ["publication": pub.json])
    }

    // MARK: Subscriptions

    func subscribe(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let pid = try p.string("publicationId")
        let preferred = try p.optionalString("preferredEncodingId")
        func check() throws -> RoomPublication {
            guard let pub = room.publication(pid) else { throw RoomError.publicationNotFound(pid) }
            if pub.publisherId == member.id { throw RoomError.cannotSubscribeOwnPublication() }
            if room.subscriptions.contains(where: { $0.publicationId == pid && $0.subscriberId == member.id }) {
                throw RoomError.subscriptionAlreadyExists(pid)
            }
            let count = room.subscriptions.filter { $0.publicationId == pid }.count
            if count >= pub.maxSubscribers { throw RoomError.maxSubscribersExceeded(pub.maxSubscribers) }
            if room.subscriptions.filter({ $0.subscriberId == member.id }).count >= configuration.maxSubscriptionsPerMember {
                throw RoomError.limitExceeded("A member may have at most \(configuration.maxSubscriptionsPerMember) subscriptions.")
            }
            return pub
        }
        _ = try check()
        let local = try await ensureTransport(member, room: room, direction: "recv")
        try await waitForReceiveIdle(member)
        try stillJoined(member, room)
        let pub = try check()
        let mid = String(member.nextMid)
        member.nextMid += 1
        let ssrc = UInt32.random(in: 1...UInt32.max)
        let sub = RoomSubscription(id: UUID().uuidString.lowercased(), publicationId: pub.id, subscriberId: member.id,
                                   contentType: pub.contentType, mid: mid, ssrc: ssrc, preferredEncodingId: preferred)
        member.recvSlots.append(ReceiveSlot(mid: mid, kind: pub.contentType, codec: pub.stream.codec, subscriptionId: sub.id,
                                            ssrc: ssrc, streamId: pub.publisherId, trackId: pub.id, cname: "minato-\(pub.publisherId.prefix(8))"))
        room.subscriptions.append(sub)
        let offer = receiveOffer(member, local: local)
        member.recvOfferPending = true
        emit(room, "publicationSubscribed", ["subscription": sub.json])
        return ["subscription": sub.json, "mid": .string(mid), "offer": ["type": "offer", "sdp": .string(offer)]]
    }

    func unsubscribe(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMemberOfSubscription(p, channel: channel)
        let sid = try p.string("subscriptionId")
        guard let sub = room.subscription(sid), sub.subscriberId == member.id else { throw RoomError.subscriptionNotFound(sid) }
        try await waitForReceiveIdle(member)
        try stillJoined(member, room)
        guard room.subscription(sid) != nil else { throw RoomError.subscriptionNotFound(sid) }
        endSubscription(sub, in: room, offerToSubscriber: false)
        guard let local = member.recvTransport else { return [:] }
        let offer = receiveOffer(member, local: local)
        member.recvOfferPending = true
        member.recvNeedsOffer = false
        return ["offer": ["type": "offer", "sdp": .string(offer)]]
    }

    func endSubscription(_ sub: RoomSubscription, in room: Room, offerToSubscriber: Bool) {
        if let c = sub.consumer { workers[room.worker].post { $0.removeConsumer(c) } }
        room.subscriptions.removeAll { $0 === sub }
        emit(room, "publicationUnsubscribed", ["subscription": sub.json])
        guard let member = room.member(sub.subscriberId) else { return }
        if let i = member.recvSlots.firstIndex(where: { $0.subscriptionId == sub.id }) { member.recvSlots[i].subscriptionId = nil }
        if offerToSubscriber && !member.removed { scheduleOffer(member) }
    }

    func answer(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let sd = try SdpNegotiation.parse(try p.sessionDescription("answer", type: "answer"))
        guard member.recvOfferPending, let local = member.recvTransport else {
            throw RoomError.invalidParameter("No server offer is waiting for an answer from this member.")
        }
        let remote = try SdpNegotiation.remoteTransport(of: sd)
        if !member.recvRemoteApplied {
            member.recvRemoteApplied = true
            try await applyRemote(remote, to: local.id, member: member, room: room, direction: "recv")
        }
        try stillJoined(member, room)
        member.recvOfferPending = false
        // Streams the client has now accepted start flowing.
        let worker = workers[room.worker]
        let tid = local.id
        for sub in room.subscriptions where sub.subscriberId == member.id && sub.consumer == nil {
            guard let pub = room.publication(sub.publicationId), let producer = pub.producer else { continue }
            var ids = ExtensionIdMap()
            for (publisherId, subscriberId) in pub.stream.extensionIds { ids[publisherId] = subscriberId }
            let map = ids
            let ssrc = sub.ssrc, pt = pub.stream.codec.payloadType
            let consumer = try await worker.perform { core in
                try core.addConsumer(on: tid) { index in
                    ConsumerParameters(producer: producer, transport: index, ssrc: ssrc, payloadType: pt, extensionIds: map)
                }
            }
            if room.subscription(sub.id) == nil { worker.post { $0.removeConsumer(consumer) } } else { sub.consumer = consumer }
        }
        if member.recvNeedsOffer {
            member.recvNeedsOffer = false
            sendOffer(member)
        }
        return [:]
    }

    func iceCandidate(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let direction = try p.string("direction")
        guard direction == "send" || direction == "recv" else {
            throw RoomError.invalidParameter("direction must be \"send\" or \"recv\".")
        }
        guard case .object(let c)? = p.raw["candidate"], let text = c["candidate"]?.stringValue else {
            throw RoomError.invalidParams("candidate must be {candidate, sdpMid, sdpMLineIndex}.")
        }
        let value: String? = text.isEmpty ? nil : text
        if let value, !value.hasPrefix("candidate:") && !value.hasPrefix("a=candidate:") {
            throw RoomError.invalidParameter("'\(value)' is not an ICE candidate line (it must start with 'candidate:').")
        }
        let transport = direction == "send" ? member.sendTransport : member.recvTransport
        let applied = direction == "send" ? member.sendRemoteApplied : member.recvRemoteApplied
        guard let transport, applied else {
            member.pendingCandidates[direction, default: []].append(value)
            return [:]
        }
        let id = transport.id
        try await workers[room.worker].perform { core in try core.addRemoteCandidate(id, value) }
        return [:]
    }

    // MARK: Negotiation helpers

    func ensureTransport(_ member: LocalSFURoomMember, room: Room, direction: String) async throws -> TransportDescription {
        while true {
            if let t = direction == "send" ? member.sendTransport : member.recvTransport { return t }
            let creating = direction == "send" ? member.creatingSend : member.creatingRecv
            if !creating { break }
            try await Task.sleep(for: .milliseconds(10))
            try stillJoined(member, room)
        }
        if direction == "send" { member.creatingSend = true } else { member.creatingRecv = true }
        defer { if direction == "send" { member.creatingSend = false } else { member.creatingRecv = false } }
        let id = TransportId(nextTransportId)
        nextTransportId += 1
        let router = room.router
        let description: TransportDescription
        do {
            description = try await workers[room.worker].perform { core in try core.createTransport(id: id, router: router) }
        } catch {
            throw RoomError.internalError("Could not open a media transport: \(error).")
        }
        if member.removed {
            workers[room.worker].post { $0.closeTransport(id) }
            throw RoomError.memberNotFound(member.id)
        }
        transportOwners[id] = (room.id, member.id)
        if direction == "send" { member.sendTransport = description } else { member.recvTransport = description }
        return description
    }

    func applyRemote(_ remote: RemoteTransportParameters, to id: TransportId, member: LocalSFURoomMember,
                     room: Room, direction: String) async throws {
        var remote = remote
        for c in member.pendingCandidates[direction] ?? [] {
            if let c { remote.candidates.append(c) } else { remote.endOfCandidates = true }
        }
        member.pendingCandidates[direction] = []
        let r = remote
        try await workers[room.worker].perform { core in try core.setRemote(id, r) }
    }

    func waitForReceiveIdle(_ member: LocalSFURoomMember) async throws {
        var waited = 0
        while member.recvOfferPending && waited < 10_000 {
            try await Task.sleep(for: .milliseconds(20))
            waited += 20
        }
    }

    func receiveOffer(_ member: LocalSFURoomMember, local: TransportDescription) -> String {
        member.recvVersion += 1
        let mids = member.recvSlots.map(\.mid)
        var lines = SdpNegotiation.sessionHeader(version: member.recvVersion, sessionId: member.sessionId, mids: mids,
                                                 iceLite: local.iceLite)
        for (i, slot) in member.recvSlots.enumerated() { lines += slot.lines(local: local, candidates: i == 0) }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// A server-made offer (not a reply) goes out when no other offer awaits an answer.
    func scheduleOffer(_ member: LocalSFURoomMember) {
        if member.recvOfferPending { member.recvNeedsOffer = true } else { sendOffer(member) }
    }

    func sendOffer(_ member: LocalSFURoomMember) {
        guard let local = member.recvTransport, let channel = member.channel else {
            member.recvNeedsOffer = true
            return
        }
        let offer = receiveOffer(member, local: local)
        member.recvOfferPending = true
        let note: JSONValue = ["jsonrpc": "2.0", "method": "offer",
                               "params": ["memberId": .string(member.id), "offer": ["type": "offer", "sdp": .string(offer)]]]
        outbox.append((channel, note.serialized()))
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
        if !rooms.contains(where: { $0 === room }) { throw RoomError.roomClosed(room.id) }
    }

    // MARK: Events and sending

    func emit(_ room: Room, _ type: String, _ data: JSONValue, reason: String? = nil) {
        room.version += 1
        var event: [String: JSONValue] = ["roomId": .string(room.id), "version": .int(room.version),
                                          "type": .string(type), "data": data]
        if let reason { event["reason"] = .string(reason) }
        room.events.append(.object(event))
        if room.events.count > configuration.maxEventLog { room.events.removeFirst(room.events.count - configuration.maxEventLog) }
        let text = JSONValue.object(["jsonrpc": "2.0", "method": "roomEvent", "params": .object(event)]).serialized()
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

    func response(id: JSONValue, result: JSONValue) -> JSONValue { ["jsonrpc": "2.0", "id": id, "result": result] }
    func response(id: JSONValue, error: RoomError) -> JSONValue { ["jsonrpc": "2.0", "id": id, "error": error.json] }

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
