internal import Foundation
public import MinatoMedia
public import MinatoTransport

/// Where part of a room's media runs: on the worker of the room's own node (`home`), or on
/// another node of the cluster that serves some of the room's members (`cluster.cascade`).
/// Every member, publication and subscription has one; its transports, producer or consumer
/// live there, and every change to them is a `MediaCommand` sent there.
public enum MediaSite: Hashable, Sendable, CustomStringConvertible {
    case home
    case node(String)
    public var description: String {
        switch self {
        case .home: return "home"
        case .node(let n): return n
        }
    }
}

/// One change the room core asks of the media on one site, as a value, so it can cross a
/// node link (`op: "media"`) as well as run on a local worker. Transport, producer and
/// consumer ids are those of the site that made them.
public enum MediaCommand: Sendable, Codable {
    /// A WebRTC transport in the room's router, for a client or one side of a relay.
    case createTransport(role: TransportRole)
    case setRemote(TransportId, RemoteTransportParameters)
    case addRemoteCandidate(TransportId, String?)
    case restartIce(TransportId)
    /// The producer's `transport` index is filled in on the worker.
    case addProducer(TransportId, ProducerParameters)
    /// The consumer's `transport` index is filled in on the worker.
    case addConsumer(TransportId, ConsumerParameters)
    case removeProducer(ProducerId)
    case removeConsumer(ConsumerId)
    case setPaused(ProducerId, Bool)
    case setPreferredLayer(ConsumerId, Int?)
    case requestKeyFrame(ProducerId)
    case pairTransports(TransportId, TransportId)
    case closeTransport(TransportId)
    /// Statistics of these producers and consumers (nil for one that is gone).
    case stats(producers: [ProducerId], consumers: [ConsumerId])

    /// Whether every producer and consumer the command names is in `producers` / `consumers`.
    func names(producersIn producers: Set<ProducerId>, consumersIn consumers: Set<ConsumerId>) -> Bool {
        switch self {
        case .addConsumer(_, let c): return producers.contains(c.producer)
        case .removeProducer(let p), .setPaused(let p, _), .requestKeyFrame(let p): return producers.contains(p)
        case .removeConsumer(let c), .setPreferredLayer(let c, _): return consumers.contains(c)
        case .stats(let ps, let cs): return ps.allSatisfy(producers.contains) && cs.allSatisfy(consumers.contains)
        case .createTransport, .setRemote, .addRemoteCandidate, .restartIce, .addProducer, .pairTransports, .closeTransport:
            return true
        }
    }

    /// The transport the command acts on, if it names one.
    var transport: TransportId? {
        switch self {
        case .setRemote(let t, _), .addRemoteCandidate(let t, _), .restartIce(let t), .addProducer(let t, _),
             .addConsumer(let t, _), .closeTransport(let t):
            return t
        case .pairTransports(let a, _):
            return a
        case .createTransport, .removeProducer, .removeConsumer, .setPaused, .setPreferredLayer, .requestKeyFrame, .stats:
            return nil
        }
    }

    /// Runs the command on the worker's thread; `newTransport` is the id `createTransport` gives.
    func run(on core: WorkerCore, router: RouterId, newTransport: TransportId) throws -> MediaReply {
        switch self {
        case .createTransport(let role):
            return .transport(try core.createTransport(id: newTransport, router: router, role: role))
        case .setRemote(let t, let remote):
            try core.setRemote(t, remote)
        case .addRemoteCandidate(let t, let line):
            try core.addRemoteCandidate(t, line)
        case .restartIce(let t):
            return .transport(try core.restartIce(t))
        case .addProducer(let t, let parameters):
            return .producer(try core.addProducer(on: t) { index in
                var p = parameters
                p.transport = index
                return p
            })
        case .addConsumer(let t, let parameters):
            return .consumer(try core.addConsumer(on: t) { index in
                var c = parameters
                c.transport = index
                return c
            })
        case .removeProducer(let p):
            core.removeProducer(p)
        case .removeConsumer(let c):
            core.removeConsumer(c)
        case .setPaused(let p, let paused):
            core.setPaused(p, paused)
        case .setPreferredLayer(let c, let layer):
            core.setPreferredLayer(c, layer)
        case .requestKeyFrame(let p):
            core.requestKeyFrame(p)
        case .pairTransports(let a, let b):
            core.pairTransports(a, b)
        case .closeTransport(let t):
            core.closeTransport(t)
        case .stats(let producers, let consumers):
            return .stats(producers: producers.map { core.producerStats($0) }, consumers: consumers.map { core.consumerStats($0) })
        }
        return .done
    }

    /// The command as a node link carries it (JSON text of its `Codable` form).
    func encoded() -> String {
        guard let data = try? MediaCommand.encoder.encode(self) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    /// Keys sorted: one command is always the same text.
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = .sortedKeys
        return e
    }()

    static func decoded(_ text: String) -> MediaCommand? {
        try? JSONDecoder().decode(MediaCommand.self, from: Data(text.utf8))
    }
}

/// What a `MediaCommand` returns.
public enum MediaReply: Sendable, Codable {
    case done
    case transport(TransportDescription)
    case producer(ProducerId)
    case consumer(ConsumerId)
    case stats(producers: [ProducerStats?], consumers: [ConsumerStats?])

    func encoded() -> String {
        guard let data = try? MediaCommand.encoder.encode(self) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    static func decoded(_ text: String) -> MediaReply? {
        try? JSONDecoder().decode(MediaReply.self, from: Data(text.utf8))
    }
}

extension TransportDescription {
    /// The parameters the other end of a relay applies to reach this transport, as the DTLS
    /// role `setup` ("active": this side connects; "passive": it is connected to).
    func remote(setup: String) -> RemoteTransportParameters {
        let parts = fingerprint.split(separator: " ", maxSplits: 1).map(String.init)
        return RemoteTransportParameters(iceUfrag: iceUfrag, icePwd: icePwd, fingerprintAlgorithm: parts.first ?? "",
                                         fingerprint: parts.count > 1 ? parts[1] : "", setup: setup,
                                         candidates: candidates, endOfCandidates: true)
    }
}

/// The other nodes of a cluster, as the room core uses them for rooms across nodes (given by
/// the cluster layer with `RoomService.setMediaNodes`; nil on a single node).
public protocol MediaNodes: Sendable {
    /// This node's id.
    var nodeId: String { get }
    /// `cluster.cascade`: members are served by the node they connect to.
    var cascade: Bool { get }
    /// `cluster.maxNodesPerRoom`: at most this many nodes serve one room (its home counts).
    var maxNodesPerRoom: Int { get }
    /// `cluster.relayLingerMs`: how long a relayed stream outlives its last subscriber there.
    var relayLingerMs: Int { get }
    /// Whether `node` is live, takes new work (not draining) and is under its load limit
    /// (`cluster.loadLimitPercent`): whether it may serve members of rooms homed elsewhere.
    func takesMembers(_ node: String) async -> Bool
    /// A node-internal call to `node` over the node link (`media`, `mediaEvent`).
    func call(_ node: String, op: String, params: JSONValue) async -> Result<JSONValue, RoomError>
}

/// Media this node serves for a room whose home is another node: its router on one of this
/// node's workers and the transports made there. Owned by `RoomService` (`hosted`).
final class HostedMedia {
    let home: String
    let roomId: String
    let worker: Int
    let router: RouterId
    var transports: Set<TransportId> = []
    /// The producers and consumers made for it (only those may be named).
    var producers: Set<ProducerId> = []
    var consumers: Set<ConsumerId> = []
    init(home: String, roomId: String, worker: Int, router: RouterId) {
        self.home = home; self.roomId = roomId; self.worker = worker; self.router = router
    }
    var key: String { Self.key(home: home, roomId: roomId) }
    static func key(home: String, roomId: String) -> String { "\(home)/\(roomId)" }
}
