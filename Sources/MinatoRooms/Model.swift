internal import MinatoMedia
internal import MinatoTransport

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
    /// Seconds before a token's `exp` at which its connection gets `tokenExpiring`.
    public var tokenExpiringNoticeSec = 30
    public init() {}
}

/// Where a client's messages go: one WebSocket connection. `close` ends it with a WebSocket
/// close code and reason (after the messages already sent).
public struct ClientChannel: Sendable {
    public let id: UInt64
    public let send: @Sendable (String) -> Void
    public let close: @Sendable (UInt16, String) -> Void
    public init(id: UInt64, send: @escaping @Sendable (String) -> Void,
                close: @escaping @Sendable (UInt16, String) -> Void = { _, _ in }) {
        self.id = id; self.send = send; self.close = close
    }
}

/// A room (SkyWay `Room`, type sfu). Owned by `RoomService`; its media lives on one worker.
final class Room {
    let id: String
    let name: String?
    var metadata: String
    let password: PasswordHash?
    var version = 0
    var events: [JSONValue] = []
    var members: [LocalSFURoomMember] = []
    var publications: [RoomPublication] = []
    var subscriptions: [RoomSubscription] = []
    let worker: Int
    let router: RouterId
    /// Connections that asked for events with subscribeRoomEvents.
    var listeners: [UInt64: ClientChannel] = [:]

    init(id: String, name: String?, metadata: String, password: PasswordHash?, worker: Int, router: RouterId) {
        self.id = id; self.name = name; self.metadata = metadata; self.password = password
        self.worker = worker; self.router = router
    }

    func member(_ id: String) -> LocalSFURoomMember? { members.first { $0.id == id } }
    func publication(_ id: String) -> RoomPublication? { publications.first { $0.id == id } }
    func subscription(_ id: String) -> RoomSubscription? { subscriptions.first { $0.id == id } }

    var summaryJSON: JSONValue {
        ["id": .string(id), "name": name.json, "metadata": .string(metadata),
         "hasPassword": .bool(password != nil), "memberCount": .int(members.count)]
    }
    var json: JSONValue {
        ["id": .string(id), "name": name.json, "metadata": .string(metadata), "hasPassword": .bool(password != nil),
         "version": .int(version), "members": .array(members.map(\.json)),
         "publications": .array(publications.map(\.json)), "subscriptions": .array(subscriptions.map(\.json))]
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

    var sendTransport: TransportDescription?
    var recvTransport: TransportDescription?
    var creatingSend = false
    var creatingRecv = false
    var sendRemoteApplied = false
    var recvRemoteApplied = false
    /// Candidates trickled before the transport existed.
    var pendingCandidates: [String: [String?]] = ["send": [], "recv": []]

    var recvSlots: [ReceiveSlot] = []
    var nextMid = 0
    var recvOfferPending = false
    var recvNeedsOffer = false
    var recvVersion = 0
    var sendVersion = 0
    let sessionId = UInt64.random(in: 1...UInt64(Int64.max))
    var removed = false

    init(id: String, name: String?, metadata: String, type: String, roomId: String, channel: ClientChannel,
         keepaliveIntervalSec: Int, keepaliveIntervalGapSec: Int, now: ContinuousClock.Instant) {
        self.id = id; self.name = name; self.metadata = metadata; self.type = type; self.roomId = roomId
        self.channel = channel; self.lastSeen = now
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
    let stream: PublishedStream
    let maxSubscribers: Int
    let encodings: [JSONValue]
    var producer: ProducerId?

    init(id: String, publisherId: String, contentType: String, metadata: String, enabled: Bool,
         stream: PublishedStream, maxSubscribers: Int, encodings: [JSONValue]) {
        self.id = id; self.publisherId = publisherId; self.contentType = contentType; self.metadata = metadata
        self.enabled = enabled; self.stream = stream; self.maxSubscribers = maxSubscribers; self.encodings = encodings
    }

    var json: JSONValue {
        ["id": .string(id), "publisherId": .string(publisherId), "contentType": .string(contentType),
         "metadata": .string(metadata), "state": .string(enabled ? "enabled" : "disabled"),
         "codecCapabilities": [["mimeType": .string(stream.codec.mimeType)]],
         "encodings": .array(encodings), "maxSubscribers": .int(maxSubscribers)]
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
    var consumer: ConsumerId?

    init(id: String, publicationId: String, subscriberId: String, contentType: String, mid: String, ssrc: UInt32,
         preferredEncodingId: String?) {
        self.id = id; self.publicationId = publicationId; self.subscriberId = subscriberId
        self.contentType = contentType; self.mid = mid; self.ssrc = ssrc; self.preferredEncodingId = preferredEncodingId
    }

    var json: JSONValue {
        var o: [String: JSONValue] = ["id": .string(id), "publicationId": .string(publicationId),
                                      "subscriberId": .string(subscriberId), "contentType": .string(contentType)]
        if let p = preferredEncodingId { o["preferredEncodingId"] = .string(p) }
        return .object(o)
    }
}
