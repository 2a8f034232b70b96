import ArgumentParser
import Foundation
import MinatoClient

/// `minato-bench capacity` (issue 26 item 3): how many subscriber streams one server core
/// carries. The server runs pinned to `--server-cpus` (bench/capacity.sh pins this generator to
/// the other core) with one media worker; rooms of one publisher and `--room-subscribers`
/// subscribers are added one per step, and after each step every stream is measured for
/// `--window` seconds: subscriber streams, server CPU %, loss %, latency p50/p99 (send to
/// receive, both ends in this process), server RSS, and this generator's own CPU %. A step
/// passes at < 1% loss, p99 < 50 ms and every stream delivering; the run ends after
/// `--stop-after` failing steps in a row (or at `--max-rooms`). The capacity is the most
/// streams of a passing step.
struct CapacityRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "capacity", abstract: "Add rooms until one pinned server core saturates; one JSON object per step.")

    @Option(help: "minato or janus.") var server: String
    @Option(help: "video (1 publisher sends video and Opus) or audio (Opus only).") var kind = "video"
    @Option(help: "Subscribers per room (each gets every stream of the room's publisher).") var roomSubscribers = 99
    @Option(help: "Video bitrate, bit/s.") var videoBitrate = 1_000_000
    @Option(help: "Measuring window per step, seconds.") var window = 10.0
    @Option(help: "Rooms at most.") var maxRooms = 40
    @Option(help: "Failing steps in a row that end the run.") var stopAfter = 2
    @Option(help: "Subscribers per room that read every packet (loss and latency come from them); the kernel drops the RTP of the others.")
    var probesPerRoom = 3
    @Option(help: "CPU list the server is pinned to (taskset -c).") var serverCpus = "0"
    @Option(help: "Microseconds between the starts of two iterations of the loop of the client thread holding the muted subscribers (they need only ICE consent and RTCP).")
    var quietIterationUs = 20_000
    @Option(help: "The minato executable.") var minatoBin = ".build/release/minato"
    @Option(help: "The script that runs Janus in the foreground.") var janusRun = "scripts/janus-run.sh"
    @Option(help: "Where the JSON array of steps goes.") var out: String
    @Flag(help: "Exit 1 if a step errs (a stream delivered nothing, a muted subscriber read a packet, a room could not be set up) or loses more than 5% (CI's smoke run).")
    var check = false
    @Option(help: "Server logs go here.") var logDir = "artifacts/bench"

    struct Step: Codable {
        var server: String
        var kind: String
        var rooms: Int
        /// Subscriber streams of the kind measured (video streams in a video run, where each
        /// subscriber also gets the publisher's audio; audio streams in an audio run).
        var streams: Int
        /// Every subscriber stream, audio included.
        var allStreams: Int
        /// Packets a second the server should send: what the publishers sent times the
        /// subscribers per room.
        var outPps: Double
        var serverCpuPercent: Double
        var serverMicrosPerOutPacket: Double
        var generatorCpuPercent: Double
        var lossPercent: Double
        var latencyP50Ms: Double
        var latencyP99Ms: Double
        var serverRssMB: Double
        /// Minato's minato_packets_dropped_total (all reasons) in the window; nil for Janus.
        var serverDrops: UInt64?
        /// Packets that reached muted subscribers in the window (the socket filter lets none by: 0).
        var mutedLeaks: UInt64
        var setupSec: Double
        var passed: Bool
        var error: String?
    }

    func run() async throws {
        guard server == "minato" || server == "janus" else { throw ValidationError("--server must be minato or janus") }
        guard kind == "video" || kind == "audio" else { throw ValidationError("--kind must be video or audio") }
        try FileManager.default.createDirectory(atPath: logDir, withIntermediateDirectories: true)
        let scenario = Scenario(name: "capacity-\(kind)", rooms: 1, members: 1 + roomSubscribers, publishers: 1, allToAll: false,
                                video: kind == "video", audio: true, videoBitrate: videoBitrate, probes: probesPerRoom)
        let shape = LoadShape(videoBitrate: videoBitrate, fps: 30, packetSize: 1200, audioPacketSize: 100)
        let s = try await startCapacityServer()
        runningServer.set(s)
        let record = Box<[Step]>([])
        var climbError: String?
        do {
            try await climb(scenario, shape, s, record: record)
        } catch {
            // The steps measured so far stay; a step that could not finish is not one.
            climbError = "\(error)"
            progress("capacity \(server) \(kind): \(error)")
        }
        await s.stop()
        let steps = record.value
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(steps).write(to: URL(fileURLWithPath: out))
        let best = steps.filter(\.passed).map(\.streams).max() ?? 0
        progress("capacity \(server) \(kind): \(best) subscriber streams on one core at < 1% loss and p99 < 50 ms")
        if check {
            var bad = steps.compactMap { s in s.error ?? (s.lossPercent > 5 ? "loss \(s.lossPercent)%" : nil) }
            if let climbError { bad.append(climbError) }
            if steps.isEmpty { bad.append("no step was measured") }
            if !bad.isEmpty {
                for b in bad { print("FAILED capacity \(server) \(kind): \(b)") }
                throw ExitCode(1)
            }
        }
    }

    /// Rooms are added until `stopAfter` steps fail in a row, each step appended to `record`
    /// (a room that cannot be set up is recorded as a failed step with its error, and ends the
    /// run).
    func climb(_ scenario: Scenario, _ shape: LoadShape, _ s: ServerProcess, record: Box<[Step]>) async throws {
        let capacity = 4096   // latency samples per stream and window (≈ 100 at 1 Mbit/s in 10 s)
        let load: any RoomLoad = server == "minato"
            ? try await MinatoLoad(url: "ws://127.0.0.1:7880/ws", latencyCapacity: capacity,
                                   quietIterationMicros: quietIterationUs, recover: false)
            : try await JanusLoad(latencyCapacity: capacity, quietIterationMicros: quietIterationUs)
        // Counters of the muted subscribers, by client thread (read only there).
        var muted: [Int: [StreamCounter]] = [:]
        var failuresInARow = 0
        for r in 0..<maxRooms {
            let t0 = Date()
            var setupError: String?
            do {
                let subscribers = try await load.addRoom(scenario, shape, index: r)
                // Every stream of the new room must arrive at all its subscribers first...
                let silent = try await warmUp(Rig(groups: load.groups, setupSec: 0, teardown: {}), timeout: 20, settle: 0)
                if silent > 0 { throw BenchError("\(silent) subscriber streams received nothing within 20 s") }
                // ...then all but the probes stop reading.
                var now: [StreamCounter] = []
                for sub in subscribers.dropFirst(probesPerRoom) {
                    guard try await sub.dropIncomingRtp() else { throw BenchError("a subscriber has no UDP pair to mute") }
                    now += sub.counters
                    muted[sub.thread, default: []] += sub.counters
                }
                load.forget(now)
            } catch {
                setupError = "setting up room \(r + 1): \(error)"
            }
            let setupSec = Date().timeIntervalSince(t0)
            if let setupError {
                record.value.append(Step(server: server, kind: kind, rooms: r + 1, streams: 0, allStreams: 0, outPps: 0, serverCpuPercent: 0,
                                  serverMicrosPerOutPacket: 0, generatorCpuPercent: 0, lossPercent: 100, latencyP50Ms: 0,
                                  latencyP99Ms: 0, serverRssMB: s.rssMB(), serverDrops: nil, mutedLeaks: 0, setupSec: setupSec,
                                  passed: false, error: setupError))
                progress("capacity \(server) \(kind): \(setupError)")
                break
            }
            try await Task.sleep(for: .seconds(2))   // let what was queued before the filters drain
            let rig = Rig(groups: load.groups, setupSec: setupSec, teardown: {})
            for (thread, counters) in muted {
                try await load.groups[thread].perform { for c in counters { c.resetWindow() } }
            }
            var counter: (@Sendable () async -> UInt64?)?
            var drops: (@Sendable () async -> UInt64?)?
            if server == "minato" {
                counter = { @Sendable in await minatoCounter("minato_rtp_packets_forwarded_total") }
                drops = { @Sendable in await minatoCounterSum("minato_packets_dropped_total{") }
            }
            let drops0 = await drops?()
            let gen0 = ownCpuSeconds()
            let w = try await measureWindow(rig, server: s, duration: window, forwardedCounter: counter)
            let gen1 = ownCpuSeconds()
            let drops1 = await drops?()
            // Loss and latency come from the probes: `probesPerRoom` subscribers of each stream.
            var probed = scenario
            probed.rooms = r + 1
            probed.members = 1 + min(probesPerRoom, roomSubscribers)
            let result = makeResult(scenario: probed, server: server, window: w, shape: shape, setupSec: setupSec, srtp: "")
            var leaks: UInt64 = 0
            for (thread, counters) in muted {
                let box = Box<UInt64>(0)
                try await load.groups[thread].perform { for c in counters { box.value &+= c.snapshot().packets } }
                leaks &+= box.value
            }
            let all = (r + 1) * roomSubscribers * scenario.streamsPerPublisher
            let outPps = Double(w.sent) / w.durationSec * Double(roomSubscribers)
            let cpu = result.serverCpuPercent
            var error = result.error
            if leaks > 0 { error = (error.map { $0 + "; " } ?? "") + "\(leaks) packets reached muted subscribers" }
            let passed = error == nil && result.lossPercent < 1 && result.latencyP99Ms < 50
            var serverDrops: UInt64?
            if let drops0, let drops1 { serverDrops = drops1 &- drops0 }
            let step = Step(server: server, kind: kind, rooms: r + 1, streams: (r + 1) * roomSubscribers, allStreams: all,
                            outPps: outPps.rounded(), serverCpuPercent: cpu,
                            serverMicrosPerOutPacket: outPps > 0 ? (cpu / 100 * 1e6 / outPps * 100).rounded() / 100 : 0,
                            generatorCpuPercent: ((gen1 - gen0) / w.durationSec * 1000).rounded() / 10,
                            lossPercent: result.lossPercent, latencyP50Ms: result.latencyP50Ms, latencyP99Ms: result.latencyP99Ms,
                            serverRssMB: result.serverRssMB, serverDrops: serverDrops, mutedLeaks: leaks,
                            setupSec: (setupSec * 10).rounded() / 10, passed: passed, error: error)
            progress("capacity \(server) \(kind): \(step.rooms) rooms, \(step.streams) streams (\(all) in all), "
                + "\(Int(outPps)) pkt/s out, server CPU \(cpu)% (\(step.serverMicrosPerOutPacket) µs/pkt), generator CPU "
                + "\(step.generatorCpuPercent)%, loss \(step.lossPercent)%, p50 \(step.latencyP50Ms) ms p99 "
                + "\(step.latencyP99Ms) ms, RSS \(step.serverRssMB) MB, server drops \(serverDrops.map(String.init) ?? "-") "
                + (passed ? "PASS" : "FAIL") + (error.map { " [\($0)]" } ?? ""))
            record.value.append(step)
            try encodeSteps(record.value)
            failuresInARow = passed ? 0 : failuresInARow + 1
            if failuresInARow >= stopAfter { break }
        }
        await load.teardown()
    }

    func encodeSteps(_ steps: [Step]) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(steps).write(to: URL(fileURLWithPath: out))
    }

    /// The server pinned to `serverCpus`, with one media worker (Minato) and limits raised so
    /// that only CPU bounds the run: thousands of members and transports, a wide port range,
    /// no ICE-TCP listeners (nothing here uses them).
    func startCapacityServer() async throws -> ServerProcess {
        let log = "\(logDir)/capacity-\(server)-\(kind).log"
        if server == "minato" {
            let p = try ServerProcess(name: "minato", executable: "/usr/bin/taskset",
                                      arguments: ["-c", serverCpus, minatoBin, "serve"], environment: [
                "MINATO_LOG_LEVEL": "warning",
                "MINATO_MEDIA_WORKERS": "1",
                "MINATO_MEDIA_MAX_TRANSPORTS": "20000",
                "MINATO_MEDIA_ICE_PORT_MIN": "20000",
                "MINATO_MEDIA_ICE_PORT_MAX": "60000",
                "MINATO_MEDIA_ICE_TCP": "false",
                "MINATO_ROOMS_MAX_MEMBERS": "20000",
                "MINATO_ROOMS_MAX_MEMBERS_PER_ROOM": "1000",
                "MINATO_ROOMS_MAX_SUBSCRIBERS_CAP": "999",
                "MINATO_ROOMS_DEFAULT_MAX_SUBSCRIBERS": "999",
                "MINATO_ROOMS_MAX_MEMBERS_PER_CONNECTION": "10000",
                "MINATO_ROOMS_MAX_ROOMS_CREATED_PER_CONNECTION": "1000",
                "MINATO_SERVER_MAX_IN_FLIGHT_REQUESTS": "1024",
                // Every member has its own WebSocket, all from 127.0.0.1.
                "MINATO_SERVER_MAX_CONNECTIONS_PER_ADDRESS": "10000",
            ], logPath: log)
            try await p.waitReady(url: "http://127.0.0.1:7880/readyz")
            return p
        } else {
            let p = try ServerProcess(name: "janus", executable: "/usr/bin/taskset",
                                      arguments: ["-c", serverCpus, "/bin/bash", janusRun], logPath: log)
            try await p.waitReady(url: "http://127.0.0.1:8088/janus/info")
            return p
        }
    }
}

/// User + system CPU seconds of this process (the load generator).
func ownCpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}
