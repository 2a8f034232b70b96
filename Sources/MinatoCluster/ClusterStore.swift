/// What the cluster keeps in its shared store (Redis in production, `RedisClusterStore`): which
/// nodes are alive (a lease each node renews), their load, and which node hosts each room.
/// The store is never the only copy of a live room and never on the media path: the node that
/// hosts a room is its single writer, and the store only says where it is.
///
/// Every write that could undo another node's work compares ownership inside the store
/// (a Lua script): a node never deletes a record another node owns.
public protocol ClusterStore: Sendable {
    /// Writes the node's lease record (expires after `leaseMs` unless renewed). Returns true
    /// when the lease found there is the one the node last saw written (`previous`, the
    /// `renewal` of its last acknowledged renewal), false otherwise: no lease (first start, the
    /// lease lapsed, the store was emptied) or another one. The caller must then re-claim its
    /// rooms. Comparing the renewal number, not only the key's existence, catches a renewal
    /// that timed out here but reached Redis later (a TCP retransmission after a partition
    /// healed): it would otherwise make a lapsed lease look alive.
    func renewLease(_ node: NodeRecord, leaseMs: Int, previous: Int64?) async throws(ClusterStoreError) -> Bool

    /// Removes the node's lease (a clean exit).
    func dropLease(nodeId: String) async throws(ClusterStoreError)

    /// Every node whose lease is alive, with its last record.
    func liveNodes() async throws(ClusterStoreError) -> [NodeRecord]

    /// Reserves the room name for `nodeId` unless a live node holds it already. Returns the
    /// node that holds the name afterwards (`nodeId` when the reservation was made or was
    /// already its own). A name held by a node whose lease lapsed is taken over.
    func reserveRoomName(_ name: String, for nodeId: String) async throws(ClusterStoreError) -> String

    /// Records a room the node opened (or still hosts, after the store lost it). Fails with
    /// `.nameHeldElsewhere(node)` when its name is held by another live node (then the caller's
    /// copy is the duplicate); otherwise records the room and the name as the node's.
    func roomOpened(_ room: RoomRecord) async throws(ClusterStoreError)

    /// Removes the room's records, only where they are still `room.nodeId`'s.
    func roomClosed(_ room: RoomRecord) async throws(ClusterStoreError)

    /// Every room recorded, with the node hosting it.
    func rooms() async throws(ClusterStoreError) -> [RoomRecord]

    /// For each node that registered once but whose lease has lapsed: removes its rooms (those
    /// still recorded as its own) and the node, and returns what was removed. Safe to run on
    /// every node at once: each record is removed by exactly one caller.
    func reapDeadNodes() async throws(ClusterStoreError) -> [RoomRecord]

    /// One round trip to the store (for the readiness probe and the round-trip metric).
    func ping() async throws(ClusterStoreError)
}

extension ClusterStore {
    /// Writes `node` again as its own previous renewal: true when the lease found is the one
    /// last written with the same `renewal` (tests and tools that renew one record repeatedly).
    public func renewLease(_ node: NodeRecord, leaseMs: Int) async throws(ClusterStoreError) -> Bool {
        try await renewLease(node, leaseMs: leaseMs, previous: node.renewal)
    }
}

/// A node as the store knows it.
public struct NodeRecord: Sendable, Equatable, Codable {
    public var id: String
    /// How other nodes and redirected clients reach this node's HTTP port (`cluster.advertiseUrl`).
    public var url: String
    public var state: NodeState
    public var load: NodeLoad
    /// Wall-clock milliseconds since 1970 when this record was written (lease age = now − this).
    public var renewedAtMs: Int64
    /// When the process started (wall-clock ms): tells a restarted node from the old one.
    public var startedAtMs: Int64
    /// The number of this renewal (one more each attempt); see `ClusterStore.renewLease`.
    public var renewal: Int64

    public init(id: String, url: String, state: NodeState, load: NodeLoad, renewedAtMs: Int64, startedAtMs: Int64,
                renewal: Int64 = 0) {
        self.id = id; self.url = url; self.state = state; self.load = load
        self.renewedAtMs = renewedAtMs; self.startedAtMs = startedAtMs; self.renewal = renewal
    }
}

public enum NodeState: String, Sendable, Equatable, Codable {
    /// Takes new rooms.
    case serving
    /// Takes no new rooms; keeps its live ones until they empty or `cluster.drainTimeoutSec`.
    case draining
}

public struct NodeLoad: Sendable, Equatable, Codable {
    public var rooms: Int, members: Int, transports: Int
    /// CPU use of the process over the last interval, in percent of one core.
    public var cpuPercent: Double
    /// Whether the node is under its load limit (`cluster.loadLimitPercent`), as it judged at
    /// this renewal: only then is it given members of rooms homed elsewhere. nil: not said
    /// (taken as under).
    public var underLimit: Bool?
    public init(rooms: Int = 0, members: Int = 0, transports: Int = 0, cpuPercent: Double = 0, underLimit: Bool? = nil) {
        self.rooms = rooms; self.members = members; self.transports = transports; self.cpuPercent = cpuPercent
        self.underLimit = underLimit
    }
}

/// A room as the store knows it: its id, name (unique across the cluster when set) and host.
public struct RoomRecord: Sendable, Equatable, Hashable, Codable {
    public var id: String
    public var name: String?
    public var nodeId: String
    public init(id: String, name: String?, nodeId: String) { self.id = id; self.name = name; self.nodeId = nodeId }
}

public enum ClusterStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The store could not be reached or did not answer in time (the sentence says which).
    case unavailable(String)
    /// The room's name is held by another live node.
    case nameHeldElsewhere(String)
    /// The store answered something this code does not understand.
    case protocolError(String)

    public var description: String {
        switch self {
        case .unavailable(let why): return "cluster store unavailable: \(why)"
        case .nameHeldElsewhere(let node): return "the room name is held by node \(node)"
        case .protocolError(let why): return "cluster store answered unexpectedly: \(why)"
        }
    }
}
