internal import Foundation

/// The `cluster.*` keys. With `redisUrl` empty the server is one node, exactly as without a
/// cluster: nothing here is used.
public struct ClusterConfiguration: Sendable, Equatable {
    /// `cluster.redisUrl`: `redis://host:port` or `unix:///path`; empty = single node.
    public var redisUrl = ""
    /// `cluster.nodeId`: this node's id (letters, digits, `-`, at most 32); empty = generated
    /// at start. Every room, member, publication and subscription id the node makes begins
    /// with it and a dot.
    public var nodeId = ""
    /// `cluster.advertiseUrl`: how other nodes and redirected clients reach this node's HTTP
    /// port (`http://198.18.0.11:7880`). Required in cluster mode.
    public var advertiseUrl = ""
    /// `cluster.secret`: the shared secret node-to-node links are authenticated with (at least
    /// 32 bytes). Required in cluster mode.
    public var secret = ""
    /// `cluster.leaseMs`: how long a node's registration lives without renewal; it is renewed
    /// every third of it. A node killed is out of the cluster after at most this plus one renewal.
    public var leaseMs = 5000
    /// `cluster.drainTimeoutSec`: how long a draining node (`SIGTERM`, `POST /v1/nodes/{id}/drain`)
    /// keeps rooms that still have members before it exits anyway.
    public var drainTimeoutSec = 300
    /// `cluster.storeTimeoutMs`: how long one call to Redis may take (connect or command)
    /// before it counts as unreachable.
    public var storeTimeoutMs = 1000
    /// `cluster.cascade`: a member's media is served by the node its client connected to
    /// (when that node is serving and the room spans fewer than `maxNodesPerRoom` nodes), with
    /// relays between the room's nodes; false: every member of a room is served by its home node.
    public var cascade = false
    /// `cluster.maxNodesPerRoom`: the most nodes that serve one room's members (its home counts).
    public var maxNodesPerRoom = 4
    /// `cluster.relayLingerMs`: how long a stream relayed to another node is kept after its
    /// last subscriber there left (a viewer reloading does not tear it down and set it up again).
    public var relayLingerMs = 5000
    /// `cluster.loadLimitPercent`: a node takes members of rooms homed on other nodes only
    /// while its media transports are under this percent of its `media.maxTransports` and its
    /// CPU under this percent of its cores (both as of its last lease renewal).
    public var loadLimitPercent = 80

    public init() {}

    public var enabled: Bool { !redisUrl.isEmpty }

    /// A node id for a node started without one: 12 hex digits.
    public static func generatedNodeId() -> String {
        String(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12))
    }

    /// Whether `id` may be a node id: 1–32 of `a-z A-Z 0-9 -` (no dot: ids are split at the first one).
    public static func isValidNodeId(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 32 && id.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2D
        }
    }

    /// The node that made `id` (the part before its first dot), or nil for an id without one.
    public static func nodeId(of id: String) -> String? {
        guard let dot = id.firstIndex(of: "."), dot > id.startIndex else { return nil }
        let node = String(id[..<dot])
        return isValidNodeId(node) ? node : nil
    }

    /// The largest frame a node link carries: a client's frame (at most `server.maxFrameBytes`)
    /// or one message to a client (a response or event; one larger than `server.maxOutgoingBytes`
    /// would close the client's socket anyway), escaped as a JSON string inside the link's
    /// envelope (at most twice as long: the text is valid JSON, so only `"` and `\` grow), plus
    /// the envelope.
    public static func linkMaxFrameBytes(maxFrameBytes: Int, maxOutgoingBytes: Int) -> Int {
        2 * max(maxFrameBytes, maxOutgoingBytes) + 65536
    }

    /// What is wrong with the keys in cluster mode, or nil when they can run.
    public func problem() -> String? {
        guard enabled else { return nil }
        if !nodeId.isEmpty, !Self.isValidNodeId(nodeId) {
            return "cluster.nodeId must be 1 to 32 letters, digits or '-'"
        }
        if advertiseUrl.isEmpty { return "cluster.advertiseUrl is required when cluster.redisUrl is set" }
        guard let url = URL(string: advertiseUrl), let scheme = url.scheme, ["http", "https"].contains(scheme),
              url.host != nil, url.path.isEmpty || url.path == "/" else {
            return "cluster.advertiseUrl must be http(s)://host:port with no path"
        }
        if secret.utf8.count < 32 { return "cluster.secret must be at least 32 bytes when cluster.redisUrl is set" }
        if !(redisUrl.hasPrefix("redis://") || redisUrl.hasPrefix("unix://")) {
            return "cluster.redisUrl must be redis://host:port or unix:///path"
        }
        return nil
    }
}
