/// What a WebRTC transport is for (`WorkerCore.createTransport(role:)`).
public enum TransportRole: String, Sendable, Codable, CaseIterable {
    /// A client's connection: ICE-lite, controlled; DTLS in the role the client's SDP leaves us.
    case client
    /// The connecting side of a relay between two nodes: full ICE, controlling (it checks the
    /// peer's candidates and nominates), DTLS client when its `setRemote` says "passive".
    case relayClient
    /// The other side of a relay: an ordinary ICE-lite transport whose peer is another node.
    case relayServer

    /// Either side of a relay: its packets are counted apart (`WorkerCounters.relay`).
    public var isRelay: Bool { self != .client }
}

/// Packets that crossed relays between nodes on one worker (either side of a relay).
public struct RelayCounters: Sendable, Equatable {
    /// RTP packets (and their clear bytes) sent to other nodes, counted after the send succeeded.
    public var packetsSent: UInt64 = 0
    public var bytesSent: UInt64 = 0
    /// RTP packets (and their clear bytes) received from other nodes, decrypted.
    public var packetsReceived: UInt64 = 0
    public var bytesReceived: UInt64 = 0
    /// Packets found missing (gaps in sequence numbers) in streams from other nodes: the loss
    /// of the relay hops, before their repair.
    public var packetsMissing: UInt64 = 0
    /// Packets resent to another node on its NACKs.
    public var packetsRetransmitted: UInt64 = 0
    public init() {}
}
