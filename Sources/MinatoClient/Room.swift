public import MinatoTransport
public import Logging
public import MinatoWire
internal import Synchronization

/// Holds a value that is only touched on one client worker's thread; the box may cross tasks.
struct WorkerBound<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// A room on an SFU (SkyWay's `SFURoom`): find or create one, then `join` it.
public final class SFURoom: Sendable {
    /// The room's id. A rejoin (`LocalSFURoomMember.connectionEvents`) moves this object to the
    /// room found again by its name, which has a new id.
    public var id: String { current.withLock { $0.id } }
    public let name: String?
    public let context: Context
    /// Every room event seen by a member joined through this object, in version order.
    public let events: AsyncStream<RoomEvent>
    private let eventSink: AsyncStream<RoomEvent>.Continuation
    /// The password given to create or find the room: a rejoin finds it again with it.
    let password: String?
    /// Who is speaking (`activeSpeakersChanged`, as its joined members' sockets report it).
    public let activeSpeakers = ActiveSpeakerBoard()
    private let current: Mutex<(id: String, lastVersion: Int)>

    init(snapshot: RoomSnapshot, context: Context, password: String?) {
        name = snapshot.name
        self.context = context
        self.password = password
        (events, eventSink) = AsyncStream<RoomEvent>.makeStream()
        current = Mutex((snapshot.id, snapshot.version ?? 0))
    }

    private static func room(_ result: JSON, _ context: Context, password: String?) throws -> SFURoom {
        guard let room = result["room"] else { throw ClientError.badResponse("no room in the result") }
        return SFURoom(snapshot: try room.decode(RoomSnapshot.self), context: context, password: password)
    }

    static func body(name: String?, metadata: String?, password: String?) -> JSON {
        var p: [String: JSON] = [:]
        if let name { p["name"] = .string(name) }
        if let metadata { p["metadata"] = .string(metadata) }
        if let password { p["password"] = .string(password) }
        return .object(p)
    }

    public static func create(_ context: Context, name: String? = nil, metadata: String? = nil,
                              password: String? = nil) async throws -> SFURoom {
        try room(await context.channel().call("createRoom", body(name: name, metadata: metadata, password: password)),
                 context, password: password)
    }

    public static func find(_ context: Context, id: String) async throws -> SFURoom {
        try room(await context.channel().call("findRoom", ["id": .string(id)]), context, password: nil)
    }

    public static func find(_ context: Context, name: String) async throws -> SFURoom {
        try room(await context.channel().call("findRoom", ["name": .string(name)]), context, password: nil)
    }

    public static func findOrCreate(_ context: Context, name: String, metadata: String? = nil,
                                    password: String? = nil) async throws -> SFURoom {
        try room(await context.channel().call("findOrCreateRoom", body(name: name, metadata: metadata, password: password)),
                 context, password: password)
    }

    /// The room's current state.
    public func snapshot() async throws -> RoomSnapshot {
        guard let room = try await context.channel().call("getRoom", ["roomId": .string(id)])["room"] else {
            throw ClientError.badResponse("no room in the result")
        }
        return try room.decode(RoomSnapshot.self)
    }

    /// Closes the room for everyone (members are removed with reason `roomClosed`).
    public func close() async throws {
        try await context.channel().call("closeRoom", ["roomId": .string(id)])
    }

    /// Joins as a new member on its own WebSocket (to the first of the context's URLs that accepts it).
    public func join(name: String? = nil, metadata: String? = nil, password: String? = nil,
                     keepaliveIntervalSec: Int = 30, replace: Bool = false) async throws -> LocalSFURoomMember {
        let (channel, urlIndex) = try await Context.openChannel(context.options)
        let request = JoinRequest(name: name, metadata: metadata, password: password, keepaliveIntervalSec: keepaliveIntervalSec)
        do {
            let result = try await channel.call("join", request.params(roomId: id, replace: replace))
            guard let m = result["member"] else { throw ClientError.badResponse("no member in the join result") }
            let member = LocalSFURoomMember(member: try m.decode(Member.self), room: self, channel: channel, urlIndex: urlIndex,
                                            request: request, reconnectSecret: result["reconnectSecret"]?.string,
                                            snapshot: try? result["room"]?.decode(RoomSnapshot.self),
                                            iceServers: IceServer.list(result["iceServers"]))
            member.start()
            return member
        } catch {
            channel.close()
            throw error
        }
    }

    func deliver(_ event: RoomEvent) {
        let fresh = current.withLock { c -> Bool in
            guard event.version > c.lastVersion else { return false }
            c.lastVersion = event.version
            return true
        }
        if fresh { eventSink.yield(event) }
    }

    /// A rejoin found the room again as `snapshot`: this object is that room from now on.
    func moved(to snapshot: RoomSnapshot) {
        current.withLock { $0 = (snapshot.id, snapshot.version ?? 0) }
    }
}

/// The member this client joined as (SkyWay's `LocalSFURoomMember`): publishes sources,
/// subscribes to publications, leaves. Every method is async; the media runs on the context's
/// worker thread. When its room is lost (its node failed, or its socket closed) it joins it again
/// by name on its own, re-publishes and re-subscribes (`connectionEvents`); this object stays the
/// member, with the new id.
public actor LocalSFURoomMember {
    /// The member as the server describes it; a rejoin replaces it (a new id).
    public nonisolated var member: Member { current.withLock { $0 } }
    public nonisolated var id: String { member.id }
    public nonisolated let room: SFURoom
    /// Room events this member receives, in version order (after a rejoin, the new room's);
    /// ends when the member leaves or is lost for good.
    public nonisolated let events: AsyncStream<RoomEvent>
    /// Rejoins: `.reconnecting`, then `.reconnected` or `.failed`; ends with `events`.
    public nonisolated let connectionEvents: AsyncStream<MemberConnectionEvent>
    nonisolated let current: Mutex<Member>
    private nonisolated let eventSink: AsyncStream<RoomEvent>.Continuation
    nonisolated let connectionSink: AsyncStream<MemberConnectionEvent>.Continuation
    nonisolated let request: JoinRequest
    var channel: RpcChannel
    /// The index, in the context's URLs, of the server `channel` goes to.
    var urlIndex: Int
    /// The join result's `reconnectSecret` (PROTOCOL "keepalive"): sent with every keepalive; the
    /// server lets another connection take this member over only with it. Never logged or exposed.
    var reconnectSecret: String?
    /// The join result's `iceServers` (TURN with this member's own credential, static STUN), or
    /// the last `renewIceServers()`'s; empty when the server has none. Connections made (or ICE
    /// restarted) afterwards allocate a relayed candidate on each TURN server in it
    /// (docs/sdk-swift.md "TURN").
    public internal(set) var iceServers: [IceServer]
    let media = WorkerBound(MemberMedia())
    var tracks: [OfferedTrack] = []
    var publicationMids: [String: String] = [:]   // publication id -> mid
    var subscriptionSsrcs: [String: UInt32] = [:]
    var sources: [PublishedSource] = []
    var subscribed: [String: SubscribedStream] = [:]   // by subscription id
    var directory: RoomDirectory
    var sendVersion = 0
    /// Data channels this member labelled so far (`publish(_: LocalDataStream)`).
    var dataLabels = 0
    var recvVersion = 0
    let sessionId = UInt64.random(in: 1...UInt64(Int64.max))
    let cname = "minato-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
    private var notificationTask: Task<Void, Never>?
    var keepaliveTask: Task<Void, Never>?
    private var supervisorTask: Task<Void, Never>?
    var left = false
    var rejoining = false
    /// A new socket is being had for the member (`resumeSignaling`).
    var resumingSignaling = false
    /// A heartbeat `keepalive` is waiting for its answer.
    var heartbeatInFlight = false
    /// While missed events are replayed, live ones wait here (`deliver` skips versions seen).
    var holdingEvents = false
    private var heldEvents: [RoomEvent] = []
    /// The version of the last room event delivered (the join's own `memberJoined` is in the
    /// join result's snapshot and is delivered too, so this is not the directory's version).
    var deliveredVersion = 0
    /// Room events replayed after a signaling recovery (the ones missed while the socket was down).
    public internal(set) var replayedEvents = 0
    /// Recoveries that completed without a rejoin: the socket taken back, a connection's path
    /// restored by an ICE restart.
    public internal(set) var signalingRecoveries = 0
    public internal(set) var mediaRecoveries = 0
    /// The connection quality (`.qualityChanged`); nil until there was media to rate.
    public internal(set) var connectionQuality: ConnectionQuality?

    init(member: Member, room: SFURoom, channel: RpcChannel, urlIndex: Int, request: JoinRequest,
         reconnectSecret: String?, snapshot: RoomSnapshot?, iceServers: [IceServer] = []) {
        current = Mutex(member)
        self.room = room
        self.channel = channel
        self.urlIndex = urlIndex
        self.request = request
        self.reconnectSecret = reconnectSecret
        self.iceServers = iceServers
        directory = snapshot.map(RoomDirectory.init) ?? RoomDirectory()
        (events, eventSink) = AsyncStream<RoomEvent>.makeStream()
        (connectionEvents, connectionSink) = AsyncStream<MemberConnectionEvent>.makeStream()
    }

    nonisolated func start() {
        Task { await self.begin() }
    }

    private func begin() {
        listen()
        startKeepalive()
        if room.context.options.recover {
            supervisorTask = Task { [weak self] in await self?.supervise() }
        }
    }

    /// Reads the notifications of `channel` until it closes; a closed socket loses the member.
    func listen() {
        let channel = self.channel
        notificationTask = Task { [weak self] in
            for await n in channel.notifications { await self?.handle(n) }
            await self?.channelEnded(channel)
        }
    }

    private func handle(_ n: RpcChannel.Notification) async {
        switch n.method {
        case "roomEvent":
            if room.activeSpeakers.deliver(n.params, roomId: room.id) { return }   // no version: not a RoomEvent
            guard let e = RoomEvent(n.params) else { return }
            if holdingEvents { heldEvents.append(e) } else { deliver(e) }
        case "offer":
            guard n.params["memberId"]?.string == id, let sdp = n.params["offer"]?["sdp"]?.string else { return }
            _ = try? await applyServerOffer(sdp)
        default:
            break
        }
    }

    /// Applies and hands out one room event of this member's room, once per version; false for
    /// another room's, or one already delivered (a replay overlapping the live events).
    @discardableResult
    func deliver(_ e: RoomEvent) -> Bool {
        guard e.roomId == room.id, e.version > deliveredVersion else { return false }
        deliveredVersion = e.version
        directory.apply(e)
        if e.type == "streamUnpublished", let p = e.publication {
            subscribed = subscribed.filter { $0.value.publicationId != p.id }
        } else if e.type == "publicationUnsubscribed", let s = e.subscription {
            subscribed[s.id] = nil
        }
        eventSink.yield(e)
        room.deliver(e)
        if e.type == "closed", e.reason == "nodeFailed" { startRejoin(.nodeFailed) }
        return true
    }

    /// The selected pair's local candidate type on one connection ("host", "prflx", "relay":
    /// through a TURN server of `iceServers`), nil before one is selected.
    public func selectedCandidateType(_ side: ConnectionSide) async throws -> String? {
        let media = self.media
        return try await worker.perform { _ in (side == .send ? media.value.send : media.value.recv)?.selectedCandidateType }
    }

    /// Ends a replay: the live events that waited, in version order.
    func releaseHeldEvents() {
        holdingEvents = false
        let held = heldEvents.sorted { $0.version < $1.version }
        heldEvents = []
        for e in held { deliver(e) }
    }

    /// A closed socket: with recovery on, the member is taken back on a new one
    /// (`resumeSignaling`); otherwise, or when that fails, it rejoins.
    private func channelEnded(_ ended: RpcChannel) {
        guard ended === channel, !left else { return }
        if room.context.options.recover {
            Task { await self.resumeSignaling() }
        } else {
            startRejoin(.memberLost)
        }
    }

    func startKeepalive() {
        keepaliveTask?.cancel()
        let channel = self.channel, memberId = id, period = Self.keepalivePeriodSec(interval: request.keepaliveIntervalSec)
        var keepalive: [String: JSON] = ["memberId": .string(memberId)]
        if let reconnectSecret { keepalive["reconnectSecret"] = .string(reconnectSecret) }
        let params = JSON.object(keepalive)
        keepaliveTask = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(period))
                if Task.isCancelled { break }
                do {
                    try await channel.call("keepalive", params)
                } catch let e as RoomError where e.name == "memberNotFound" {
                    // Gone without a memberLeft (which comes first on this socket): in a
                    // cluster, the node that hosted the room failed.
                    await self?.lost(memberId)
                    return
                } catch {}
            }
        }
    }

    func lost(_ memberId: String) {
        if memberId == id, !left { startRejoin(.memberLost) }
    }

    var worker: ClientWorker { room.context.worker }

    // MARK: Publishing

    /// Publishes `source`: adds a sending m-line to the send connection, negotiates it with the
    /// server, and starts pulling packets from the source on the worker thread.
    public func publish<S: RtpSource & Sendable>(_ source: S, options: PublicationOptions = PublicationOptions()) async throws -> RoomPublication {
        let media = self.media
        let local = try await connection(.send).local
        let mid = String(tracks.count)
        var track = OfferedTrack(mid: mid, codec: source.codec, ssrc: UInt32.random(in: 1...UInt32.max), cname: cname)
        track.audioLevelExtensionId = (source as? any AudioLevelSource)?.audioLevelExtensionId
        let firstNegotiation = tracks.isEmpty
        tracks.append(track)
        sendVersion += 1
        let offer = ClientSdp.offer(local: local, tracks: tracks, sessionId: sessionId, version: sendVersion)
        var p: [String: JSON] = ["memberId": .string(id), "contentType": .string(source.codec.kind.rawValue), "mid": .string(mid),
                                 "offer": ["type": "offer", "sdp": .string(offer)], "isEnabled": .bool(options.isEnabled)]
        if let m = options.metadata { p["metadata"] = .string(m) }
        if let m = options.maxSubscribers { p["maxSubscribers"] = .number(Double(m)) }
        let result: JSON
        do { result = try await channel.call("publish", .object(p)) } catch {
            tracks.removeLast()
            throw error
        }
        guard let pubJSON = result["publication"], let answer = result["answer"]?["sdp"]?.string else {
            throw ClientError.badResponse("publish returned no publication or answer")
        }
        let publication = try pubJSON.decode(Publication.self)
        publicationMids[publication.id] = mid
        sources.append(PublishedSource(publicationId: publication.id, source: source, options: options))
        let answerSdp = try SessionDescription.parse(answer)
        if firstNegotiation {
            let remote = try ClientSdp.remoteTransport(of: answerSdp)
            let role = ClientSdp.dtlsRole(answeringOurOffer: remote.setup)
            try await worker.perform { _ in media.value.send?.setRemote(remote, dtlsRole: role) }
            try await waitConnected(send: true)
        }
        let box = WorkerBound(source)
        let ssrc = track.ssrc
        try await worker.perform { core in
            guard let c = media.value.send else { return }
            let stream = OutboundStream(source: box.value, ssrc: ssrc, connection: c)
            media.value.outbound[mid] = stream
            stream.start(on: core)
        }
        return RoomPublication(publication: publication, mid: mid, ssrc: ssrc)
    }

    /// Stops sending and unpublishes (subscribers see `streamUnpublished`).
    public func unpublish(publicationId: String) async throws {
        try await channel.call("unpublish", ["publicationId": .string(publicationId)])
        sources.removeAll { $0.publicationId == publicationId }
        guard let mid = publicationMids.removeValue(forKey: publicationId) else { return }
        let media = self.media
        try await worker.perform { core in media.value.outbound.removeValue(forKey: mid)?.stop(on: core) }
    }

    /// Pauses or resumes a publication on the server (SkyWay's enable/disable).
    public func setEnabled(publicationId: String, _ enabled: Bool) async throws {
        try await channel.call(enabled ? "enablePublication" : "disablePublication", ["publicationId": .string(publicationId)])
    }

    // MARK: Subscribing

    /// Subscribes to a publication; its packets go to `sink` on the worker thread, or, with the
    /// default, to a `PacketCollector` you get back from `packets(of:)`.
    public func subscribe(publicationId: String, sink: (any RtpSink & Sendable)? = nil) async throws -> RoomSubscription {
        let result = try await channel.call("subscribe", ["memberId": .string(id), "publicationId": .string(publicationId)])
        guard let subJSON = result["subscription"], let mid = result["mid"]?.string,
              let offer = result["offer"]?["sdp"]?.string else {
            throw ClientError.badResponse("subscribe returned no subscription, mid or offer")
        }
        let subscription = try subJSON.decode(Subscription.self)
        subscribed[subscription.id] = SubscribedStream(publicationId: publicationId, contentType: subscription.contentType, sink: sink)
        if subscription.contentType == .data { try await expectData(subscription.id) }
        let streams = try await applyServerOffer(offer)
        let stream = streams.first { $0.mid == mid }
        let ssrc = stream?.ssrcs.first
        if let ssrc {
            subscriptionSsrcs[subscription.id] = ssrc
            let media = self.media
            let box = WorkerBound(sink)
            try await worker.perform { _ in
                let target: any RtpSink
                if let s = box.value { target = s } else {
                    let collector = PacketCollector()
                    media.value.collectors[ssrc] = collector
                    target = collector
                }
                media.value.recvDemux.add(ssrc: ssrc, sink: target)
            }
        }
        try await waitConnected(send: false)
        if subscription.contentType == .data { try await waitDataOpen(subscription.id) }
        return RoomSubscription(subscription: subscription, mid: mid, ssrc: ssrc, codec: stream?.codec)
    }

    /// The received packets of a subscription made without a sink (decrypted copies).
    public func packets(of subscription: RoomSubscription) async throws -> AsyncStream<PacketCollector.Packet>? {
        guard let ssrc = subscription.ssrc else { return nil }
        let media = self.media
        return try await worker.perform { _ in media.value.collectors[ssrc]?.packets }
    }

    public func unsubscribe(subscriptionId: String) async throws {
        let result = try await channel.call("unsubscribe", ["subscriptionId": .string(subscriptionId)])
        subscribed[subscriptionId] = nil
        let media = self.media
        try await worker.perform { _ in media.value.dropDataInbox(subscriptionId) }
        if let ssrc = subscriptionSsrcs.removeValue(forKey: subscriptionId) {
            try await worker.perform { _ in
                media.value.recvDemux.remove(ssrc: ssrc)
                media.value.collectors.removeValue(forKey: ssrc)?.finish()
            }
        }
        if let sdp = result["offer"]?["sdp"]?.string { _ = try await applyServerOffer(sdp) }
    }

    /// Answers a server offer on the receive connection (made on the first one).
    @discardableResult
    private func applyServerOffer(_ sdp: String) async throws -> [ClientSdp.OfferedStream] {
        let offer = try SessionDescription.parse(sdp)
        let media = self.media
        let (local, isNew) = try await connection(.recv)
        recvVersion += 1
        let (answer, streams) = ClientSdp.answer(to: offer, local: local, sessionId: sessionId &+ 1, version: recvVersion)
        if isNew {
            let remote = try ClientSdp.remoteTransport(of: offer)
            try await worker.perform { _ in media.value.recv?.setRemote(remote, dtlsRole: .client) }
        }
        // Our SCTP association exists before the server's INIT can come.
        try await enableReceivedData(streams)
        try await channel.call("answer", ["memberId": .string(id), "answer": ["type": "answer", "sdp": .string(answer)]])
        return streams
    }

    // MARK: ICE restart

    /// Restarts ICE on one connection (after a network change, or when its path died): both
    /// sides get new ICE credentials, media goes on over the old path until the new one is up,
    /// and every publication and subscription stays as it is. `send`: a new offer with the new
    /// credentials through `negotiate`; `recv`: the server's `restartIce` offer, answered with
    /// them. Returns when the server has answered (or accepted the answer); the new pair
    /// follows within the connectivity checks' round trips (`iceRestarts(_:)` counts them).
    public func restartIce(_ direction: ConnectionSide) async throws {
        let media = self.media
        let connected = try await worker.perform { _ in (direction == .send ? media.value.send : media.value.recv) != nil }
        guard connected else { throw ClientError.badResponse("no \(direction.rawValue) connection to restart") }
        switch direction {
        case .send:
            var local = try await worker.perform { _ -> LocalTransportParameters? in media.value.send?.restartIce() }
            if local != nil, !relays.isEmpty { local = try await gatheredLocal(.send) }
            guard let local else { return }
            sendVersion += 1
            let offer = ClientSdp.offer(local: local, tracks: tracks, sessionId: sessionId, version: sendVersion)
            let result = try await channel.call("negotiate", ["memberId": .string(id), "offer": ["type": "offer", "sdp": .string(offer)]])
            guard let sdp = result["answer"]?["sdp"]?.string else { throw ClientError.badResponse("negotiate returned no answer") }
            let remote = try ClientSdp.remoteTransport(of: try SessionDescription.parse(sdp))
            try await worker.perform { _ in media.value.send?.setRestartedRemote(remote) }
        case .recv:
            let result = try await channel.call("restartIce", ["memberId": .string(id), "direction": "recv"])
            guard let sdp = result["offer"]?["sdp"]?.string else { throw ClientError.badResponse("restartIce returned no offer") }
            let offer = try SessionDescription.parse(sdp)
            let remote = try ClientSdp.remoteTransport(of: offer)
            var local = try await worker.perform { _ -> LocalTransportParameters? in
                guard let c = media.value.recv else { return nil }
                let local = c.restartIce()
                c.setRestartedRemote(remote)
                return local
            }
            if local != nil, !relays.isEmpty { local = try await gatheredLocal(.recv) }
            guard let local else { return }
            recvVersion += 1
            let (answer, _) = ClientSdp.answer(to: offer, local: local, sessionId: sessionId &+ 1, version: recvVersion)
            try await channel.call("answer", ["memberId": .string(id), "answer": ["type": "answer", "sdp": .string(answer)]])
        }
    }

    /// ICE restarts of a connection that have completed (a new pair after `restartIce`).
    public func iceRestarts(_ direction: ConnectionSide) async throws -> Int {
        let media = self.media
        return try await worker.perform { _ in (direction == .send ? media.value.send : media.value.recv)?.iceRestarts ?? 0 }
    }

    /// Waits (up to 15 s) until a connection's DTLS is up.
    func waitConnected(send: Bool) async throws {
        let media = self.media
        for _ in 0..<1500 {
            let state = try await worker.perform { _ in (send ? media.value.send : media.value.recv)?.state }
            switch state {
            case .connected: return
            case .failed(let reason): throw ClientError.transport(reason)
            case .closed: throw ClientError.transport("the connection closed")
            default: try await Task.sleep(for: .milliseconds(10))
            }
        }
        throw ClientError.timeout("the \(send ? "send" : "receive") connection did not connect in 15 s")
    }

    /// Asks the server for a fresh TURN credential (`getIceServers`) and keeps it in `iceServers`.
    @discardableResult
    public func renewIceServers() async throws -> [IceServer] {
        let result = try await channel.call("getIceServers", ["memberId": .string(id)])
        iceServers = IceServer.list(result["iceServers"])
        return iceServers
    }

    // MARK: Leaving

    /// Leaves the room: stops every stream, closes both connections and the socket.
    public func leave() async throws {
        guard !left else { return }
        left = true
        defer { shutdown() }
        try await channel.call("leave", ["memberId": .string(id)])
    }

    func shutdown() {
        notificationTask?.cancel()
        supervisorTask?.cancel()
        keepaliveTask?.cancel()
        let media = self.media
        worker.post { core in
            for o in media.value.outbound.values { o.stop(on: core) }
            media.value.outbound.removeAll()
            media.value.send?.close()
            media.value.recv?.close()
            for c in media.value.collectors.values { c.finish() }
            media.value.collectors.removeAll()
            media.value.finishData()
        }
        channel.close()
        eventSink.finish()
        connectionSink.finish()
    }
}
