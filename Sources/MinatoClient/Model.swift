/// A room member as the server describes it (docs/protocol.md "Objects").
public struct Member: Sendable, Codable, Equatable {
    public let id: String
    public let name: String?
    public let metadata: String?
    public let type: String?
}

/// A publication as the server describes it.
public struct Publication: Sendable, Codable, Equatable {
    public let id: String
    public let publisherId: String
    public let contentType: ContentType
    public let metadata: String?
    public let state: String?
}

/// A subscription as the server describes it.
public struct Subscription: Sendable, Codable, Equatable {
    public let id: String
    public let publicationId: String
    public let subscriberId: String
    public let contentType: ContentType
    public let preferredEncodingId: String?
}

/// A room's state as the server describes it.
public struct RoomSnapshot: Sendable, Codable, Equatable {
    public let id: String
    public let name: String?
    public let metadata: String?
    public let version: Int?
    public let members: [Member]?
    public let publications: [Publication]?
    public let subscriptions: [Subscription]?
    /// Recordings running when the snapshot was taken (absent: none).
    public let recordings: [Recording]?
}

/// A recording running in a room (docs/protocol.md "Recording"): `Room.recordings` of a
/// snapshot, and the `recording` of the `recordingStarted` and `recordingStopped` events.
public struct Recording: Codable, Sendable, Equatable {
    public let id: String
    public let memberId: String
    public let publicationIds: [String]
    public let startedAt: String
    public init(id: String, memberId: String, publicationIds: [String], startedAt: String) {
        self.id = id; self.memberId = memberId; self.publicationIds = publicationIds; self.startedAt = startedAt
    }
}

/// One room event (notification `roomEvent`), in `version` order. `type` is SkyWay's event
/// name: memberJoined, memberLeft, streamPublished, streamUnpublished, publicationSubscribed, …
public struct RoomEvent: Sendable, Equatable {
    public let roomId: String
    public let version: Int
    public let type: String
    public let data: JSON
    public let reason: String?

    public var member: Member? { try? data["member"]?.decode(Member.self) }
    public var publication: Publication? { try? data["publication"]?.decode(Publication.self) }
    public var subscription: Subscription? { try? data["subscription"]?.decode(Subscription.self) }
    /// `recordingStarted` / `recordingStopped` (an admin records a member; `reason` says why it
    /// stopped): which recording, of whom.
    public var recording: Recording? { try? data["recording"]?.decode(Recording.self) }

    init?(_ params: JSON) {
        guard let roomId = params["roomId"]?.string, let version = params["version"]?.int,
              let type = params["type"]?.string else { return nil }
        self.roomId = roomId
        self.version = version
        self.type = type
        self.data = params["data"] ?? [:]
        self.reason = params["reason"]?.string
    }
}
