import ArgumentParser
import Foundation
import MinatoClient

/// `minato-bench`: RTP throughput of Minato and Janus under the same load.
@main
struct MinatoBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "minato-bench",
        abstract: "RTP load generator: R rooms x P publishers x S subscribers against Minato or Janus.",
        discussion: "Run it inside a loopback-only network namespace (bench/run.sh does), one server per namespace.",
        subcommands: [Run.self, Report.self, DataRun.self, CapacityRun.self, CascadeRun.self])
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Start a server, drive scenarios against it, write one JSON array.")

    @Option(help: "minato or janus.") var server: String
    @Option(help: "Comma-separated scenarios from: \(Scenario.matrix.map(\.name).joined(separator: ", ")), or 'custom'.")
    var scenarios = "fanout-1-10"
    @Option(help: "Rooms for 'custom'.") var rooms = 1
    @Option(help: "Publishers per room for 'custom'.") var publishers = 1
    @Option(help: "Subscribers per room for 'custom' (each subscribes to every publication).") var subscribers = 10
    @Option(help: "Measuring window per scenario, seconds.") var duration = 20.0
    @Option(help: "Video bitrate per publisher, bit/s (default: the scenario's, 4 Mbit/s; 1 Mbit/s in all-to-all-10).")
    var videoBitrate: Int?
    @Option(help: "Video frames per second.") var fps = 30
    @Option(help: "Video packet size in bytes (RTP header included).") var packetSize = 1200
    @Option(help: "Audio packet size in bytes (RTP header included).") var audioPacketSize = 100
    @Option(help: "The minato executable.") var minatoBin = ".build/release/minato"
    @Option(help: "The script that runs Janus in the foreground.") var janusRun = "scripts/janus-run.sh"
    @Option(help: "Where the JSON array goes.") var out: String
    @Option(help: "Server logs go here.") var logDir = "artifacts/bench"
    @Option(help: "Fail (exit 1) if a scenario errs, receives nothing, or loses more than this percent.")
    var maxLoss: Double?

    func run() async throws {
        var list: [Scenario] = []
        for name in scenarios.split(separator: ",").map(String.init) {
            if name == "custom" {
                list.append(Scenario(name: "custom-\(rooms)x\(publishers)x\(subscribers)", rooms: rooms,
                                     members: publishers + subscribers, publishers: publishers, allToAll: false,
                                     video: true, audio: false, videoBitrate: videoBitrate ?? 4_000_000))
            } else if let s = Scenario.named(name) {
                list.append(s)
            } else {
                throw ValidationError("unknown scenario '\(name)'; known: \(Scenario.matrix.map(\.name).joined(separator: ", ")), custom")
            }
        }
        guard server == "minato" || server == "janus" else { throw ValidationError("--server must be minato or janus") }
        try FileManager.default.createDirectory(atPath: logDir, withIntermediateDirectories: true)
        var results: [BenchResult] = []
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        for scenario in list {
            if server == "janus", scenario.forwardLoudest > 0 {
                progress("\(scenario.name): Minato only (Janus forwards every speaker)")
                continue
            }
            let shape = LoadShape(videoBitrate: videoBitrate ?? scenario.videoBitrate, fps: fps, packetSize: packetSize,
                                  audioPacketSize: audioPacketSize)
            progress("\(scenario.name) on \(server): starting")
            let result = await withDeadline(seconds: duration + 150, scenario: scenario, shape: shape) {
                await runOne(scenario, shape)
            }
            progress(summaryLine(result))
            results.append(result)
            try encoder.encode(results).write(to: URL(fileURLWithPath: out))   // after each scenario
        }
        if let maxLoss {
            let bad = results.filter { $0.error != nil || $0.packetsReceived == 0 || $0.lossPercent > maxLoss }
            if !bad.isEmpty {
                for b in bad { print("FAILED \(b.scenario) on \(b.server): \(b.error ?? "loss \(b.lossPercent)% or nothing received")") }
                throw ExitCode(1)
            }
        }
    }

    func startServer(_ scenario: Scenario) async throws -> ServerProcess {
        let log = "\(logDir)/\(server)-\(scenario.name).log"
        if server == "minato" {
            let p = try ServerProcess(name: "minato", executable: minatoBin, arguments: ["serve"], environment: [
                "MINATO_LOG_LEVEL": "warning",
                "MINATO_ROOMS_MAX_MEMBERS_PER_ROOM": "200",
                "MINATO_ROOMS_MAX_SUBSCRIPTIONS_PER_MEMBER": "256",
                "MINATO_ROOMS_DEFAULT_MAX_SUBSCRIBERS": "200",
                "MINATO_ROOMS_MAX_SUBSCRIBERS_CAP": "200",
                // The generator joins every member over two connections, many requests at once.
                "MINATO_ROOMS_MAX_MEMBERS_PER_CONNECTION": "1000",
                "MINATO_ROOMS_MAX_ROOMS_CREATED_PER_CONNECTION": "1000",
                "MINATO_SERVER_MAX_IN_FLIGHT_REQUESTS": "1024",
                "MINATO_ROOMS_AUDIO_FORWARD_LOUDEST": String(scenario.forwardLoudest),
            ], logPath: log)
            try await p.waitReady(url: "http://127.0.0.1:7880/readyz")
            return p
        } else {
            let p = try ServerProcess(name: "janus", executable: "/bin/bash", arguments: [janusRun], logPath: log)
            try await p.waitReady(url: "http://127.0.0.1:8088/janus/info")
            return p
        }
    }

    /// Runs `body`, or gives up after `seconds` with an error result (a hung setup must not
    /// hang the whole benchmark); the server of a timed-out scenario is killed by `runOne`'s
    /// caller through the process group at exit.
    func withDeadline(seconds: Double, scenario: Scenario, shape: LoadShape,
                      _ body: @escaping @Sendable () async -> BenchResult) async -> BenchResult {
        await withTaskGroup(of: BenchResult?.self) { group in
            group.addTask { await body() }
            group.addTask { try? await Task.sleep(for: .seconds(seconds)); return nil }
            let first = await group.next() ?? nil
            if let first { group.cancelAll(); return first }
            await runningServer.take()?.stop()   // the hung scenario's server must not block the next
            return failed(scenario, shape, "timed out after \(Int(seconds)) s (see the server log)")
        }
    }

    func failed(_ scenario: Scenario, _ shape: LoadShape, _ error: String) -> BenchResult {
        BenchResult(scenario: scenario.name, server: server, rooms: scenario.rooms, publishers: scenario.publishers,
                    subscribers: scenario.subscribers, durationSec: 0, packetsSent: 0, packetsForwarded: 0,
                    packetsReceived: 0, lossPercent: 100, forwardedPps: 0, cpuMicrosPerForwardedPacket: 0,
                    latencyP50Ms: 0, latencyP99Ms: 0, serverRssMB: 0, serverCpuPercent: 0, forwardedSource: "",
                    latencySamples: 0, srtpProfile: "", videoBitrate: shape.videoBitrate, setupSec: 0, error: error)
    }

    func runOne(_ scenario: Scenario, _ shape: LoadShape) async -> BenchResult {
        var server: ServerProcess?
        var rig: Rig?
        do {
            let s = try await startServer(scenario)
            server = s
            runningServer.set(s)
            let r: Rig
            if self.server == "minato" {
                r = try await setUpMinato(scenario, shape, url: "ws://127.0.0.1:7880/ws")
            } else {
                r = try await setUpJanus(scenario, shape)
            }
            rig = r
            progress("\(scenario.name) on \(self.server): set up in \(String(format: "%.1f", r.setupSec)) s; warming up")
            // With forward-loudest-N some streams never deliver: do not wait for them.
            _ = try await warmUp(r, timeout: scenario.forwardLoudest > 0 ? 5 : 30)
            progress("\(scenario.name) on \(self.server): measuring \(Int(duration)) s")
            var counter: (@Sendable () async -> UInt64?)?
            var left: (@Sendable () async -> UInt64?)?
            if self.server == "minato" {
                counter = { @Sendable in await minatoCounter("minato_rtp_packets_forwarded_total") }
                left = { @Sendable in await minatoCounter("minato_packets_dropped_total{reason=\"not_loudest\"}") }
            }
            let window = try await measureWindow(r, server: s, duration: duration, forwardedCounter: counter, leftOutCounter: left)
            let result = makeResult(scenario: scenario, server: self.server, window: window, shape: shape,
                                    setupSec: r.setupSec,
                                    srtp: scenario.srtpProfiles.map { "\($0) (the only ones offered)" }
                                        ?? "AEAD_AES_128_GCM (offered first; no AES-256-GCM)")
            progress("\(scenario.name) on \(self.server): tearing down")
            await r.teardown()
            await s.stop()
            return result
        } catch {
            if let rig { await rig.teardown() }
            if let server { await server.stop() }
            return failed(scenario, shape, "\(error)")
        }
    }
}

/// The server of the scenario in progress (so a timed-out scenario's server can be stopped).
final class ServerSlot: @unchecked Sendable {
    private let lock = NSLock()
    private var server: ServerProcess?
    func set(_ s: ServerProcess) { lock.lock(); server = s; lock.unlock() }
    func take() -> ServerProcess? { lock.lock(); defer { server = nil; lock.unlock() }; return server }
}
let runningServer = ServerSlot()

/// A progress line on stderr (unbuffered, so a run can be followed live).
func progress(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// A counter from Minato's /metrics (`name` with its labels as the line starts), nil when absent.
func minatoCounter(_ name: String) async -> UInt64? {
    await minatoMetricSum(absentIsZero: false) { $0 == name }
}

/// The sum of every line of Minato's /metrics starting with `prefix` (a counter over its labels;
/// 0 while none of its series exists yet).
func minatoCounterSum(_ prefix: String) async -> UInt64? {
    await minatoMetricSum(absentIsZero: true) { $0.hasPrefix(prefix) }
}

/// Sums the values of the /metrics lines whose series (name and labels) `matches`; nil when
/// /metrics did not answer, and when no line matched unless `absentIsZero`.
func minatoMetricSum(absentIsZero: Bool, _ matches: (Substring) -> Bool) async -> UInt64? {
    guard let (status, data) = try? await httpRequest("http://127.0.0.1:7880/metrics", method: "GET", body: nil),
          status == 200 else { return nil }
    var total: UInt64? = absentIsZero ? 0 : nil
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
        let parts = line.split(separator: " ")
        guard parts.count == 2, matches(parts[0]), let v = Double(parts[1]), v >= 0, v < 1.8e19 else { continue }
        total = (total ?? 0) &+ UInt64(v)
    }
    return total
}

func summaryLine(_ r: BenchResult) -> String {
    if let e = r.error, r.packetsReceived == 0 { return "\(r.scenario) \(r.server): ERROR \(e)" }
    return "\(r.scenario) \(r.server): sent \(r.packetsSent) fwd \(r.packetsForwarded) recv \(r.packetsReceived) "
        + "loss \(r.lossPercent)% \(Int(r.forwardedPps)) pps, \(r.cpuMicrosPerForwardedPacket) us CPU/pkt "
        + "(\(r.serverCpuPercent)% CPU), latency p50 \(r.latencyP50Ms) ms p99 \(r.latencyP99Ms) ms, RSS \(r.serverRssMB) MB"
        + (r.error.map { " [\($0)]" } ?? "")
}

struct Report: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Merge run outputs into <name>.json and a markdown table <name>.md.")
    @Option(help: "Result name (bench/results/<name>.json).") var name: String
    @Option(help: "Output directory.") var outDir = "results"
    @Argument(help: "JSON arrays written by `run`.") var inputs: [String]

    func run() async throws {
        var all: [BenchResult] = []
        for i in inputs { all += try JSONDecoder().decode([BenchResult].self, from: Data(contentsOf: URL(fileURLWithPath: i))) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: true)
        try encoder.encode(all).write(to: URL(fileURLWithPath: "\(outDir)/\(name).json"))
        let md = markdown(all)
        try md.write(toFile: "\(outDir)/\(name).md", atomically: true, encoding: .utf8)
        print(md)
    }
}

func markdown(_ all: [BenchResult]) -> String {
    func f(_ v: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", v) }
    var lines = [
        "| scenario | server | pubs | subs | sent | forwarded | received | loss % | fwd pps | CPU µs/fwd pkt | server CPU % | p50 ms | p99 ms | RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in all {
        lines.append("| \(r.scenario) | \(r.server) | \(r.publishers) | \(r.subscribers) | \(r.packetsSent) | \(r.packetsForwarded) | "
            + "\(r.packetsReceived) | \(f(r.lossPercent, 3)) | \(Int(r.forwardedPps)) | \(f(r.cpuMicrosPerForwardedPacket)) | "
            + "\(f(r.serverCpuPercent, 1)) | \(f(r.latencyP50Ms, 3)) | \(f(r.latencyP99Ms, 3)) | \(f(r.serverRssMB, 1)) |"
            + (r.error.map { " ⚠ \($0)" } ?? ""))
    }
    var ratios: [String] = []
    for scenario in Array(Set(all.map(\.scenario))).sorted() {
        guard let m = all.first(where: { $0.scenario == scenario && $0.server == "minato" }),
              let j = all.first(where: { $0.scenario == scenario && $0.server == "janus" }),
              m.cpuMicrosPerForwardedPacket > 0, j.cpuMicrosPerForwardedPacket > 0 else { continue }
        ratios.append("- \(scenario): Janus uses \(f(j.cpuMicrosPerForwardedPacket / m.cpuMicrosPerForwardedPacket))× Minato's CPU per forwarded packet")
    }
    if let a = all.first(where: { $0.scenario == "audio-50" && $0.server == "minato" }),
       let l = all.first(where: { $0.scenario == "audio-50-loudest-3" && $0.server == "minato" }),
       a.forwardedPps > 0, a.serverCpuPercent > 0 {
        ratios.append("- audio-50, 5 speaking, with rooms.audio.forwardLoudest 3: \(Int(l.forwardedPps)) instead of "
            + "\(Int(a.forwardedPps)) packets/s out (\(f(100 * (1 - l.forwardedPps / a.forwardedPps), 0))% less egress), server CPU "
            + "\(f(l.serverCpuPercent, 1))% instead of \(f(a.serverCpuPercent, 1))% (\(f(100 * (1 - l.serverCpuPercent / a.serverCpuPercent), 0))% less)")
    }
    if !ratios.isEmpty { lines += [""] + ratios }
    return lines.joined(separator: "\n") + "\n"
}
