internal import Foundation

/// `getIceServers`: a member renews the TURN credentials its join returned before they expire.
extension RoomService {
    /// The ICE servers of member `memberId`, which must be joined on this connection, with a
    /// TURN credential minted now (docs/protocol.md "ICE servers").
    public func iceServers(memberId: String, from channel: ClientChannel) throws -> [IceServer] {
        let (_, member) = try joinedMember(memberId, channel: channel)
        return configuration.iceServers.servers(for: member.id, now: Date())
    }
}
