import Foundation
import MinatoClient

/// A synthetic source whose packet count the benchmark reads.
protocol CountingSource: RtpSource, Sendable {
    var packetsSent: UInt64 { get }
}
extension SyntheticVideoSource: CountingSource {}
extension SyntheticAudioSource: CountingSource {}

/// The sources and counters living on one client worker thread, and how to run code there.
struct WorkerGroup: Sendable {
    let perform: @Sendable (@escaping @Sendable () -> Void) async throws -> Void
    var sources: [any CountingSource] = []
    var counters: [StreamCounter] = []
}

extension WorkerGroup {
    func forgetting(_ gone: [StreamCounter]) -> WorkerGroup {
        let ids = Set(gone.map { ObjectIdentifier($0) })
        var g = self
        g.counters.removeAll { ids.contains(ObjectIdentifier($0)) }
        return g
    }
}

/// One subscribing member of a load: its counters, and how to make the kernel drop the RTP it
/// receives (`minato-bench capacity` mutes all but a few subscribers per room).
struct LoadSubscriber: Sendable {
    /// The client thread (worker group) the subscriber runs on: its counters are read there.
    var thread: Int
    var counters: [StreamCounter]
    var dropIncomingRtp: @Sendable () async throws -> Bool
}

/// A scenario set up against one server: its worker groups and how to tear it down.
struct Rig: Sendable {
    var groups: [WorkerGroup]
    var setupSec: Double
    var teardown: @Sendable () async -> Void
}

final class Box<T>: @unchecked Sendable {
    var value: T
    init(_ v: T) { value = v }
}

struct Window {
    var durationSec: Double
    var sent: UInt64
    var received: UInt64
    var cpuSeconds: Double
    var latenciesNs: [UInt64]
    var forwarded: UInt64?
    var rssMB: Double
    var subscribersWithoutPackets: Int
    /// Packets the server left out on purpose (forward-loudest-N).
    var leftOut: UInt64 = 0
}

/// Waits until every subscriber stream has delivered a packet (or `timeout`), then `settle`.
func warmUp(_ rig: Rig, timeout: Double = 30, settle: Double = 2) async throws -> Int {
    let deadline = Date().addingTimeInterval(timeout)
    var silent = 0
    repeat {
        silent = 0
        for g in rig.groups {
            let box = Box(0)
            try await g.perform { for c in g.counters where c.snapshot().packets == 0 { box.value += 1 } }
            silent += box.value
        }
        if silent == 0 { break }
        try await Task.sleep(for: .milliseconds(250))
    } while Date() < deadline
    try await Task.sleep(for: .seconds(settle))
    return silent
}

/// Measures one window: resets every counter, reads the server's CPU and (optionally) its
/// forwarded-packet counter, waits `duration`, reads everything again.
func measureWindow(_ rig: Rig, server: ServerProcess, duration: Double,
                   forwardedCounter: (@Sendable () async -> UInt64?)?,
                   leftOutCounter: (@Sendable () async -> UInt64?)? = nil) async throws -> Window {
    func sentTotal() async throws -> UInt64 {
        var total: UInt64 = 0
        for g in rig.groups {
            let box = Box<UInt64>(0)
            try await g.perform { for s in g.sources { box.value &+= s.packetsSent } }
            total &+= box.value
        }
        return total
    }
    let forwarded0 = await forwardedCounter?()
    let leftOut0 = await leftOutCounter?() ?? 0
    for g in rig.groups { try await g.perform { for c in g.counters { c.resetWindow() } } }
    let sent0 = try await sentTotal()
    let cpu0 = server.cpuSeconds()
    let t0 = Date()
    try await Task.sleep(for: .seconds(duration))
    let cpu1 = server.cpuSeconds()
    let sent1 = try await sentTotal()
    var received: UInt64 = 0
    var latencies: [UInt64] = []
    var silent = 0
    for g in rig.groups {
        let box = Box<(UInt64, [UInt64], Int)>((0, [], 0))
        try await g.perform {
            for c in g.counters {
                let s = c.snapshot()
                box.value.0 &+= s.packets
                box.value.1 += s.latenciesNs
                if s.packets == 0 { box.value.2 += 1 }
            }
        }
        received &+= box.value.0
        latencies += box.value.1
        silent += box.value.2
    }
    let elapsed = Date().timeIntervalSince(t0)
    let forwarded1 = await forwardedCounter?()
    let leftOut1 = await leftOutCounter?() ?? 0
    var forwarded: UInt64?
    if let forwarded0, let forwarded1 { forwarded = forwarded1 &- forwarded0 }
    return Window(durationSec: elapsed, sent: sent1 &- sent0, received: received, cpuSeconds: cpu1 - cpu0,
                  latenciesNs: latencies, forwarded: forwarded, rssMB: server.rssMB(), subscribersWithoutPackets: silent,
                  leftOut: leftOut1 &- leftOut0)
}

func percentile(_ sorted: [UInt64], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    let i = min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))
    return Double(sorted[i]) / 1e6
}

func makeResult(scenario: Scenario, server: String, window w: Window, shape: LoadShape, setupSec: Double,
                srtp: String) -> BenchResult {
    // Packets forward-loudest-N left out on purpose are not lost.
    let expected = Double(w.sent) * Double(scenario.fanOut) - Double(w.leftOut)
    let loss = expected > 0 ? max(0, (expected - Double(w.received)) / expected * 100) : 0
    let forwarded = w.forwarded ?? w.received
    let sorted = w.latenciesNs.sorted()
    return BenchResult(
        scenario: scenario.name, server: server, rooms: scenario.rooms,
        publishers: scenario.rooms * scenario.publishers, subscribers: scenario.rooms * scenario.subscribers,
        durationSec: (w.durationSec * 100).rounded() / 100,
        packetsSent: w.sent, packetsForwarded: forwarded, packetsReceived: w.received,
        lossPercent: (loss * 1000).rounded() / 1000,
        forwardedPps: (Double(forwarded) / w.durationSec).rounded(),
        cpuMicrosPerForwardedPacket: forwarded > 0 ? ((w.cpuSeconds * 1e6 / Double(forwarded)) * 100).rounded() / 100 : 0,
        latencyP50Ms: (percentile(sorted, 0.5) * 1000).rounded() / 1000,
        latencyP99Ms: (percentile(sorted, 0.99) * 1000).rounded() / 1000,
        serverRssMB: (w.rssMB * 10).rounded() / 10,
        serverCpuPercent: (w.cpuSeconds / w.durationSec * 1000).rounded() / 10,
        forwardedSource: w.forwarded != nil ? "server counter" : "packets received by subscribers",
        latencySamples: sorted.count, srtpProfile: srtp, videoBitrate: shape.videoBitrate,
        setupSec: (setupSec * 10).rounded() / 10,
        leftOut: w.leftOut,
        error: w.subscribersWithoutPackets > 0 && scenario.forwardLoudest == 0 ? "\(w.subscribersWithoutPackets) subscriber streams received nothing in the window" : nil)
}
