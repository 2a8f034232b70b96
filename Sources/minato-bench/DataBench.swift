import ArgumentParser
import Foundation
import MinatoClient
import MinatoTransport

/// `minato-bench data`: data fan-out through Minato (issue 27), on the Swift SDK's data API in
/// this process: one member publishes a reliable ordered `LocalDataStream`, `--subscribers`
/// members subscribe, each message carries its index and send time (one clock: everyone is in
/// this process). One phase per rate of `--rates`, each `--duration` s, until a phase in which a
/// subscriber got less than 99% of what was sent (a subscriber that cannot keep up is cut off
/// by the server, `dataBufferOverflow`, and the run ends there): per phase the messages a
/// second each subscriber got and the latency p50/p99. The capacity is the highest rate every
/// subscriber got whole. Prints and writes a JSON array of the phases.
struct DataRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "data", abstract: "Data-channel fan-out through Minato: latency and messages per second.")
    @Option(help: "Subscribers of the one data publication.") var subscribers = 10
    @Option(help: "Messages offered per second, one phase per rate, in order.") var rates = "1000,2000,4000,8000,16000"
    @Option(help: "Bytes per message (at least 12).") var size = 1024
    @Option(help: "Seconds per phase.") var duration = 5.0
    @Option(help: "Client worker threads the subscribers are spread over (the publisher has its own; on 2 cores more than one competes with the server).") var subscriberThreads = 1
    @Option(help: "The minato executable.") var minatoBin = ".build/release/minato"
    @Option(help: "Server logs go here.") var logDir = "artifacts/bench"
    @Option(help: "Where the JSON object goes.") var out: String

    struct Phase: Codable {
        var name: String
        var offeredPerSec: Double
        var sent: Int
        var waitsForBufferRoom: Int
        var receivedMin: Int
        var receivedMax: Int
        /// Messages a second each subscriber got (the slowest, the fastest).
        var perSubscriberPerSecMin: Double
        var perSubscriberPerSecMax: Double
        var latencyP50Ms: Double
        var latencyP99Ms: Double
        var outOfOrder: Int
        var serverCpuPercent: Double
        var serverRssMB: Double
    }

    func run() async throws {
        try FileManager.default.createDirectory(atPath: logDir, withIntermediateDirectories: true)
        let server = try ServerProcess(name: "minato", executable: minatoBin, arguments: ["serve"], environment: [
            "MINATO_LOG_LEVEL": "warning",
            "MINATO_ROOMS_DATA_MAX_MESSAGES_PER_SEC": "1000000",
            "MINATO_ROOMS_MAX_MEMBERS_PER_CONNECTION": "1000",
        ], logPath: "\(logDir)/minato-data.log")
        do {
            try await server.waitReady(url: "http://127.0.0.1:7880/readyz")
            let phases = try await measure(server)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(phases).write(to: URL(fileURLWithPath: out))
            for p in phases {
                progress("data 1->\(subscribers) \(p.name): sent \(Int(p.offeredPerSec))/s, each subscriber "
                    + "\(Int(p.perSubscriberPerSecMin))..\(Int(p.perSubscriberPerSecMax)) msg/s, latency p50 "
                    + "\(String(format: "%.2f", p.latencyP50Ms)) ms p99 \(String(format: "%.2f", p.latencyP99Ms)) ms, "
                    + "server CPU \(String(format: "%.1f", p.serverCpuPercent))%")
            }
            await server.stop()
        } catch {
            await server.stop()
            throw error
        }
    }

    /// One subscriber's tally.
    final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0, next = 0, outOfOrder = 0
        private var latencies: [UInt64] = []
        func add(index: Int, latency: UInt64) {
            lock.lock(); defer { lock.unlock() }
            count += 1
            if index != next { outOfOrder += 1 }
            next = index + 1
            latencies.append(latency)
        }
        /// Takes what was counted since the last call.
        func take() -> (count: Int, outOfOrder: Int, latencies: [UInt64]) {
            lock.lock(); defer { lock.unlock() }
            let r = (count, outOfOrder, latencies)
            count = 0; outOfOrder = 0; latencies.removeAll(keepingCapacity: true)
            return r
        }
    }

    func measure(_ server: ServerProcess) async throws -> [Phase] {
        let options = Context.Options(url: "ws://127.0.0.1:7880/ws")
        var contexts = [try await Context.setup(options)]
        for _ in 0..<max(1, subscriberThreads) { contexts.append(try await Context.setup(options)) }
        defer { for c in contexts { c.dispose() } }
        let room = try await SFURoom.create(contexts[0], name: "bench-data-\(UInt16.random(in: 0...UInt16.max))")
        var subscriberRooms: [SFURoom] = []
        for c in contexts.dropFirst() { subscriberRooms.append(try await SFURoom.find(c, id: room.id)) }
        let publisher = try await room.join(name: "pub", keepaliveIntervalSec: 60)
        let stream = LocalDataStream()
        let publication = try await publisher.publish(stream)
        var tallies: [Tally] = []
        var readers: [Task<Void, Never>] = []
        var members: [LocalSFURoomMember] = [publisher]
        for s in 0..<subscribers {
            let m = try await subscriberRooms[s % subscriberRooms.count].join(name: "sub\(s)", keepaliveIntervalSec: 60)
            members.append(m)
            let sub = try await m.subscribe(publicationId: publication.id)
            guard let messages = try await m.dataMessages(of: sub) else { throw ValidationError("no data stream") }
            let tally = Tally()
            tallies.append(tally)
            readers.append(Task {
                for await message in messages {
                    let now = monotonicNow()
                    guard case .binary(let b) = message, b.count >= 12 else { continue }
                    let index = b[0..<4].reduce(0) { $0 << 8 | Int($1) }
                    let sent = b[4..<12].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                    tally.add(index: index, latency: now >= sent ? now - sent : 0)
                }
            })
        }
        try await Task.sleep(for: .seconds(1))   // every subscriber's channel is open
        var index = 0
        var phases: [Phase] = []
        for offered in rates.split(separator: ",").compactMap({ Int($0) }) where offered > 0 {
            let name = "\(offered)/s"
            for t in tallies { _ = t.take() }
            let cpu0 = server.cpuSeconds()
            let start = monotonicNow()
            let end = start + UInt64(duration * 1e9)
            var sent = 0, waits = 0
            var message = [UInt8](repeating: 0, count: max(12, size))
            while monotonicNow() < end {
                let due = start + UInt64(sent) * 1_000_000_000 / UInt64(offered)
                let now = monotonicNow()
                if due > now { try await Task.sleep(for: .nanoseconds(Int(due - now))) }
                let i = index
                for k in 0..<4 { message[k] = UInt8(truncatingIfNeeded: i >> (24 - 8 * k)) }
                let t = monotonicNow()
                for k in 0..<8 { message[4 + k] = UInt8(truncatingIfNeeded: t >> (56 - 8 * UInt64(k))) }
                do {
                    try await stream.write(message)
                    sent += 1
                    index += 1
                } catch ClientError.dataBufferFull {
                    waits += 1
                    try await Task.sleep(for: .milliseconds(1))
                }
            }
            let elapsed = Double(monotonicNow() - start) / 1e9
            try await Task.sleep(for: .seconds(2))   // what is in flight arrives
            let cpu = server.cpuSeconds() - cpu0
            let taken = tallies.map { $0.take() }
            let all = taken.flatMap(\.latencies).sorted()
            let counts = taken.map(\.count)
            phases.append(Phase(name: name, offeredPerSec: Double(sent) / elapsed, sent: sent,
                                waitsForBufferRoom: waits, receivedMin: counts.min() ?? 0, receivedMax: counts.max() ?? 0,
                                perSubscriberPerSecMin: Double(counts.min() ?? 0) / elapsed,
                                perSubscriberPerSecMax: Double(counts.max() ?? 0) / elapsed,
                                latencyP50Ms: percentile(all, 0.5), latencyP99Ms: percentile(all, 0.99),
                                outOfOrder: taken.map(\.outOfOrder).reduce(0, +),
                                serverCpuPercent: 100 * cpu / (elapsed + 2), serverRssMB: server.rssMB()))
            if Double(counts.min() ?? 0) < 0.99 * Double(sent) { break }
        }
        for r in readers { r.cancel() }
        for m in members { try? await m.leave() }
        return phases
    }
}
