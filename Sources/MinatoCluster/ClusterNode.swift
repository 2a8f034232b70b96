public import MinatoRooms
public import Logging
internal import Foundation
internal import Metrics

/// This process as a node of the cluster: its lease in the store (renewed every third of
/// `cluster.leaseMs`, carrying its load), the record of each room it hosts, placement of new
/// rooms on the least-loaded serving node, the links it dialed to other nodes, and the gateway
/// of each client connection. The room core does not know it exists: it hears of rooms through
/// `RoomService.setRoomObserver` and reaches the core through the core's public API.
///
/// Faults: while the store is unreachable, live rooms keep running and only placement fails
/// (`serviceUnavailable`, at once); when a renewal finds the lease gone (the store was emptied,
/// or this node was cut off long enough to be reaped) the node records its rooms again, and
/// closes (reason `nodeFailed`) each one whose name another node took meanwhile. Every renewal
/// also reaps nodes whose lease lapsed; gateways with clients in their rooms tell them `closed`
/// with reason `nodeFailed`.
public actor ClusterNode {
    public nonisolated let configuration: ClusterConfiguration
    public nonisolated let nodeId: String
    nonisolated let logger: Logger
    let store: any ClusterStore
    let rooms: RoomService
    public nonisolated let credentials: NodeLinkCredentials
    /// The largest node-link frame (`ClusterConfiguration.linkMaxFrameBytes`).
    let linkMaxFrameBytes: Int
    private var record: NodeRecord
    /// The live nodes as of the last renewal (this one included while registered).
    private var live: [String: NodeRecord] = [:]
    /// The last record of every node seen alive and not failed since: where to dial a node
    /// that is briefly missing from the store (it re-registers after Redis restarted).
    private var known: [String: NodeRecord] = [:]
    /// Rooms placed on each node since the last renewal read its load (so a burst of new
    /// rooms spreads instead of landing on the node that looked emptiest).
    private var placedSinceRefresh: [String: Int] = [:]
    private var links: [String: NodeLinkClient] = [:]
    private var dialing: [String: Task<Result<NodeLinkClient, RoomError>, Never>] = [:]
    private var gateways: [UInt64: ClusterGateway] = [:]
    /// Whether the last call to the store succeeded, and why not when it did not.
    private var storeProblem: String? = "not registered yet"
    private var needsReclaim = true
    /// The `renewal` number of the last renewal the store acknowledged (nil: none yet).
    private var lastRenewal: Int64?
    private var leaseTask: Task<Void, Never>?
    private var roomTask: Task<Void, Never>?
    private let roomEvents: AsyncStream<RoomLifecycle>.Continuation
    private let roomEventStream: AsyncStream<RoomLifecycle>
    private var cpu = CpuSampler()

    public init(configuration: ClusterConfiguration, nodeId: String, store: any ClusterStore, rooms: RoomService,
                linkMaxFrameBytes: Int, logger: Logger) async {
        self.configuration = configuration
        self.nodeId = nodeId
        self.store = store
        self.rooms = rooms
        self.linkMaxFrameBytes = linkMaxFrameBytes
        self.logger = logger
        self.credentials = await NodeLinkCredentials(secret: configuration.secret, nodeId: nodeId)
        let now = Self.nowMs()
        self.record = NodeRecord(id: nodeId, url: configuration.advertiseUrl, state: .serving, load: NodeLoad(),
                                 renewedAtMs: now, startedAtMs: now)
        (roomEventStream, roomEvents) = AsyncStream<RoomLifecycle>.makeStream()
    }

    /// Registers with the store (or keeps trying, saying why in the log and on `/readyz`) and
    /// starts the lease and room-record loops.
    public func start() async {
        let events = roomEvents
        await rooms.setRoomObserver { event in events.yield(event) }
        let stream = roomEventStream
        roomTask = Task { [weak self] in
            for await event in stream { await self?.recordRoom(event) }
        }
        await renew()
        leaseTask = Task { [weak self, configuration] in
            let period = Duration.milliseconds(max(configuration.leaseMs / 3, 50))
            while !Task.isCancelled {
                try? await Task.sleep(for: period)
                await self?.renew()
            }
        }
    }

    /// Stops renewing and removes the lease (a clean exit: the node's rooms are reaped at once).
    public func stop() async {
        leaseTask?.cancel()
        roomTask?.cancel()
        for link in links.values { link.close() }
        try? await store.dropLease(nodeId: nodeId)
    }

    // MARK: Lease

    private func renew() async {
        let load = await rooms.load()
        let cpuPercent = cpu.sample()
        record.load = NodeLoad(rooms: load.rooms, members: load.members, transports: load.transports, cpuPercent: cpuPercent,
                               underLimit: Self.underLimit(transports: load.transports, maxTransports: load.maxTransports,
                                                           cpuPercent: cpuPercent, cores: ProcessInfo.processInfo.activeProcessorCount,
                                                           limitPercent: configuration.loadLimitPercent))
        record.renewedAtMs = Self.nowMs()
        let started = ContinuousClock.now
        do {
            record.renewal &+= 1
            let wasAlive = try await store.renewLease(record, leaseMs: configuration.leaseMs, previous: lastRenewal)
            lastRenewal = record.renewal
            let took = ContinuousClock.now - started
            Timer(label: "minato_cluster_store_roundtrip_seconds").recordNanoseconds(
                took.components.seconds * 1_000_000_000 + took.components.attoseconds / 1_000_000_000)
            if storeProblem != nil {
                logger.notice("cluster store reachable; node registered", metadata: ["node": "\(nodeId)"])
            }
            storeProblem = nil
            if !wasAlive || needsReclaim { await reclaim() }
            let nodes = try await store.liveNodes()
            setLive(nodes)
            placedSinceRefresh.removeAll()
            let reaped = try await store.reapDeadNodes()
            if !reaped.isEmpty {
                logger.notice("rooms of nodes whose lease lapsed removed", metadata: [
                    "rooms": "\(reaped.count)", "nodes": "\(Set(reaped.map(\.nodeId)).sorted())"])
            }
        } catch {
            Counter(label: "minato_cluster_lease_renewals_missed_total").increment()
            if storeProblem == nil {
                logger.error("cluster store unreachable: live rooms keep running, new rooms cannot be placed",
                             metadata: ["error": "\(error)"])
            }
            storeProblem = "\(error)"
        }
    }

    /// Records every local room again after the store lost them (or this node's lease lapsed),
    /// closes each one whose name another node now holds, and removes records of this node's
    /// rooms that are no longer open here.
    private func reclaim() async {
        let open = await rooms.openRooms()
        do {
            var reclaimed = 0
            for room in open {
                do {
                    try await store.roomOpened(RoomRecord(id: room.id, name: room.name, nodeId: nodeId))
                    reclaimed += 1
                } catch ClusterStoreError.nameHeldElsewhere(let other) {
                    logger.warning("room closed: another node holds its name now", metadata: [
                        "room": "\(room.id)", "name": "\(room.name ?? "")", "holder": "\(other)"])
                    Counter(label: "minato_cluster_rooms_closed_as_duplicate_total").increment()
                    await rooms.closeRoom(id: room.id, reason: "nodeFailed")
                }
            }
            let openIds = Set(open.map(\.id))
            for stale in try await store.rooms() where stale.nodeId == nodeId && !openIds.contains(stale.id) {
                try await store.roomClosed(stale)
            }
            needsReclaim = false
            if reclaimed > 0 {
                Counter(label: "minato_cluster_rooms_reclaimed_total").increment(by: reclaimed)
                logger.notice("rooms recorded again in the cluster store", metadata: ["rooms": "\(reclaimed)"])
            }
        } catch {
            needsReclaim = true
        }
    }

    private func recordRoom(_ event: RoomLifecycle) async {
        do {
            switch event {
            case .opened(let id, let name):
                do {
                    try await store.roomOpened(RoomRecord(id: id, name: name, nodeId: nodeId))
                } catch ClusterStoreError.nameHeldElsewhere(let other) {
                    logger.warning("room closed: another node holds its name", metadata: [
                        "room": "\(id)", "holder": "\(other)"])
                    await rooms.closeRoom(id: id, reason: "nodeFailed")
                }
            case .closed(let id, let name):
                try await store.roomClosed(RoomRecord(id: id, name: name, nodeId: nodeId))
            }
        } catch {
            // The store is down: the next renewal that reaches it records the rooms again.
            needsReclaim = true
        }
    }

    /// Takes `nodes` (just read from the store) as the live ones, and reports the nodes that
    /// failed: a node is failed when it has no lease *and* no working link from here. Both are
    /// needed: a node missing from the store while its link works is alive (Redis was emptied
    /// and it has not registered again yet, or it is cut off from Redis only: its rooms go on
    /// until it heals), and a node whose link dropped while its lease lives is dialed again.
    private func setLive(_ nodes: [NodeRecord]) {
        let before = Set(live.keys)
        live = Dictionary(nodes.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        // Media served here for rooms of a node that left ends with it, and members of rooms
        // here that it served leave (cluster.cascade).
        let gone = before.subtracting(live.keys).subtracting([nodeId])
        if !gone.isEmpty {
            let rooms = self.rooms
            Task {
                for node in gone {
                    await rooms.releaseHosted(home: node)
                    await rooms.siteFailed(node)
                }
            }
        }
        for n in nodes { known[n.id] = n }
        let involved = Set(gateways.values.flatMap(\.nodes)).union(links.keys)
        for node in involved where node != nodeId && live[node] == nil && !(links[node]?.isUp ?? false) {
            links[node]?.close()
            links[node] = nil
            known[node] = nil
            logger.notice("node left the cluster; its rooms are closed for clients here", metadata: ["node": "\(node)"])
            for g in gateways.values { g.nodeFailed(node) }
        }
    }

    // MARK: Placement

    /// The node a new room goes to: with a name, the node that holds the name (reserved now
    /// for the least-loaded serving node if nobody does); without, the least-loaded serving node.
    public func place(name: String?) async -> Result<String, RoomError> {
        if let storeProblem {
            return .failure(.serviceUnavailable("New rooms cannot be placed: the cluster store is unreachable (\(storeProblem))."))
        }
        // The nodes alive now, not as of the last renewal: a node reaped since must not get the room.
        do {
            setLive(try await store.liveNodes())
        } catch {
            return .failure(.serviceUnavailable("New rooms cannot be placed: the cluster store is unreachable (\(error))."))
        }
        let candidates = live.values.filter { $0.state == .serving }
        guard let chosen = candidates.min(by: { score($0) < score($1) || (score($0) == score($1) && $0.id < $1.id) }) else {
            return .failure(.serviceUnavailable("No node of the cluster takes new rooms now (all draining or gone)."))
        }
        var node = chosen.id
        if let name {
            do { node = try await store.reserveRoomName(name, for: chosen.id) } catch {
                return .failure(.serviceUnavailable("New rooms cannot be placed: \(error)."))
            }
        }
        placedSinceRefresh[node, default: 0] += 1
        Counter(label: "minato_cluster_placements_total", dimensions: [("node", node == nodeId ? "self" : "other")]).increment()
        return .success(node)
    }

    /// Lower is emptier. The load comes from other nodes' records in the store: every part is
    /// clamped, so no record can make the sum overflow.
    private func score(_ n: NodeRecord) -> Int {
        func clamp(_ v: Int) -> Int { min(max(v, 0), 1_000_000) }
        let cpu = n.load.cpuPercent.isFinite ? Int(min(max(n.load.cpuPercent, 0), 100_000) / 10) : 0
        return clamp(n.load.members) + clamp(n.load.rooms) + 4 * clamp(placedSinceRefresh[n.id] ?? 0) + cpu
    }

    /// The node holding room name `name`, if a room of that name is recorded.
    public func nodeHolding(name: String) async -> String? {
        guard storeProblem == nil, let rooms = try? await store.rooms() else { return nil }
        return rooms.first { $0.name == name }?.nodeId
    }

    // MARK: Links

    /// The link to `node`, dialed now if there is none (one dial at a time per node).
    func link(to node: String) async -> Result<NodeLinkClient, RoomError> {
        if let link = links[node], !link.isDown { return .success(link) }
        if let pending = dialing[node] { return await pending.value }
        guard let url = (live[node] ?? known[node])?.url else {
            return .failure(.serviceUnavailable("Node \(node), which hosts this room, is not in the cluster now."))
        }
        let task = Task { await self.dial(node, url: url) }
        dialing[node] = task
        let result = await task.value
        dialing[node] = nil
        if case .success(let link) = result { links[node] = link }
        return result
    }

    private func dial(_ node: String, url: String) async -> Result<NodeLinkClient, RoomError> {
        let link = NodeLinkClient(node: node)
        let wsUrl = url.replacingOccurrences(of: "https://", with: "wss://").replacingOccurrences(of: "http://", with: "ws://")
            + "/cluster/link"
        do {
            let credential = try await credentials.mint()
            try await link.connect(url: wsUrl, credential: credential, maxFrameBytes: linkMaxFrameBytes, logger: logger) { [weak self] reason in
                Task { await self?.linkDown(node, link: link, reason: reason) }
            }
            Counter(label: "minato_cluster_links_opened_total").increment()
            return .success(link)
        } catch {
            logger.warning("node link could not be opened", metadata: ["node": "\(node)", "url": "\(wsUrl)", "error": "\(error)"])
            return .failure(.serviceUnavailable("Node \(node), which hosts this room, cannot be reached now."))
        }
    }

    /// A link ended: while its node is alive, dial again (backing off) and resume every client
    /// connection that had a channel on it; once the node is gone, `setLive` reports it.
    private func linkDown(_ node: String, link: NodeLinkClient, reason: String) async {
        guard links[node] === link else { return }
        links[node] = nil
        Counter(label: "minato_cluster_links_lost_total").increment()
        let affected = gateways.values.filter { $0.nodes.contains(node) }
        guard !affected.isEmpty else { return }
        logger.notice("node link lost; dialing again", metadata: ["node": "\(node)", "reason": "\(reason)"])
        var delay = Duration.milliseconds(100)
        while live[node] != nil || known[node] != nil {
            if case .success = await self.link(to: node) {
                for g in affected { await g.resume(on: node) }
                return
            }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(2))
        }
    }

    // MARK: Gateways

    /// The gateway of a new client connection (its channel id is the connection's id).
    public func gateway(for client: ClientChannel, token: String?) -> ClusterGateway {
        let g = ClusterGateway(cluster: self, client: client, token: token)
        gateways[client.id] = g
        return g
    }

    func gatewayClosed(_ id: UInt64) { gateways[id] = nil }

    /// Whether `node` has a live lease: as of the last renewal, or else as the store says now (a
    /// node that started since the last renewal is not in the cached list yet). With the store
    /// unreachable, a node not cached is taken as possibly alive: the link then decides.
    public func isLive(_ node: String) async -> Bool {
        if live[node] != nil || (links[node]?.isUp ?? false) { return true }
        guard let nodes = try? await store.liveNodes() else { return true }
        // Reported failed (to the gateways, before the caller answers anything) if it is.
        setLive(nodes)
        return live[node] != nil
    }

    public func otherLiveNodes() -> [String] { live.keys.filter { $0 != nodeId }.sorted() }

    func localListRooms(_ client: ClientChannel) async -> Result<[JSONValue], RoomError> {
        await withCheckedContinuation { c in
            Task {
                await rooms.run({ core in .array(try core.listRooms(from: client)) }, respond: { outcome in
                    c.resume(returning: outcome.map { $0.arrayValue ?? [] })
                })
            }
        }
    }

    // MARK: Introspection (admin API, /readyz)

    /// Why this node is not ready (nil: ready): not registered, the store unreachable, draining.
    public var notReadyReason: String? {
        if let storeProblem { return "cluster store unreachable: \(storeProblem)" }
        if record.state == .draining { return "draining" }
        return nil
    }

    /// Whether `node` is live and serving (not draining), as of the last renewal.
    public func isServing(_ node: String) -> Bool { live[node]?.state == .serving }

    /// Whether `node` is live, serving and under its load limit (`NodeLoad.underLimit`), as of
    /// its last renewal: whether it may serve members of rooms homed elsewhere.
    public func takesMembers(_ node: String) -> Bool {
        guard let record = live[node], record.state == .serving else { return false }
        return record.load.underLimit ?? true
    }

    /// A node's own judgement of its load: `transports` under `limitPercent` of `maxTransports`
    /// and `cpuPercent` (of one core) under `limitPercent` of `cores` cores.
    static func underLimit(transports: Int, maxTransports: Int, cpuPercent: Double, cores: Int, limitPercent: Int) -> Bool {
        let share = Double(limitPercent) / 100
        return Double(transports) < share * Double(maxTransports) && cpuPercent < share * 100 * Double(max(cores, 1))
    }

    /// The URL of `node` as it registered (nil when it is not live).
    public func url(of node: String) -> String? { live[node]?.url }

    /// The live nodes, for `GET /v1/nodes`: id, url, state, load and lease age.
    public func nodesJSON() async -> Result<JSONValue, RoomError> {
        do {
            let now = Self.nowMs()
            let nodes = try await store.liveNodes().sorted { $0.id < $1.id }
            return .success(["nodes": .array(nodes.map { n in
                ["id": .string(n.id), "url": .string(n.url), "state": .string(n.state.rawValue),
                 "load": ["rooms": .int(n.load.rooms), "members": .int(n.load.members), "transports": .int(n.load.transports),
                          "cpuPercent": .double(n.load.cpuPercent), "underLimit": .bool(n.load.underLimit ?? true)],
                 "leaseAgeMs": .int(Int(max(0, now &- n.renewedAtMs))), "self": .bool(n.id == nodeId)]
            })])
        } catch {
            return .failure(.serviceUnavailable("The cluster store is unreachable: \(error)."))
        }
    }

    /// Every room the store records, with its node (`GET /v1/rooms`).
    public func recordedRooms() async -> Result<[RoomRecord], RoomError> {
        do { return .success(try await store.rooms()) } catch {
            return .failure(.serviceUnavailable("The cluster store is unreachable: \(error)."))
        }
    }

    /// A node-internal call to `node` over its link (admin listing).
    public func call(_ node: String, op: String, params: JSONValue = [:]) async -> Result<JSONValue, RoomError> {
        switch await link(to: node) {
        case .success(let link): return await link.call(op, params: params)
        case .failure(let e): return .failure(e)
        }
    }

    /// Takes no new rooms from now on (`/readyz` says so, placement skips this node).
    public func drain() async {
        guard record.state != .draining else { return }
        record.state = .draining
        logger.notice("node draining: no new rooms are placed here", metadata: ["node": "\(nodeId)"])
        await renew()
    }

    static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

extension JSONValue {
    var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
}

/// CPU use of this process between two samples, in percent of one core (from /proc/self/stat).
struct CpuSampler {
    private var last: (ticks: Int, at: ContinuousClock.Instant)?

    mutating func sample() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return 0 }
        // Fields after the command name: state is field 3; utime and stime are 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Int(fields[11]), let system = Int(fields[12]) else { return 0 }
        let ticks = user &+ system, now = ContinuousClock.now
        defer { last = (ticks, now) }
        guard let last else { return 0 }
        let seconds = Double((now - last.at).components.seconds) + Double((now - last.at).components.attoseconds) / 1e18
        let hz = Double(max(sysconf(Int32(_SC_CLK_TCK)), 1))
        guard seconds > 0 else { return 0 }
        return Double(ticks &- last.ticks) / hz / seconds * 100
    }
}

/// The cluster as the room core sees it for rooms across nodes (`RoomService.setMediaNodes`):
/// media commands and events go over the node links.
public struct ClusterMediaNodes: MediaNodes {
    let node: ClusterNode
    public var nodeId: String { node.nodeId }
    public var cascade: Bool { node.configuration.cascade }
    public var maxNodesPerRoom: Int { node.configuration.maxNodesPerRoom }
    public var relayLingerMs: Int { node.configuration.relayLingerMs }
    public init(node: ClusterNode) { self.node = node }
    public func takesMembers(_ id: String) async -> Bool { await node.takesMembers(id) }
    public func call(_ id: String, op: String, params: JSONValue) async -> Result<JSONValue, RoomError> {
        await node.call(id, op: op, params: params)
    }
}
