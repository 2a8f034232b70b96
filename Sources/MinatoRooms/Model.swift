internal import MinatoMedia
public import MinatoTransport

/// Limits and defaults of the room model (config `rooms.*`).
public struct RoomConfiguration: Sendable {
    public var maxMembersPerRoom = 100
    public var maxPublicationsPerMember = 8
    public var maxSubscriptionsPerMember = 128
    public var defaultMaxSubscribers = 50
    public var maxSubscribersCap = 99
    public var defaultKeepaliveIntervalSec = 30
    public var defaultKeepaliveIntervalGapSec = 30
    public var maxEventLog = 10_000
    /// Bytes of serialized events kept per room for replay (the oldest go first).
    public var maxEventLogBytes = 1 << 20
    /// Seconds before a token's `exp` at which its connection gets `tokenExpiring`.
    public var tokenExpiringNoticeSec = 30
    /// Server-wide and per-connection bounds on what a client can make the server hold
    /// (config `rooms.*` and `media.*`; docs/protocol.md "Limits").
    public var maxRooms = 1000
    public var maxRoomsCreatedPerConnection = 10
    public var maxMembers = 5000
    public var maxMembersPerConnection = 8
    public var maxTransports = 2000
    public var maxRemoteCandidates = 64
    public var maxPendingCandidateBytes = 16 * 1024
    /// A client's SDP (publish, negotiate, answer, WHIP/WHEP bodies): its size in bytes
    /// (`server.maxSdpBytes`), checked before it is parsed; its m= sections
    /// (`media.sdp.maxMediaSections`; a subscriber's answer may have as many as the server's
    /// offer, `maxAnswerMediaSections`) and payload types per m-section
    /// (`media.sdp.maxCodecsPerSection`), checked while it is parsed (`SdpNegotiation.parse`).
    public var maxSdpBytes = 64 * 1024
    public var maxSdpMediaSections = 64
    public var maxSdpCodecsPerSection = 64
    public var maxEncodings = 4
    public var maxEventsPerPage = 100
    public var maxKeepaliveIntervalSec = 300
    public var maxKeepaliveIntervalGapSec = 120
    /// Seconds a room may stay without a member before it is closed (`rooms.emptyTimeoutSec`;
    /// 0 = never); rooms an admin created with `keepWhenEmpty` stay.
    public var emptyTimeoutSec = 300
    /// WHIP and WHEP sessions on the whole server (`whip.maxSessions`), and new ones one client
    /// address may start per second (`whip.maxNewSessionsPerSecPerAddress`).
    public var maxMediaSessions = 500
    public var maxNewMediaSessionsPerSecPerAddress = 10
    /// Put before every id this server makes (a cluster node's id and a dot); empty on a single node.
    public var idPrefix = ""
    /// The ICE servers handed to clients: TURN with per-member credentials (`media.turn.*`) and
    /// `media.clientIceServers` (IceServers.swift).
    public var iceServers = IceServerConfiguration()
    /// Data channels (`rooms.data.*`): message size, per-transport buffer, per-member rate.
    public var data = DataLimits()
    /// Plain RTP egress (`media.plain.*`): the only addresses it may send to, and how many may exist.
    public var plainAllowedAddresses = ["127.0.0.1", "::1"]
    public var plainMaxTransports = 32
    /// Recordings (`recording.*`, Recording.swift).
    public var recording = RecordingConfiguration()
    /// Longest `iceCandidate` line accepted, in bytes.
    public static let maxCandidateLineBytes = 1024
    /// Longest room password accepted, in bytes.
    public static let maxPasswordBytes = 256
    public init() {}
}

/// A room opened or closed on this server (`RoomService.setRoomObserver`).
public enum RoomLifecycle: Sendable, Equatable {
    case opened(id: String, name: String?)
    case closed(id: String, name: String?)
}

/// Where a client's messages go: one WebSocket connection. `close` ends it with a WebSocket
/// close code and reason (after the messages already sent).
public struct ClientChannel: Sendable {
    public let id: UInt64
    public let send: @Sendable (String) -> Void
    public let close: @Sendable (UInt16, String) -> Void
    /// The cluster node the client is connected to when that is not this one (the channel is
    /// a gateway's, over a node link); nil: the client is connected here.
    public let node: String?
    public init(id: UInt64, send: @escaping @Sendable (String) -> Void,
                close: @escaping @Sendable (UInt16, String) -> Void = { _, _ in }, node: String? = nil) {
        self.id = id; self.send = send; self.close = close; self.node = node
    }
}

/// What one signaling connection has used of its per-connection limits (`RoomService.connections`).
struct ConnectionLedger {
    var roomsCreated = 0
    /// Wrong passwords in a row, and password checks still running (both throttle the next one).
    var passwordFailures = 0
    var passwordChecksRunning = 0
}

/// A room (SkyWay `Room`, type sfu). Owned by `RoomService`; its media lives on one worker.
final class Room {
    let id: String
    let name: String?
    var metadata: String
    let password: PasswordHash?
    var version = 0
    /// The event log for `subscribeRoomEvents` replay, oldest first, bounded by count and bytes.
    var events: [JSONValue] = []
    var eventBytes: [Int] = []
    var eventLogBytes = 0
    var members: [LocalSFURoomMember] = []
    var publications: [RoomPublication] = []
    var subscriptions: [RoomSubscription] = []
    let worker: Int
    let router: RouterId
    /// Relays between the sites serving the room, by their pair (RoomService+Relays).
    var relays: [RelayKey: RoomRelay] = [:]
    /// Publications sent over a relay to another site, by (publication, site).
    var forwards: [ForwardKey: RelayForward] = [:]
    /// The next SSRC a relayed stream gets (two per stream: media and RTX).
    var nextRelaySsrc = UInt32.random(in: 0x1000_0000...0x7000_0000)
    /// The sites that serve a member now (`.home` always counts).
    var sites: Set<MediaSite> { Set(members.map(\.site)).union([.home]) }
    /// Connections that asked for events with subscribeRoomEvents.
    var listeners: [UInt64: ClientChannel] = [:]
    /// Since when the room has had no member (nil: it has one): after `rooms.emptyTimeoutSec`
    /// the sweep closes it, unless `keepWhenEmpty` (an admin's choice at creation).
    var emptySince: ContinuousClock.Instant?
    let keepWhenEmpty: Bool

    init(id: String, name: String?, metadata: String, password: PasswordHash?, worker: Int, router: RouterId,
         keepWhenEmpty: Bool = false, now: ContinuousClock.Instant) {
        self.id = id; self.name = name; self.metadata = metadata; self.password = password
        self.worker = worker; self.router = router
        self.keepWhenEmpty = keepWhenEmpty
        self.emptySince = now
    }

    /// Appends an event, then drops the oldest while the log is over `maxCount` events or `maxBytes`.
    func log(_ event: JSONValue, bytes: Int, maxCount: Int, maxBytes: Int) {
        events.append(event)
        eventBytes.append(bytes)
        eventLogBytes += bytes
        var drop = 0
        while drop < events.count - 1, events.count - drop > maxCount || eventLogBytes > maxBytes {
            eventLogBytes -= eventBytes[drop]
            drop += 1
        }
        if drop > 0 {
            events.removeFirst(drop)
            eventBytes.removeFirst(drop)
        }
    }

    func member(_ id: String) -> LocalSFURoomMember? { members.first { $0.id == id } }
    func publication(_ id: String) -> RoomPublication? { publications.first { $0.id == id } }
    func subscription(_ id: String) -> RoomSubscription? { subscriptions.first { $0.id == id } }

    var summaryJSON: JSONValue {
        ["id": .string(id), "name": name.json, "metadata": .string(metadata),
         "hasPassword": .bool(password != nil), "memberCount": .int(members.count)]
    }
    /// Recordings running in the room (`Recording.summaryJSON`), in start order: in the
    /// snapshot, so a member who joins later sees that it is recorded.
    var recordings: [(id: String, json: JSONValue)] = []

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "name": name.json, "metadata": .string(metadata), "hasPassword": .bool(password != nil),
            "version": .int(version), "members": .array(members.map(\.json)),
            "publications": .array(publications.map(\.json)), "subscriptions": .array(subscriptions.map(\.json))]
        if !recordings.isEmpty { o["recordings"] = .array(recordings.map(\.json)) }
        return .object(o)
    }

    /// When an empty room is due to close (`rooms.emptyTimeoutSec`, 0 = never), or nil.
    func closesWhenEmpty(after timeoutSec: Int) -> ContinuousClock.Instant? {
        guard timeoutSec > 0, !keepWhenEmpty, let since = emptySince else { return nil }
        return since + .seconds(timeoutSec)
    }
}

/// A member whose media terminates on this node (SkyWay `LocalSFURoomMember`): its identity,
/// keepalive state, and its two WebRTC connections (send: client offers; recv: server offers).
final class LocalSFURoomMember {
    let id: String
    let name: String?
    var metadata: String
    let type: String
    let roomId: String
    var channel: ClientChannel?
    var disconnectedAt: ContinuousClock.Instant?
    var lastSeen: ContinuousClock.Instant
    var keepaliveIntervalSec: Int
    var keepaliveIntervalGapSec: Int

    /// Proves ownership: only the joiner gets it (in the join result); taking the member over
    /// from another connection (`keepalive`) needs it. 256 random bits, hex.
    let reconnectSecret: String

    /// Where its transports, producers and consumers live (`cluster.cascade`: the node its
    /// client connected to; otherwise the room's home).
    var site: MediaSite = .home

    /// The send connection (the client offers): its transport and the client's parameters.
    var send = PeerTransport()
    /// The receive connection (the server offers): its transport and its offer/answer state.
    var recv = PeerTransport()
    var receive = ReceiveNegotiation<ContinuousClock.Instant>()
    /// Requests waiting on either connection, by token: resumed with true to go on, false when
    /// the member is gone.
    var waiters: [WaiterToken: CheckedContinuation<Bool, Never>] = [:]

    /// The receive connection's m-lines and the subscriptions they carry.
    var recvSlots = ReceiveSlots()
    /// Set for a member made by an HTTP media session (WHIP/WHEP, RoomService+MediaSessions):
    /// no keepalive expiry and no server offers.
    var mediaSession: MediaSession?
    /// A bot member whose publications are fed by plain RTP senders (RoomService+PlainIngress):
    /// no signaling connection, so no keepalive expiry; it leaves with its last publication.
    var plainIngress = false
    var recvVersion = 0
    var sendVersion = 0
    let sessionId = UInt64.random(in: 1...UInt64(Int64.max))
    var removed = false

    /// Resumes a waiting request (true: go on; false: the member is gone).
    func resume(_ token: WaiterToken, _ proceed: Bool) {
        waiters.removeValue(forKey: token)?.resume(returning: proceed)
    }
    func failAllWaiters() {
        let waiting = waiters
        waiters = [:]
        for (_, c) in waiting { c.resume(returning: false) }
    }

    init(id: String, name: String?, metadata: String, type: String, roomId: String, channel: ClientChannel,
         keepaliveIntervalSec: Int, keepaliveIntervalGapSec: Int, now: ContinuousClock.Instant) {
        self.id = id; self.name = name; self.metadata = metadata; self.type = type; self.roomId = roomId
        self.channel = channel; self.lastSeen = now
        var rng = SystemRandomNumberGenerator()
        self.reconnectSecret = (0..<4).map { _ in
            let hex = String(rng.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
        self.keepaliveIntervalSec = keepaliveIntervalSec; self.keepaliveIntervalGapSec = keepaliveIntervalGapSec
    }

    var json: JSONValue {
        ["id": .string(id), "name": name.json, "metadata": .string(metadata), "type": .string(type)]
    }
}

/// A published stream (SkyWay `RoomPublication`) and its engine Producer.
final class RoomPublication {
    let id: String
    let publisherId: String
    let contentType: String
    var metadata: String
    var enabled: Bool
    /// The media stream (nil for data).
    let stream: PublishedStream?
    let maxSubscribers: Int
    let encodings: [JSONValue]
    /// Its producer, on `site` (the publisher's).
    var producer: ProducerId?
    var site: MediaSite = .home
    /// Audio with levels published on another site: its stream relayed to the room's node for
    /// the room's speaker detector (`hearSpeaker`), once that is made; `hearing` while it is.
    var speakerForward: ForwardKey?
    var hearing = false
    /// A data publication (`contentType` "data"): its channel's label on the publisher's send
    /// connection and the reliability its subscribers' channels get. Nil for media.
    let data: DataPublication?
    /// Simulcast: the layers' RIDs (encoding ids), lowest first; empty without simulcast.
    var layers: [String] = []

    /// The layer a subscriber preferring encoding `id` is capped at: the highest layer listed
    /// at or before `id` in `encodings` (the lowest when none is); nil without simulcast or
    /// without a preference.
    func layerCap(preferredEncodingId id: String?) -> Int? {
        guard layers.count > 1, let id else { return nil }
        let order = encodings.compactMap { $0["id"]?.stringValue }
        guard let limit = order.firstIndex(of: id) else { return nil }
        let allowed = Set(order[...limit])
        return layers.lastIndex { allowed.contains($0) } ?? 0
    }

    init(id: String, publisherId: String, contentType: String, metadata: String, enabled: Bool,
         stream: PublishedStream?, maxSubscribers: Int, encodings: [JSONValue], data: DataPublication? = nil) {
        self.id = id; self.publisherId = publisherId; self.contentType = contentType; self.metadata = metadata
        self.enabled = enabled; self.stream = stream; self.maxSubscribers = maxSubscribers; self.encodings = encodings
        self.data = data
    }

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "publisherId": .string(publisherId), "contentType": .string(contentType),
            "metadata": .string(metadata), "state": .string(enabled ? "enabled" : "disabled"),
            "codecCapabilities": .array(stream.map { [["mimeType": .string($0.codec.mimeType)]] } ?? []),
            "encodings": .array(encodings), "maxSubscribers": .int(maxSubscribers)]
        if let data { o["dataChannel"] = data.json }
        return .object(o)
    }
}

/// One member's subscription to a publication (SkyWay `RoomSubscription`) and its Consumer.
final class RoomSubscription {
    let id: String
    let publicationId: String
    let subscriberId: String
    let contentType: String
    let mid: String
    let ssrc: UInt32
    var preferredEncodingId: String?
    /// Its consumer, on `site` (the subscriber's), and the relayed stream it consumes when the
    /// publication is on another site (released when the subscription ends).
    var consumer: ConsumerId?
    var site: MediaSite = .home
    var forward: ForwardKey?
    /// How its consumer was made (transport and parameters), to make it again on a new relay.
    var consumerTransport: TransportId?
    var consumerParameters: ConsumerParameters?
    /// Audio forwarded whatever `rooms.audio.forwardLoudest` chooses (`subscribe {pinned: true}`).
    var pinned = false
    /// A data subscription whose channel the worker was told to open (after the answer).
    var dataStarted = false

    init(id: String, publicationId: String, subscriberId: String, contentType: String, mid: String, ssrc: UInt32,
         preferredEncodingId: String?) {
        self.id = id; self.publicationId = publicationId; self.subscriberId = subscriberId
        self.contentType = contentType; self.mid = mid; self.ssrc = ssrc; self.preferredEncodingId = preferredEncodingId
    }

    var json: JSONValue {
        var o: [String: JSONValue] = ["id": .string(id), "publicationId": .string(publicationId),
                                      "subscriberId": .string(subscriberId), "contentType": .string(contentType)]
        if let p = preferredEncodingId { o["preferredEncodingId"] = .string(p) }
        if pinned { o["pinned"] = .bool(true) }
        return .object(o)
    }
}
