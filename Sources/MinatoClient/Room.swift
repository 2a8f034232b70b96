public import MinatoTransport
public import Logging
public import MinatoWire
internal import Synchronization

/// Holds a value that is only touched on one client worker's thread; the box may cross tasks.
struct WorkerBound<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// The client's process-level state (SkyWay's `Context`): the server URL and token, the DTLS
/// identity, and the media worker thread every connection of this context runs on.
public final class Context: Sendable {
    public struct Options: Sendable {
        /// The server's WebSocket endpoint, e.g. "ws://127.0.0.1:7880/ws".
        public var url: String
        /// A JWT (docs/protocol.md "Auth"), sent as `?token=`; nil when the server runs without auth.
        public var token: String?
        /// SRTP profiles to offer in DTLS (OpenSSL names, colon separated); nil offers all.
        public var srtpProfiles: String?
        public var logger: Logger
        public init(url: String = "ws://127.0.0.1:7880/ws", token: String? = nil, srtpProfiles: String? = nil,
                    logger: Logger = Logger(label: "minato.client")) {
            self.url = url; self.token = token; self.srtpProfiles = srtpProfiles; self.logger = logger
        }
    }

    public let options: Options
    let runtime: CryptoRuntime
    let worker: ClientWorker
    let channel: RpcChannel

    private init(options: Options, runtime: CryptoRuntime, worker: ClientWorker, channel: RpcChannel) {
        self.options = options; self.runtime = runtime; self.worker = worker; self.channel = channel
    }

    /// Connects to the server (one WebSocket for room lookups; each joined member has its own).
    public static func setup(_ options: Options = Options()) async throws -> Context {
        let runtime = try CryptoRuntime()
        let worker = ClientWorker(runtime: runtime)
        do {
            let channel = try await openChannel(options)
            return Context(options: options, runtime: runtime, worker: worker, channel: channel)
        } catch {
            worker.shutdown()
            throw error
        }
    }

    static func openChannel(_ options: Options) async throws -> RpcChannel {
        var url = options.url
        if let token = options.token { url += (url.contains("?") ? "&" : "?") + "token=" + token }
        return try await RpcChannel.connect(url: url, logger: options.logger)
    }

    /// Runs `body` on the media worker thread, where sources, sinks and connections live.
    public func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await worker.perform { _ in try body() }
    }

    /// Closes the lookup socket and stops the media thread (members should `leave` first).
    public func dispose() {
        channel.close()
        worker.shutdown()
    }
}

/// A room on an SFU (SkyWay's `SFURoom`): find or create one, then `join` it.
public final class SFURoom: Sendable {
    public let id: String
    public let name: String?
    public let context: Context
    /// Every room event seen by a member joined through this object, in version order.
    public let events: AsyncStream<RoomEvent>
    private let eventSink: AsyncStream<RoomEvent>.Continuation
    private let lastVersion = Mutex(0)

    init(snapshot: RoomSnapshot, context: Context) {
        id = snapshot.id
        name = snapshot.name
        self.context = context
        (events, eventSink) = AsyncStream<RoomEvent>.makeStream()
        lastVersion.withLock { $0 = snapshot.version ?? 0 }
    }

    private static func room(_ result: JSON, _ context: Context) throws -> SFURoom {
        guard let room = result["room"] else { throw ClientError.badResponse("no room in the result") }
        return SFURoom(snapshot: try room.decode(RoomSnapshot.self), context: context)
    }

    private static func body(name: String?, metadata: String?, password: String?) -> JSON {
        var p: [String: JSON] = [:]
        if let name { p["name"] = .string(name) }
        if let metadata { p["metadata"] = .string(metadata) }
        if let password { p["password"] = .string(password) }
        return .object(p)
    }

    public static func create(_ context: Context, name: String? = nil, metadata: String? = nil,
                              password: String? = nil) async throws -> SFURoom {
        try room(await context.channel.call("createRoom", body(name: name, metadata: metadata, password: password)), context)
    }

    public static func find(_ context: Context, id: String) async throws -> SFURoom {
        try room(await context.channel.call("findRoom", ["id": .string(id)]), context)
    }

    public static func find(_ context: Context, name: String) async throws -> SFURoom {
        try room(await context.channel.call("findRoom", ["name": .string(name)]), context)
    }

    public static func findOrCreate(_ context: Context, name: String, metadata: String? = nil,
                                    password: String? = nil) async throws -> SFURoom {
        try room(await context.channel.call("findOrCreateRoom", body(name: name, metadata: metadata, password: password)), context)
    }

    /// The room's current state.
    public func snapshot() async throws -> RoomSnapshot {
        guard let room = try await context.channel.call("getRoom", ["roomId": .string(id)])["room"] else {
            throw ClientError.badResponse("no room in the result")
        }
        return try room.decode(RoomSnapshot.self)
    }

    /// Closes the room for everyone (members are removed with reason `roomClosed`).
    public func close() async throws {
        try await context.channel.call("closeRoom", ["roomId": .string(id)])
    }

    /// Joins as a new member on its own WebSocket.
    public func join(name: String? = nil, metadata: String? = nil, password: String? = nil,
                     keepaliveIntervalSec: Int = 30, replace: Bool = false) async throws -> LocalSFURoomMember {
        let channel = try await Context.openChannel(context.options)
        var p: [String: JSON] = ["roomId": .string(id), "keepaliveIntervalSec": .number(Double(keepaliveIntervalSec))]
        if let name { p["name"] = .string(name) }
        if let metadata { p["metadata"] = .string(metadata) }
        if let password { p["password"] = .string(password) }
        if replace { p["replace"] = true }
        do {
            let result = try await channel.call("join", .object(p))
            guard let m = result["member"] else { throw ClientError.badResponse("no member in the join result") }
            let member = LocalSFURoomMember(member: try m.decode(Member.self), room: self, channel: channel,
                                            keepaliveIntervalSec: keepaliveIntervalSec,
                                            reconnectSecret: result["reconnectSecret"]?.string)
            member.start()
            return member
        } catch {
            channel.close()
            throw error
        }
    }

    func deliver(_ event: RoomEvent) {
        let fresh = lastVersion.withLock { v -> Bool in
            guard event.version > v else { return false }
            v = event.version
            return true
        }
        if fresh { eventSink.yield(event) }
    }
}

/// Options of a publication (docs/protocol.md `publish`).
public struct PublicationOptions: Sendable {
    public var metadata: String?
    public var isEnabled: Bool
    public var maxSubscribers: Int?
    public init(metadata: String? = nil, isEnabled: Bool = true, maxSubscribers: Int? = nil) {
        self.metadata = metadata; self.isEnabled = isEnabled; self.maxSubscribers = maxSubscribers
    }
}

/// What `publish` returns: the server's publication and the local stream's identifiers.
public struct RoomPublication: Sendable {
    public let publication: Publication
    public var id: String { publication.id }
    public var contentType: ContentType { publication.contentType }
    public let mid: String
    public let ssrc: UInt32
}

/// What `subscribe` returns: the subscription and the stream's SSRC on the receive connection.
public struct RoomSubscription: Sendable {
    public let subscription: Subscription
    public var id: String { subscription.id }
    public var publicationId: String { subscription.publicationId }
    public var contentType: ContentType { subscription.contentType }
    public let mid: String
    /// The SSRC the server sends this stream with (from its offer), if it announced one.
    public let ssrc: UInt32?
    /// The codec the server will send.
    public let codec: RtpMap?
}

/// Controls an `OutboundStream<S>` without knowing `S` (worker-confined).
protocol OutboundControl: AnyObject {
    var enabled: Bool { get set }
    var ssrc: UInt32 { get }
    func stop(on core: ClientWorkerCore)
    func feedback(_ rtcp: UnsafeRawBufferPointer)
}
extension OutboundStream: OutboundControl {}

/// The worker-confined half of a member's media: its send and receive connections.
final class MemberMedia {
    var send: ClientConnection?
    var sendDemux = InboundDemux()
    var outbound: [String: any OutboundControl] = [:]   // by mid
    var recv: ClientConnection?
    var recvDemux = InboundDemux()
    var collectors: [UInt32: PacketCollector] = [:]
}

/// The member this client joined as (SkyWay's `LocalSFURoomMember`): publishes sources,
/// subscribes to publications, leaves. Every method is async; the media runs on the context's
/// worker thread.
public actor LocalSFURoomMember {
    public nonisolated let member: Member
    public nonisolated var id: String { member.id }
    public nonisolated let room: SFURoom
    /// Room events this member receives, in version order; ends when the member leaves.
    public nonisolated let events: AsyncStream<RoomEvent>
    private nonisolated let eventSink: AsyncStream<RoomEvent>.Continuation
    private nonisolated let channel: RpcChannel
    private nonisolated let keepaliveIntervalSec: Int
    /// The join result's `reconnectSecret` (PROTOCOL "keepalive"): sent with every keepalive; the
    /// server lets another connection take this member over only with it. Never logged or exposed.
    private nonisolated let reconnectSecret: String?
    private let media = WorkerBound(MemberMedia())
    private var tracks: [OfferedTrack] = []
    private var publicationMids: [String: String] = [:]   // publication id -> mid
    private var subscriptionSsrcs: [String: UInt32] = [:]
    private var sendVersion = 0
    private var recvVersion = 0
    private let sessionId = UInt64.random(in: 1...UInt64(Int64.max))
    private let cname = "minato-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
    private var tasks: [Task<Void, Never>] = []
    private var left = false

    init(member: Member, room: SFURoom, channel: RpcChannel, keepaliveIntervalSec: Int, reconnectSecret: String?) {
        self.member = member
        self.room = room
        self.channel = channel
        self.keepaliveIntervalSec = keepaliveIntervalSec
        self.reconnectSecret = reconnectSecret
        (events, eventSink) = AsyncStream<RoomEvent>.makeStream()
    }

    nonisolated func start() {
        Task { await self.startTasks() }
    }

    private func startTasks() {
        let channel = self.channel, id = member.id, sink = eventSink, room = self.room
        tasks.append(Task { [weak self] in
            for await n in channel.notifications {
                switch n.method {
                case "roomEvent":
                    if let e = RoomEvent(n.params) { sink.yield(e); room.deliver(e) }
                case "offer":
                    if let sdp = n.params["offer"]?["sdp"]?.string { try? await self?.applyServerOffer(sdp) }
                default: break
                }
            }
            sink.finish()
        })
        let period = max(1, keepaliveIntervalSec / 3)
        var keepalive: [String: JSON] = ["memberId": .string(id)]
        if let reconnectSecret { keepalive["reconnectSecret"] = .string(reconnectSecret) }
        let keepaliveParams = JSON.object(keepalive)
        tasks.append(Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(period))
                if Task.isCancelled { break }
                _ = try? await channel.call("keepalive", keepaliveParams)
            }
        })
    }

    private var worker: ClientWorker { room.context.worker }

    // MARK: Publishing

    /// Publishes `source`: adds a sending m-line to the send connection, negotiates it with the
    /// server, and starts pulling packets from the source on the worker thread.
    public func publish<S: RtpSource & Sendable>(_ source: S, options: PublicationOptions = PublicationOptions()) async throws -> RoomPublication {
        let media = self.media
        let profiles = room.context.options.srtpProfiles
        let local = try await worker.perform { core -> LocalTransportParameters in
            if let c = media.value.send { return c.local }
            let c = try core.makeConnection(srtpProfiles: profiles)
            media.value.send = c
            media.value.sendDemux.attach(to: c)
            media.value.sendDemux.onRtcp = { rtcp in for o in media.value.outbound.values { o.feedback(rtcp) } }
            return c.local
        }
        let mid = String(tracks.count)
        let track = OfferedTrack(mid: mid, codec: source.codec, ssrc: UInt32.random(in: 1...UInt32.max), cname: cname)
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
        if let ssrc = subscriptionSsrcs.removeValue(forKey: subscriptionId) {
            let media = self.media
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
        let profiles = room.context.options.srtpProfiles
        let (local, isNew) = try await worker.perform { core -> (LocalTransportParameters, Bool) in
            if let c = media.value.recv { return (c.local, false) }
            let c = try core.makeConnection(srtpProfiles: profiles)
            media.value.recv = c
            media.value.recvDemux.attach(to: c)
            return (c.local, true)
        }
        recvVersion += 1
        let (answer, streams) = ClientSdp.answer(to: offer, local: local, sessionId: sessionId &+ 1, version: recvVersion)
        if isNew {
            let remote = try ClientSdp.remoteTransport(of: offer)
            try await worker.perform { _ in media.value.recv?.setRemote(remote, dtlsRole: .client) }
        }
        try await channel.call("answer", ["memberId": .string(id), "answer": ["type": "answer", "sdp": .string(answer)]])
        return streams
    }

    /// Waits (up to 15 s) until a connection's DTLS is up.
    private func waitConnected(send: Bool) async throws {
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

    // MARK: Leaving

    /// Leaves the room: stops every stream, closes both connections and the socket.
    public func leave() async throws {
        guard !left else { return }
        left = true
        defer { shutdown() }
        try await channel.call("leave", ["memberId": .string(id)])
    }

    private func shutdown() {
        for t in tasks { t.cancel() }
        let media = self.media
        worker.post { core in
            for o in media.value.outbound.values { o.stop(on: core) }
            media.value.outbound.removeAll()
            media.value.send?.close()
            media.value.recv?.close()
            for c in media.value.collectors.values { c.finish() }
            media.value.collectors.removeAll()
        }
        channel.close()
        eventSink.finish()
    }
}
