import Foundation
import MinatoClient
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
/// publishers get thread 0 to themselves and the subscribers thread 1.
func threadIndex(member m: Int, _ scenario: Scenario) -> Int {
    scenario.allToAll ? m % 2 : (m < scenario.publishers ? 0 : 1)
}

/// Sampling rate for latency: every 10th video packet, every 5th audio packet.
func counter(for kind: String) -> StreamCounter { StreamCounter(sampleEvery: kind == "audio" ? 5 : 10) }

// MARK: Minato, through the Swift client SDK

func setUpMinato(_ scenario: Scenario, _ shape: LoadShape, url: String) async throws -> Rig {
    let start = Date()
    let options = Context.Options(url: url, srtpProfiles: benchSrtpProfiles)
    let contexts = [try await Context.setup(options), try await Context.setup(options)]
    var groups = contexts.map { c in WorkerGroup(perform: { body in try await c.perform(body) }) }
    var members: [LocalSFURoomMember] = []
    var rooms: [SFURoom] = []
    for r in 0..<scenario.rooms {
        let room = try await SFURoom.create(contexts[0], name: "bench-\(scenario.name)-\(r)-\(UInt16.random(in: 0...UInt16.max))")
        rooms.append(room)
        let views = [room, try await SFURoom.find(contexts[1], id: room.id)]
        // Join everyone (concurrently), then publish, then subscribe.
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
        let made = try await withThrowingTaskGroup(of: (Int, [StreamCounter]).self) { group in
            for m in subscribers {
                let member = roomMembers[m]
                let mine = publications.filter { $0.owner != m }
                group.addTask {
                    var counters: [StreamCounter] = []
                    for p in mine {
                        let c = counter(for: p.kind)
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
        for (m, counters) in made { groups[threadIndex(member: m, scenario)].counters += counters }
    }
    let all = members, allRooms = rooms
    return Rig(groups: groups, setupSec: Date().timeIntervalSince(start)) {
        await withTaskGroup(of: Void.self) { g in
            for m in all { g.addTask { try? await m.leave() } }
        }
        for r in allRooms { try? await r.close() }
        for c in contexts { c.dispose() }
    }
}

/// `publish` takes a concrete source type; open the existential here (setup path only).
func publish(_ member: LocalSFURoomMember, _ source: any CountingSource) async throws -> RoomPublication {
    try await member.publish(source)
}

// MARK: Janus, through its HTTP API with the same client transport

/// Client threads for the Janus run (the same `ClientWorker`/`ClientConnection` the SDK uses).
final class JanusPeers: @unchecked Sendable {
    let workers: [ClientWorker]
    init(runtime: CryptoRuntime) { workers = [ClientWorker(runtime: runtime), ClientWorker(runtime: runtime)] }
}

func setUpJanus(_ scenario: Scenario, _ shape: LoadShape) async throws -> Rig {
    let start = Date()
    let runtime = try CryptoRuntime()
    let peers = JanusPeers(runtime: runtime)
    let api = try await JanusAPI.connect()
    var groups = peers.workers.map { w in WorkerGroup(perform: { body in try await w.perform { _ in body() } }) }
    let connections = Box<[WorkerBoundConnection]>([])
    do {
        for r in 0..<scenario.rooms {
            let admin = try await api.attach()
            let roomId = UInt64.random(in: 1_000_000...9_000_000_000) + UInt64(r)
            _ = try await api.message(handle: admin, body: [
                "request": "create", "room": .number(Double(roomId)), "publishers": 100, "bitrate": 0, "fir_freq": 0,
                "audiocodec": "opus", "videocodec": "vp8", "notify_joining": false, "permanent": false])
            var feeds: [(owner: Int, feed: UInt64, kinds: [String])] = []
            for m in 0..<scenario.publishers {
                let worker = peers.workers[threadIndex(member: m, scenario)]
                let sources = makeSources(scenario, shape)
                let handle = try await api.attach()
                let thread = threadIndex(member: m, scenario)
                let (connection, offer, tracks) = try await worker.perform { core -> (WorkerBoundConnection, String, [OfferedTrack]) in
                    let c = try core.makeConnection(srtpProfiles: benchSrtpProfiles)
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
                    let c = try core.makeConnection(srtpProfiles: benchSrtpProfiles)
                    let (answer, streams) = ClientSdp.answer(to: offer, local: c.local, sessionId: UInt64.random(in: 1...1 << 62),
                                                             version: 1, dtlsRole: .server)
                    let demux = InboundDemux()
                    var counters: [StreamCounter] = []
                    for s in streams where !s.rejected && s.direction == .sendonly {
                        guard let ssrc = s.ssrcs.first else { continue }
                        let k = counter(for: s.kind)
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
            }
        }
    } catch {
        await api.close()
        for w in peers.workers { w.shutdown() }
        throw error
    }
    let conns = connections
    return Rig(groups: groups, setupSec: Date().timeIntervalSince(start)) {
        for (i, w) in peers.workers.enumerated() {
            try? await w.perform { core in for c in conns.value where c.thread == i { c.close(core) } }
        }
        await api.close()
        for w in peers.workers { w.shutdown() }
    }
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
