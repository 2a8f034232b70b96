public import Foundation

/// One ICE server the server handed this member (docs/protocol.md "ICE servers"), shaped as
/// WebRTC's `RTCIceServer`: with TURN configured (`media.turn.*`), the TURN server's URLs and a
/// credential minted for this member (coturn's REST scheme: `username` is "<unix expiry>:<member
/// id>"); the server's static STUN URLs without one.
///
/// The member's connections allocate a relayed candidate on each TURN URL with its credential
/// (`relays`, docs/sdk-swift.md "TURN"); an application that hands media to another WebRTC
/// stack can pass the list on too.
public struct IceServer: Sendable, Equatable, Codable {
    public let urls: [String]
    public let username: String?
    public let credential: String?

    public init(urls: [String], username: String? = nil, credential: String? = nil) {
        self.urls = urls; self.username = username; self.credential = credential
    }

    /// When the TURN credential stops being accepted (from its username), nil without one.
    public var expiresAt: Date? {
        guard let username, let seconds = username.split(separator: ":").first.flatMap({ Int($0) }) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// The `iceServers` of a join or getIceServers result (empty when there is none; entries
    /// that are not `{urls, username?, credential?}` are skipped).
    static func list(_ json: JSON?) -> [IceServer] {
        guard let array = json?.array else { return [] }
        return array.compactMap { try? $0.decode(IceServer.self) }
    }
}
