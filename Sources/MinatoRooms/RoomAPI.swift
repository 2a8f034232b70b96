/// The room core's typed API: one request type per method of docs/protocol.md, with the
/// values already of the right types (front doors such as the JSON-RPC one in `MinatoSignaling`
/// turn their wire format into these). Ranges, names and limits are checked by the core, so
/// every front door gets the same errors.

/// What a request needs from the caller's token (checked only when auth is on).
public enum Permission: Sendable, Equatable {
    /// Any connection may call it (listing rooms filters by token inside).
    case none
    /// Binding a token to the connection.
    case authenticate
    /// A room method: the token needs a rule for the room, and `action` (create, close,
    /// updateMetadata) among its methods when given. Checked inside the method (the room is
    /// found by id or name there).
    case room
    /// Acting as a member: the token's member rule must match the member's name and allow
    /// `action` (publish, subscribe, updateMetadata); nil = only matching the name.
    case member(String?)
}

/// The member a member-scoped request acts as, named by one of its ids.
public enum MemberTarget: Sendable, Equatable {
    case member(String)
    case publication(String)
    case subscription(String)
}

public struct CreateRoomRequest: Sendable {
    public var name: String?, metadata: String?, password: String?
    public init(name: String? = nil, metadata: String? = nil, password: String? = nil) {
        self.name = name; self.metadata = metadata; self.password = password
    }
}

public struct FindRoomRequest: Sendable {
    public var id: String?, name: String?
    public init(id: String? = nil, name: String? = nil) { self.id = id; self.name = name }
}

public struct RoomEventsRequest: Sendable {
    public var roomId: String, offset: Int, limit: Int?
    public init(roomId: String, offset: Int = 0, limit: Int? = nil) { self.roomId = roomId; self.offset = offset; self.limit = limit }
}

public struct JoinRequest: Sendable {
    public var roomId: String, name: String?, metadata: String?, password: String?
    public var keepaliveIntervalSec: Int?, keepaliveIntervalGapSec: Int?, replace: Bool, type: String?
    public init(roomId: String, name: String? = nil, metadata: String? = nil, password: String? = nil,
                keepaliveIntervalSec: Int? = nil, keepaliveIntervalGapSec: Int? = nil, replace: Bool = false, type: String? = nil) {
        self.roomId = roomId; self.name = name; self.metadata = metadata; self.password = password
        self.keepaliveIntervalSec = keepaliveIntervalSec; self.keepaliveIntervalGapSec = keepaliveIntervalGapSec
        self.replace = replace; self.type = type
    }
}

/// SkyWay's `encodings` entry of a publication.
public struct Encoding: Sendable, Equatable {
    public var id: String, maxBitrate: Int?, scaleResolutionDownBy: Double?, maxFramerate: Double?
    public init(id: String, maxBitrate: Int? = nil, scaleResolutionDownBy: Double? = nil, maxFramerate: Double? = nil) {
        self.id = id; self.maxBitrate = maxBitrate; self.scaleResolutionDownBy = scaleResolutionDownBy; self.maxFramerate = maxFramerate
    }
    var json: JSONValue {
        var o: [String: JSONValue] = ["id": .string(id)]
        if let maxBitrate { o["maxBitrate"] = .int(maxBitrate) }
        if let scaleResolutionDownBy { o["scaleResolutionDownBy"] = .double(scaleResolutionDownBy) }
        if let maxFramerate { o["maxFramerate"] = .double(maxFramerate) }
        return .object(o)
    }
}

public struct PublishRequest: Sendable {
    public var memberId: String, contentType: String, mid: String, offer: String
    public var metadata: String?, isEnabled: Bool, maxSubscribers: Int?, encodings: [Encoding]
    /// `contentType` "data": the publisher's data channel (`dataChannel` in docs/protocol.md).
    public var dataChannel: DataChannelOptions?
    public init(memberId: String, contentType: String, mid: String, offer: String, metadata: String? = nil,
                isEnabled: Bool = true, maxSubscribers: Int? = nil, encodings: [Encoding] = [],
                dataChannel: DataChannelOptions? = nil) {
        self.memberId = memberId; self.contentType = contentType; self.mid = mid; self.offer = offer
        self.metadata = metadata; self.isEnabled = isEnabled; self.maxSubscribers = maxSubscribers; self.encodings = encodings
        self.dataChannel = dataChannel
    }
}

/// A data publication's channel: the label of the publisher's RTCDataChannel that carries it,
/// and the reliability subscribers' channels get (ordered by default; `maxRetransmits` 0 = lossy).
public struct DataChannelOptions: Sendable {
    public var label: String, ordered: Bool?, maxRetransmits: Int?
    public init(label: String, ordered: Bool? = nil, maxRetransmits: Int? = nil) {
        self.label = label; self.ordered = ordered; self.maxRetransmits = maxRetransmits
    }
}

public struct SubscribeRequest: Sendable {
    public var memberId: String, publicationId: String, preferredEncodingId: String?
    /// The MIME types (`video/VP8`, `audio/opus`, …) the subscriber can decode, when it says:
    /// a publication in any other codec is refused with `codecNotSupported` before anything is
    /// offered. Nil: the subscriber did not say (its answer is checked instead).
    public var codecCapabilities: [String]?
    /// Audio: forwarded even when not among the room's loudest (`rooms.audio.forwardLoudest`).
    public var pinned: Bool
    public init(memberId: String, publicationId: String, preferredEncodingId: String? = nil, codecCapabilities: [String]? = nil,
                pinned: Bool = false) {
        self.memberId = memberId; self.publicationId = publicationId; self.preferredEncodingId = preferredEncodingId
        self.codecCapabilities = codecCapabilities
        self.pinned = pinned
    }
}

/// Which of a member's two connections: `send` (the client offers) or `recv` (the server offers).
public enum ConnectionDirection: String, Sendable { case send, recv }

// MARK: Results

/// A session description the core made (`type` is "offer" or "answer").
public struct SessionDescriptionText: Sendable, Equatable {
    public let type: String, sdp: String
    public var json: JSONValue { ["type": .string(type), "sdp": .string(sdp)] }
}

public struct JoinResult: Sendable {
    public let member: JSONValue, room: JSONValue
    /// Proves ownership of the member: needed to take it over from another connection.
    public let reconnectSecret: String
    /// The member's ICE servers (TURN with its own credential, static STUN); empty when none
    /// are configured.
    public var iceServers: [IceServer] = []
}

public struct PublishResult: Sendable {
    public let publication: JSONValue
    public let answer: SessionDescriptionText
}

public struct SubscribeResult: Sendable {
    public let subscription: JSONValue
    public let mid: String
    public let offer: SessionDescriptionText
}

public struct RoomEventsPage: Sendable {
    public let events: [JSONValue]
    /// The offset to ask for next while more events remain, else nil.
    public let nextOffset: Int?
}

public struct AuthenticateResult: Sendable {
    /// ISO 8601 expiry of the bound token; nil when auth is off.
    public let expiresAt: String?
}
