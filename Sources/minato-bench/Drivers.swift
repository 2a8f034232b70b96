import Foundation
@_spi(Benchmark) import MinatoClient
import MinatoTransport
import MinatoWire

/// The SRTP profiles the load generator offers to both servers: AES-128-GCM first, no
/// AES-256-GCM (Janus would pick 256 from its fixed list; JANUS-NOTES.md), so both servers
/// run the same cipher.
let benchSrtpProfiles = "SRTP_AEAD_AES_128_GCM:SRTP_AES128_CM_SHA1_80"

func makeSources(_ scenario: Scenario, _ shape: LoadShape) -> [any CountingSource] {
    var s: [any CountingSource] = []
    if scenario.audio {
        s.append(SyntheticAudioSource(packetSize: shape.audioPacketSize + (scenario.audioLevels ? 8 : 0),
                                      audioLevel: scenario.audioLevels ? 30 : nil))
    }
    if scenario.video { s.append(SyntheticVideoSource(bitrate: shape.videoBitrate, fps: shape.fps, packetSize: shape.packetSize)) }
    return s
}

/// Members alternate between the two client threads in all-to-all rooms; in fan-out rooms the
/// publishers get thread 0 to themselves and the subscribers thread 1, except that with
/// `scenario.probes` the subscribers after the probes go to a third, quiet thread.
func threadIndex(member m: Int, _ scenario: Scenario) -> Int {
    if scenario.allToAll { return m % 2 }
    if m < scenario.publishers { return 0 }
    if let probes = scenario.probes, m >= scenario.publishers + probes { return 2 }
    return 1
}

/// Sampling rate for latency: every 10th video packet, every 5th audio packet.
func counter(for kind: String, latencyCapacity: Int = 1 << 16) -> StreamCounter {
    StreamCounter(sampleEvery: kind == "audio" ? 5 : 10, latencyCapacity: latencyCapacity)
}

// MARK: Minato, through the Swift client SDK

/// Load against one server built a room at a time (`MinatoLoad`, `JanusLoad`): `run` adds
/// every room at once, `capacity` one per step.
protocol RoomLoad: AnyObject, Sendable {
    /// The worker groups measured (their counters are forgotten as subscribers are muted).
    var groups: [WorkerGroup] { get set }
    /// Creates room `r` of `scenario`; returns its subscribers.
    @discardableResult
    func addRoom(_ scenario: Scenario, _ shape: LoadShape, index r: Int) async throws -> [LoadSubscriber]
    func teardown() async
}

extension RoomLoad {
    /// Stops measuring these counters (their subscribers go on).
    func forget(_ counters: [StreamCounter]) { groups = groups.map { $0.forgetting(counters) } }

    func rig(setupSec: Double) -> Rig {
        Rig(groups: groups, setupSec: setupSec) { await self.teardown() }
    }
}

/// Load against Minato built a room at a time (`minato-bench run` adds every room at once,
/// `minato-bench capacity` one step at a time): two SDK contexts (two client threads), the
/// members and rooms made so far, and the worker groups measured.
final class MinatoLoad: RoomLoad, @unchecked Sendable {
    let contexts: [Context]
    var groups: [WorkerGroup]
    private var members: [LocalSFURoomMember] = []
    private var rooms: [SFURoom] = []
    let latencyCapacity: Int

    /// `quietIterationMicros`: with it, a third client thread for the subscribers that are
    /// not probes (`Scenario.probes`), its loop iterating at most once per that many
    /// microseconds (`Context.Options.mediaIterationMicros`): those subscribers only need ICE
    /// consent and RTCP once muted. `recover`: the SDK's media recovery (off where subscribers
    /// are muted: it would restart the ICE of a connection that stopped receiving, on a new
    /// socket without the filter).
    init(url: String, latencyCapacity: Int = 1 << 16, quietIterationMicros: Int? = nil, recover: Bool = true,
         srtpProfiles: String = benchSrtpProfiles) async throws {
        var options = Context.Options(url: url, srtpProfiles: srtpProfiles)
        options.recover = recover
        var contexts = [try await Context.setup(options), try await Context.setup(options)]
        if let quietIterationMicros {
            options.mediaIterationMicros = quietIterationMicros
            contexts.append(try await Context.setup(options))
        }
        self.contexts = contexts
        groups = contexts.map { c in WorkerGroup(perform: { body in try await c.perform(body) }) }
        self.latencyCapacity = latencyCapacity
    }

    /// Creates room `r` of `scenario`: everyone joins (concurrently), then publishes, then
    /// subscribes. Returns the room's subscribers.
    @discardableResult
    func addRoom(_ scenario: Scenario, _ shape: LoadShape, index r: Int) async throws -> [LoadSubscriber] {
        let room = try await SFURoom.create(contexts[0], name: "bench-\(scenario.name)-\(r)-\(UInt16.random(in: 0...UInt16.max))")
        rooms.append(room)
        var views = [room]
        for c in contexts.dropFirst() { views.append(try await SFURoom.find(c, id: room.id)) }
        let roomMembers = try await withThrowingTaskGroup(of: (Int, LocalSFURoomMember).self) { group in
            for m in 0..<scenario.members {
                let view = views[threadIndex(member: m, scenario)]
                group.addTask { (m, try await view.join(name: "m\(m)", keepaliveIntervalSec: 60)) }
            }
            var out: [(Int, LocalSFURoomMember)] = []
            for try await x in group { out.append(x) }
            return out.sorted { $0.0 < $1.0 }.map(\.1)
        }
        members += roomMembers
        var publications: [(owner: Int, id: String, kind: String)] = []
        for m in 0..<scenario.publishers {
            for source in makeSources(scenario, shape) {
                let p = try await publish(roomMembers[m], source)
                publications.append((m, p.id, p.contentType.rawValue))
                groups[threadIndex(member: m, scenario)].sources.append(source)
            }
        }
        let subscribers = scenario.allToAll ? Array(0..<scenario.members) : Array(scenario.publishers..<scenario.members)
        let capacity = latencyCapacity
        let made = try await withThrowingTaskGroup(of: (Int, [StreamCounter]).self) { group in
            for m in subscribers {
                let member = roomMembers[m]
                let mine = publications.filter { $0.owner != m }
                group.addTask {
                    var counters: [StreamCounter] = []
                    for p in mine {
                        let c = counter(for: p.kind, latencyCapacity: capacity)
                        _ = try await member.subscribe(publicationId: p.id, sink: c)
                        counters.append(c)
                    }
                    return (m, counters)
                }
            }
            var out: [(Int, [StreamCounter])] = []
            for try await x in group { out.append(x) }
            return out
        }
        var out: [LoadSubscriber] = []
        for (m, counters) in made.sorted(by: { $0.0 < $1.0 }) {
            groups[threadIndex(member: m, scenario)].counters += counters
            let member = roomMembers[m]
            out.append(LoadSubscriber(thread: threadIndex(member: m, scenario), counters: counters) {
                try await member.dropIncomingRtpInKernel()
            })
        }
        return out
    }

    func teardown() async {
        let all = members
        await withTaskGroup(of: Void.self) { g in
            for m in all { g.addTask { try? await m.leave() } }
        }
        for r in rooms { try? await r.close() }
        for c in contexts { c.dispose() }
    }
}

func setUpMinato(_ scenario: Scenario, _ shape: LoadShape, url: String) async throws -> Rig {
    let start = Date()
    let load = try await MinatoLoad(url: url, srtpProfiles: scenario.srtpProfiles ?? benchSrtpProfiles)
    for r in 0..<scenario.rooms { try await load.addRoom(scenario, shape, index: r) }
    return load.rig(setupSec: Date().timeIntervalSince(start))
}

/// `publish` takes a concrete source type; open the existential here (setup path only).
func publish(_ member: LocalSFURoomMember, _ source: any CountingSource) async throws -> RoomPublication {
    try await member.publish(source)
}

// MARK: Janus, through its HTTP API with the same client transport

/// Client threads for the Janus run (the same `ClientWorker`/`ClientConnection` the SDK uses).
final class JanusPeers: @unchecked Sendable {
    let workers: [ClientWorker]
    /// `quietIterationMicros`: a third, quiet thread as in `MinatoLoad`.
    init(runtime: CryptoRuntime, quietIterationMicros: Int? = nil) {
        var workers = [ClientWorker(runtime: runtime), ClientWorker(runtime: runtime)]
        if let quietIterationMicros { workers.append(ClientWorker(runtime: runtime, minIterationMicros: quietIterationMicros)) }
        self.workers = workers
    }
}

final class JanusLoad: RoomLoad, @unchecked Sendable {
    let peers: JanusPeers
    let api: JanusAPI
    var groups: [WorkerGroup]
    private let connections = Box<[WorkerBoundConnection]>([])
    let latencyCapacity: Int

    init(latencyCapacity: Int = 1 << 16, quietIterationMicros: Int? = nil) async throws {
        let runtime = try CryptoRuntime()
        let peers = JanusPeers(runtime: runtime, quietIterationMicros: quietIterationMicros)
        self.peers = peers
        do {
            api = try await JanusAPI.connect()
        } catch {
            for w in peers.workers { w.shutdown() }
            throw error
        }
        groups = peers.workers.map { w in WorkerGroup(perform: { body in try await w.perform { _ in body() } }) }
        self.latencyCapacity = latencyCapacity
    }

    /// Creates room `r` of `scenario` through Janus's VideoRoom: each publisher joins and
    /// configures, then each subscriber joins for every other member's feed. Returns the room's
    /// subscribers.
    @discardableResult
    func addRoom(_ scenario: Scenario, _ shape: LoadShape, index r: Int) async throws -> [LoadSubscriber] {
        let capacity = latencyCapacity
        var out: [LoadSubscriber] = []
        let admin = try await api.attach()
        let roomId = UInt64.random(in: 1_000_000...9_000_000_000) + UInt64(r)
        _ = try await api.message(handle: admin, body: [
            "request": "create", "room": .number(Double(roomId)), "publishers": 100, "bitrate": 0, "fir_freq": 0,
            "audiocodec": "opus", "videocodec": "vp8", "notify_joining": false, "permanent": false])
        var feeds: [(owner: Int, feed: UInt64, kinds: [String])] = []
        let profiles = scenario.srtpProfiles ?? benchSrtpProfiles
        for m in 0..<scenario.publishers {
            let worker = peers.workers[threadIndex(member: m, scenario)]
            let sources = makeSources(scenario, shape)
            let handle = try await api.attach()
            let thread = threadIndex(member: m, scenario)
            let (connection, offer, tracks) = try await worker.perform { core -> (WorkerBoundConnection, String, [OfferedTrack]) in
                let c = try core.makeConnection(srtpProfiles: profiles)
                let tracks = sources.enumerated().map { i, s in
                    OfferedTrack(mid: String(i), codec: s.codec, ssrc: UInt32.random(in: 1...UInt32.max), cname: "bench\(m)")
                }
                let offer = ClientSdp.offer(local: c.local, tracks: tracks, sessionId: UInt64.random(in: 1...1 << 62), version: 1)
                return (WorkerBoundConnection(c, thread: thread), offer, tracks)
            }
            connections.value.append(connection)
            let event = try await api.message(
                handle: handle,
                body: ["request": "joinandconfigure", "ptype": "publisher", "room": .number(Double(roomId)),
                       "display": .string("p\(m)"), "audio": .bool(scenario.audio), "video": .bool(scenario.video)],
                jsep: ["type": "offer", "sdp": .string(offer)])
            guard let answer = event["jsep"]?["sdp"]?.string, let feed = event["plugindata"]?["data"]?["id"]?.uint64 else {
                throw BenchError("Janus's publish reply has no answer or feed id: \(event.serialized())")
            }
            let remote = try ClientSdp.remoteTransport(of: try SessionDescription.parse(answer))
            let role = ClientSdp.dtlsRole(answeringOurOffer: remote.setup)
            try await worker.perform { core in
                let c = connection.value
                c.setRemote(remote, dtlsRole: role)
                let demux = InboundDemux()
                var streams: [any OutboundControlBench] = []
                for (s, t) in zip(sources, tracks) { streams.append(makeStream(s, t.ssrc, c)) }
                demux.onRtcp = { rtcp in for s in streams { s.feedback(rtcp) } }
                demux.attach(to: c)
                // Start once DTLS is up (the timer skips sends until then).
                for s in streams { s.start(on: core) }
                connection.keep(streams, demux)
            }
            try await api.waitUp(handle)
            for s in sources { groups[threadIndex(member: m, scenario)].sources.append(s) }
            feeds.append((m, feed, sources.map { $0.codec.kind.rawValue }))
        }
        let subscribers = scenario.allToAll ? Array(0..<scenario.members) : Array(scenario.publishers..<scenario.members)
        for m in subscribers {
            let wanted = feeds.filter { $0.owner != m }
            guard !wanted.isEmpty else { continue }
            let worker = peers.workers[threadIndex(member: m, scenario)]
            let handle = try await api.attach()
            let event = try await api.message(handle: handle, body: [
                "request": "join", "ptype": "subscriber", "room": .number(Double(roomId)),
                "streams": .array(wanted.map { ["feed": .number(Double($0.feed))] })])
            guard let offerText = event["jsep"]?["sdp"]?.string else {
                throw BenchError("Janus's subscribe reply has no offer: \(event.serialized())")
            }
            let offer = try SessionDescription.parse(offerText)
            let remote = try ClientSdp.remoteTransport(of: offer)
            let thread = threadIndex(member: m, scenario)
            let (connection, answer, counters) = try await worker.perform { core -> (WorkerBoundConnection, String, [StreamCounter]) in
                let c = try core.makeConnection(srtpProfiles: profiles)
                let (answer, streams) = ClientSdp.answer(to: offer, local: c.local, sessionId: UInt64.random(in: 1...1 << 62),
                                                         version: 1, dtlsRole: .server)
                let demux = InboundDemux()
                var counters: [StreamCounter] = []
                for s in streams where !s.rejected && s.direction == .sendonly {
                    guard let ssrc = s.ssrcs.first else { continue }
                    let k = counter(for: s.kind, latencyCapacity: capacity)
                    demux.add(ssrc: ssrc, sink: k)
                    counters.append(k)
                }
                demux.attach(to: c)
                c.setRemote(remote, dtlsRole: .server)
                let bound = WorkerBoundConnection(c, thread: thread)
                bound.keep([], demux)
                return (bound, answer, counters)
            }
            connections.value.append(connection)
            _ = try await api.message(handle: handle, body: ["request": "start"], jsep: ["type": "answer", "sdp": .string(answer)])
            try await api.waitUp(handle)
            groups[threadIndex(member: m, scenario)].counters += counters
            out.append(LoadSubscriber(thread: thread, counters: counters) {
                try await worker.perform { _ in connection.value.dropIncomingRtpInKernel() }
            })
        }
        return out
    }

    func teardown() async {
        let conns = connections
        for (i, w) in peers.workers.enumerated() {
            try? await w.perform { core in for c in conns.value where c.thread == i { c.close(core) } }
        }
        await api.close()
        for w in peers.workers { w.shutdown() }
    }
}

func setUpJanus(_ scenario: Scenario, _ shape: LoadShape) async throws -> Rig {
    let start = Date()
    let load = try await JanusLoad()
    do {
        for r in 0..<scenario.rooms { try await load.addRoom(scenario, shape, index: r) }
    } catch {
        await load.teardown()
        throw error
    }
    return load.rig(setupSec: Date().timeIntervalSince(start))
}

/// Sends a source on a bare connection (`OutboundStream` without knowing its source type).
protocol OutboundControlBench: AnyObject {
    func start(on core: ClientWorkerCore)
    func stop(on core: ClientWorkerCore)
    func feedback(_ rtcp: UnsafeRawBufferPointer)
}
extension OutboundStream: OutboundControlBench {}

func makeStream<S: CountingSource>(_ source: S, _ ssrc: UInt32, _ c: ClientConnection) -> any OutboundControlBench {
    OutboundStream(source: source, ssrc: ssrc, connection: c)
}

/// A client connection with what it sends and receives; touched only on its worker thread.
final class WorkerBoundConnection: @unchecked Sendable {
    let value: ClientConnection
    let thread: Int
    private var streams: [any OutboundControlBench] = []
    private var demux: InboundDemux?
    init(_ c: ClientConnection, thread: Int) { value = c; self.thread = thread }
    func keep(_ streams: [any OutboundControlBench], _ demux: InboundDemux) { self.streams = streams; self.demux = demux }
    func close(_ core: ClientWorkerCore) {
        for s in streams { s.stop(on: core) }
        streams = []
        value.close()
        demux = nil
    }
}
