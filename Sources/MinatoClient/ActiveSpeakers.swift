internal import Synchronization

/// One entry of `activeSpeakersChanged` (docs/protocol.md "Active speakers"): a member's audio
/// publication and its smoothed level (linear amplitude, 0...1 of full scale).
public struct ActiveSpeaker: Sendable, Equatable {
    public let memberId: String
    public let publicationId: String
    public let level: Double
}

/// The room event `activeSpeakersChanged {speakers:[{memberId, publicationId, level}]}`,
/// loudest first (the first is the dominant speaker). It describes the present: it has no
/// `version` (so it is not a `RoomEvent`), is not kept in the room's event log and is not
/// replayed after a reconnect.
public struct ActiveSpeakersChanged: Sendable, Equatable {
    public let roomId: String
    public let speakers: [ActiveSpeaker]

    /// Nil for any other notification params.
    init?(_ params: JSON) {
        guard params["type"]?.string == "activeSpeakersChanged", params["version"] == nil,
              let roomId = params["roomId"]?.string else { return nil }
        self.roomId = roomId
        speakers = (params["data"]?["speakers"]?.array ?? []).compactMap { s in
            guard let member = s["memberId"]?.string, let publication = s["publicationId"]?.string else { return nil }
            var level = 0.0
            if case .number(let n)? = s["level"] { level = min(1, max(0, n)) }
            return ActiveSpeaker(memberId: member, publicationId: publication, level: level)
        }
    }
}

/// A room's speaker list as its members' sockets report it: the latest list, each member's
/// audio level from it, and a stream of every change. Thread-safe.
public final class ActiveSpeakerBoard: Sendable {
    private let latest = Mutex<[ActiveSpeaker]>([])
    private let continuation: AsyncStream<[ActiveSpeaker]>.Continuation
    /// Every speaker list, loudest first (SkyWay-style `room.onActiveSpeakersChanged`).
    public let changes: AsyncStream<[ActiveSpeaker]>

    init() {
        (changes, continuation) = AsyncStream<[ActiveSpeaker]>.makeStream(bufferingPolicy: .bufferingNewest(16))
    }

    /// The current speakers, loudest first.
    public var speakers: [ActiveSpeaker] { latest.withLock { $0 } }

    /// A member's audio level: its loudest publication among the speakers, 0 when not speaking.
    public func audioLevel(of memberId: String) -> Double {
        latest.withLock { list in list.filter { $0.memberId == memberId }.map(\.level).max() ?? 0 }
    }

    /// Takes a notification's params; true when it was `activeSpeakersChanged` for `roomId`
    /// (then it is handled here and is no `RoomEvent`).
    func deliver(_ params: JSON, roomId: String) -> Bool {
        guard let event = ActiveSpeakersChanged(params) else { return false }
        guard event.roomId == roomId else { return true }
        // Several local members of one room each get the event: only a change goes out.
        let changed = latest.withLock { list -> Bool in
            guard list != event.speakers else { return false }
            list = event.speakers
            return true
        }
        if changed { continuation.yield(event.speakers) }
        return true
    }

    func finish() { continuation.finish() }
}
