import ArgumentParser
import Foundation
@_spi(Benchmark) import MinatoClient

/// `minato-bench cascade` (issue 29, run by bench/cascade.py inside the cluster harness): one
/// room, one synthetic video publisher joined through the first `--url`, and
/// `--subscribers-per-node` subscribers joined through each `--url`. The first
/// `--probes-per-node` subscribers of each node read every packet (loss, and latency from the
/// publisher's send stamp to receipt, both in this process); the others are muted by a socket
/// filter once they received (they keep ICE consent and RTCP, so the server keeps sending).
/// Prints `{"ready": …}` once everything flows, measures `--window` seconds (the caller reads
/// the nodes' CPU and traffic over the same time) and writes one JSON object to `--out`. Before
/// the muting, one member per node subscribes `--key-frame-samples` times again (unsubscribe,
/// subscribe: its connection is up, so subscribe → first packet is the wait for a keyframe,
/// which a consumer starts from).
struct CascadeRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cascade", abstract: "One publisher, subscribers through every node of a cluster; loss, latency and keyframe time per node.")

    @Option(help: "A node's WebSocket URL; repeat it for each node. The room is made and the publisher joins through the first.")
    var url: [String]
    @Option(help: "The local address for ICE candidates (the harness's client address).") var iceAddress = "127.0.0.1"
    @Option(help: "Subscribers joined through each node.") var subscribersPerNode = 100
    @Option(help: "Subscribers per node that read every packet.") var probesPerNode = 3
    @Option(help: "Video bitrate, bit/s.") var videoBitrate = 500_000
    @Option(help: "Measuring window, seconds.") var window = 10.0
    @Option(help: "Late subscriptions timed per node.") var keyFrameSamples = 5
    @Option(help: "Where the JSON result goes.") var out: String

    struct NodeResult: Codable {
        var url: String
        var subscribers: Int
        var probes: Int
        var lossPercent: Double
        var latencyP50Ms: Double
        var latencyP99Ms: Double
        var keyFrameMs: [Double]
    }

    struct Result: Codable {
        var publisherPacketsPerSec: Double
        var windowSec: Double
        var setupSec: Double
        var nodes: [NodeResult]
    }

    /// One line on stdout at once (the harness waits for it).
    func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    func options(_ u: String, quiet: Bool) -> Context.Options {
        var o = Context.Options(urls: [u], srtpProfiles: benchSrtpProfiles, iceLocalAddresses: [iceAddress], rejoin: false)
        o.recover = false
        if quiet { o.mediaIterationMicros = 20_000 }
        return o
    }

    func run() async throws {
        guard !url.isEmpty else { throw ValidationError("give at least one --url") }
        let t0 = Date()
        let publisherContext = try await Context.setup(options(url[0], quiet: false))
        var probeContexts: [Context] = [], quietContexts: [Context] = []
        for u in url {
            probeContexts.append(try await Context.setup(options(u, quiet: false)))
            quietContexts.append(try await Context.setup(options(u, quiet: true)))
        }
        let room = try await SFURoom.create(publisherContext, name: "cascade-bench-\(UInt16.random(in: 0...UInt16.max))")
        let publisher = try await room.join(name: "publisher", keepaliveIntervalSec: 60)
        let source = SyntheticVideoSource(bitrate: videoBitrate, fps: 30, packetSize: 1200)
        let publication = try await publish(publisher, source)
        progress("cascade: room \(room.id), publication \(publication.id)")

        struct Sub: Sendable { let node: Int; let probe: Bool; let member: LocalSFURoomMember; let counter: StreamCounter }
        var subs: [Sub] = []
        for (k, _) in url.enumerated() {
            let probeView = try await SFURoom.find(probeContexts[k], id: room.id)
            let quietView = try await SFURoom.find(quietContexts[k], id: room.id)
            var i = 0
            while i < subscribersPerNode {
                let batch = i..<min(i + 10, subscribersPerNode)
                let made = try await withThrowingTaskGroup(of: Sub.self) { group in
                    for j in batch {
                        let probe = j < probesPerNode
                        let view = probe ? probeView : quietView
                        group.addTask {
                            let m = try await view.join(name: "n\(k)-s\(j)", keepaliveIntervalSec: 60)
                            let c = counter(for: "video", latencyCapacity: 8192)
                            _ = try await m.subscribe(publicationId: publication.id, sink: c)
                            return Sub(node: k, probe: probe, member: m, counter: c)
                        }
                    }
                    var out: [Sub] = []
                    for try await s in group { out.append(s) }
                    return out
                }
                subs += made
                i = batch.upperBound
            }
            progress("cascade: \(subscribersPerNode) subscribers through \(url[k])")
        }

        func contextOf(_ s: Sub) -> Context { s.probe ? probeContexts[s.node] : quietContexts[s.node] }
        func packets(_ s: Sub) async throws -> UInt64 {
            let box = Box<UInt64>(0)
            try await contextOf(s).perform { box.value = s.counter.snapshot().packets }
            return box.value
        }
        // Every subscriber receives, then all but the probes are muted.
        let deadline = Date().addingTimeInterval(60)
        var silent = subs
        while !silent.isEmpty, Date() < deadline {
            var still: [Sub] = []
            for s in silent where try await packets(s) == 0 { still.append(s) }
            silent = still
            if !silent.isEmpty { try await Task.sleep(for: .milliseconds(250)) }
        }
        guard silent.isEmpty else { throw BenchError("\(silent.count) subscribers received nothing within 60 s") }
        let setupSec = Date().timeIntervalSince(t0)
        progress("cascade: every subscriber receives, after \(Int(setupSec)) s; keyframe samples")
        // Keyframe time: one member per node with its receiving connection up; each sample
        // unsubscribes and subscribes again, so only the keyframe is waited for (not ICE and
        // DTLS). Before the muting (a muted client sees no media and asks for keyframes).
        var keyFrameMs = [[Double]](repeating: [], count: url.count)
        for (k, _) in url.enumerated() {
            let view = try await SFURoom.find(probeContexts[k], id: room.id)
            let m = try await view.join(name: "late-n\(k)", keepaliveIntervalSec: 60)
            var subscription: RoomSubscription?
            for n in 0...keyFrameSamples {
                if let s = subscription { try await m.unsubscribe(subscriptionId: s.id) }
                // Keyframe requests to one publication are at most one per 500 ms.
                try await Task.sleep(for: .milliseconds(700))
                let c = counter(for: "video", latencyCapacity: 16)
                let start = ContinuousClock.now
                subscription = try await m.subscribe(publicationId: publication.id, sink: c)
                while ContinuousClock.now - start < .seconds(10) {
                    let box = Box<UInt64>(0)
                    try await probeContexts[k].perform { box.value = c.snapshot().packets }
                    if box.value > 0 { break }
                    try await Task.sleep(for: .milliseconds(2))
                }
                let d = ContinuousClock.now - start
                let ms = Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
                // The first sample includes the receiving connection's ICE and DTLS: not kept.
                if n > 0 { keyFrameMs[k].append((ms * 10).rounded() / 10) }
            }
            try? await m.leave()
        }
        for s in subs where !s.probe {
            guard try await s.member.dropIncomingRtpInKernel() else { throw BenchError("a subscriber has no UDP pair to mute") }
        }
        try await Task.sleep(for: .seconds(2))
        say("{\"ready\": true, \"subscribers\": \(subs.count)}")

        // The window: probes only.
        let probes = subs.filter(\.probe)
        for s in probes { try await contextOf(s).perform { s.counter.resetWindow() } }
        let sent0 = source.packetsSent
        let w0 = Date()
        try await Task.sleep(for: .seconds(window))
        let sent = source.packetsSent &- sent0
        let elapsed = Date().timeIntervalSince(w0)
        var nodes: [NodeResult] = []
        for (k, u) in url.enumerated() {
            var received: UInt64 = 0
            var latencies: [UInt64] = []
            for s in probes where s.node == k {
                let box = Box<(UInt64, [UInt64])>((0, []))
                try await contextOf(s).perform {
                    let snap = s.counter.snapshot()
                    box.value = (snap.packets, snap.latenciesNs)
                }
                received &+= box.value.0
                latencies += box.value.1
            }
            latencies.sort()
            let expected = Double(sent) * Double(probes.filter { $0.node == k }.count)
            let loss = expected > 0 ? max(0, 1 - Double(received) / expected) * 100 : 100
            nodes.append(NodeResult(url: u, subscribers: subscribersPerNode, probes: probes.filter { $0.node == k }.count,
                                    lossPercent: (loss * 1000).rounded() / 1000,
                                    latencyP50Ms: (percentile(latencies, 0.5) * 100).rounded() / 100,
                                    latencyP99Ms: (percentile(latencies, 0.99) * 100).rounded() / 100, keyFrameMs: keyFrameMs[k]))
        }
        say("{\"measured\": true}")

        let result = Result(publisherPacketsPerSec: (Double(sent) / elapsed).rounded(), windowSec: (elapsed * 100).rounded() / 100,
                            setupSec: (setupSec * 10).rounded() / 10, nodes: nodes)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(result).write(to: URL(fileURLWithPath: out))
        progress("cascade: " + nodes.map { "\($0.url): loss \($0.lossPercent)% p50 \($0.latencyP50Ms) ms p99 \($0.latencyP99Ms) ms keyframe \($0.keyFrameMs) ms" }
            .joined(separator: "; "))
        // No leaves: the contexts go, and the harness stops the nodes.
        for c in [publisherContext] + probeContexts + quietContexts { c.dispose() }
    }
}
