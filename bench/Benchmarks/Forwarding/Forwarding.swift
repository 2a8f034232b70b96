import Benchmark
import MinatoMedia
import MinatoWire
import MinatoTransport

/// The packet path's cost and, above all, its allocations: every benchmark here must make
/// 0 mallocs per packet (thresholds below; `swift package benchmark` fails when one is exceeded).
let benchmarks: @Sendable () -> Void = {
    let zeroMallocs: [BenchmarkMetric: BenchmarkThresholds] = [
        .mallocCountTotal: .init(absolute: [.p0: 0, .p25: 0, .p50: 0, .p75: 0, .p90: 0, .p99: 0, .p100: 0]),
    ]
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .throughput],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(3),
        maxIterations: 10_000,
        thresholds: zeroMallocs)

    // A 1200-byte VP8 packet with a one-byte header-extension block (abs-send-time, mid).
    let packet: UnsafeMutableRawBufferPointer = {
        let b = UnsafeMutableRawBufferPointer.allocate(byteCount: 1200, alignment: 16)
        b.initializeMemory(as: UInt8.self, repeating: 0)
        _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: 1, timestamp: 90_000, ssrc: 0x1111)
        b[0] |= 0x10                                  // X bit
        let ext: [UInt8] = [0xBE, 0xDE, 0x00, 0x02, 0x32, 0x12, 0x34, 0x56, 0x10, 0x30, 0x00, 0x00]
        for (i, v) in ext.enumerated() { b[12 + i] = v }
        b[24] = 0x10                                  // VP8 descriptor S=1
        b[25] = 0x00                                  // keyframe
        return b
    }()

    Benchmark("RTP view parse + header-extension lookup (per packet)") { benchmark in
        var sink = 0
        for _ in benchmark.scaledIterations {
            guard let v = RtpPacketView(packet) else { continue }
            sink &+= Int(v.ssrc) &+ Int(v.sequenceNumber) &+ v.payloadLength &+ (v.extensionValue(id: 3)?.count ?? 0)
        }
        blackHole(sink)
    }

    for fanOut in [1, 10, 50] {
        Benchmark("Router fan-out 1->\(fanOut), 1200 B, null transport (per received packet)") { benchmark in
            let engine = MediaEngine()
            let publisher = engine.addTransport(router: RouterId(1), feedbackSsrc: 1)
            let producer = try! engine.addProducer(ProducerParameters(
                transport: publisher, kind: .video, ssrc: 0x1111, payloadType: 96, clockRate: 90_000, codec: .vp8,
                keyFrameRequest: .pli))
            var ids = ExtensionIdMap()
            ids[3] = 2
            for i in 0..<fanOut {
                let t = engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(100 + i))
                _ = try! engine.addConsumer(ConsumerParameters(producer: producer, transport: t, ssrc: UInt32(0x2000 + i),
                                                               payloadType: 100, extensionIds: ids), now: 1)
            }
            engine.clearTransmits()
            var now: UInt64 = 1_000_000_000
            var seq: UInt16 = 1
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                seq &+= 1
                now &+= 1_000
                packet.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                engine.handleRtp(from: publisher, packet: packet, now: now)
                blackHole(engine.transmitCount)
                engine.clearTransmits()
            }
            benchmark.stopMeasurement()
        }
    }

    // The whole per-subscriber send work short of the syscall: the engine's copy and header
    // rewrite for each of 10 consumers, then srtp_protect (AEAD_AES_128_GCM, Debian libsrtp2)
    // in place in the engine's outbox, as WorkerCore.flush does. Debian's NSS-backed libsrtp2
    // mallocs 5 times per srtp_protect (bench/malloc-allowances.txt); Minato's part allocates nothing.
    Benchmark("Router fan-out 1->10 + header rewrite + srtp_protect GCM, 1200 B (per received packet)",
              configuration: .init(thresholds: [.mallocCountTotal: .init(absolute: [.p50: 50, .p100: 50])])) { benchmark in
        _ = try! CryptoRuntime()   // srtp_init
        let key = [UInt8](repeating: 0x5A, count: 28)
        let fanOut = 10
        let sessions = (0..<fanOut).map { _ in
            try! SrtpSession(profile: .aeadAes128Gcm, localKeyAndSalt: key, remoteKeyAndSalt: key)
        }
        let engine = MediaEngine()
        let publisher = engine.addTransport(router: RouterId(1), feedbackSsrc: 1)
        let producer = try! engine.addProducer(ProducerParameters(
            transport: publisher, kind: .video, ssrc: 0x1111, payloadType: 96, clockRate: 90_000, codec: .vp8,
            keyFrameRequest: .pli))
        var sessionOf: [Int] = []
        for i in 0..<fanOut {
            let t = engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(100 + i))
            while sessionOf.count <= Int(t.slot) { sessionOf.append(0) }
            sessionOf[Int(t.slot)] = i
            _ = try! engine.addConsumer(ConsumerParameters(producer: producer, transport: t, ssrc: UInt32(0x2000 + i),
                                                           payloadType: 100, extensionIds: .identity), now: 1)
        }
        engine.clearTransmits()
        var now: UInt64 = 1_000_000_000
        var seq: UInt16 = 1
        var protected = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            seq &+= 1
            now &+= 1_000
            packet.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
            engine.handleRtp(from: publisher, packet: packet, now: now)
            for i in 0..<engine.transmitCount {
                let tx = engine.transmit(at: i)
                if let n = sessions[sessionOf[Int(tx.transport.slot)]].protectRtp(tx.bytes, length: tx.length) {
                    protected &+= n
                }
            }
            engine.clearTransmits()
        }
        benchmark.stopMeasurement()
        blackHole(protected)
    }

    lossRecoveryBenchmarks(packet)
    workerBenchmarks()
}

/// Loss recovery on the packet path: packets stored once and resent as RTX on a subscriber's
/// NACK; a publisher's gap NACKed and its RTX restored and forwarded. No allocation either.
let lossRecoveryBenchmarks: @Sendable (UnsafeMutableRawBufferPointer) -> Void = { packet in
    func engineWithRtx(fanOut: Int) -> (MediaEngine, TransportIndex, [TransportIndex]) {
        let engine = MediaEngine()
        let publisher = engine.addTransport(router: RouterId(1), feedbackSsrc: 1)
        let producer = try! engine.addProducer(ProducerParameters(
            transport: publisher, kind: .video, ssrc: 0x1111, rtxSsrc: 0x1112, payloadType: 96, clockRate: 90_000,
            codec: .vp8, keyFrameRequest: .pli, rtxPayloadType: 97, nack: true))
        var subscribers: [TransportIndex] = []
        for i in 0..<fanOut {
            let t = engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(100 + i))
            subscribers.append(t)
            _ = try! engine.addConsumer(ConsumerParameters(producer: producer, transport: t, ssrc: UInt32(0x2000 + i),
                                                           payloadType: 100, extensionIds: .identity,
                                                           rtxSsrc: UInt32(0x3000 + i), rtxPayloadType: 101), now: 1)
        }
        engine.clearTransmits()
        return (engine, publisher, subscribers)
    }

    Benchmark("Retransmission: forward 17 packets 1->1, then a NACK for all 17 answered as RTX (per iteration)") { benchmark in
        let (engine, publisher, subscribers) = engineWithRtx(fanOut: 1)
        let nack = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 4)
        let sequences = UnsafeMutablePointer<UInt16>.allocate(capacity: 17)
        var now: UInt64 = 1_000_000_000
        var seq: UInt16 = 1
        var firstOut: UInt16?
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            for k in 0..<17 {
                seq &+= 1
                now &+= 1_000_000
                packet.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                engine.handleRtp(from: publisher, packet: packet, now: now)
                let tx = engine.transmitCount > 0 ? engine.transmit(at: engine.transmitCount - 1) : nil
                if let tx, let v = RtpPacketView(UnsafeMutableRawBufferPointer(start: tx.bytes, count: tx.length)) {
                    sequences[k] = v.sequenceNumber
                    if firstOut == nil { firstOut = v.sequenceNumber }
                }
                engine.clearTransmits()
            }
            let n = RtcpWriter.nack(into: nack, senderSsrc: 5, mediaSsrc: 0x2000, sequences: sequences, count: 17)
            engine.handleRtcp(from: subscribers[0], packet: UnsafeRawBufferPointer(rebasing: nack[0..<n]), now: now)
            blackHole(engine.transmitCount)
            engine.clearTransmits()
        }
        benchmark.stopMeasurement()
        precondition(engine.packetsRetransmitted > 0, "nothing was retransmitted")
    }

    Benchmark("Publisher loss 1 in 10, 1->10: gap NACKed, RTX restored and forwarded (per 10 packets)") { benchmark in
        let (engine, publisher, _) = engineWithRtx(fanOut: 10)
        let rtx = UnsafeMutableRawBufferPointer.allocate(byteCount: packet.count + 2, alignment: 16)
        var now: UInt64 = 1_000_000_000
        var seq: UInt16 = 1
        packet.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
        engine.handleRtp(from: publisher, packet: packet, now: now)   // the keyframe starts the consumers
        engine.clearTransmits()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            seq &+= 1
            let lost = seq
            for _ in 0..<9 {
                seq &+= 1
                now &+= 3_000_000
                packet.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                engine.handleRtp(from: publisher, packet: packet, now: now)
                engine.clearTransmits()
            }
            // The publisher's RTX for the lost packet: header, original sequence number, payload.
            rtx.copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[0..<24]))
            rtx.storeBytes(of: UInt32(0x1112).bigEndian, toByteOffset: 8, as: UInt32.self)
            rtx[1] = 97
            rtx.storeBytes(of: lost.bigEndian, toByteOffset: 24, as: UInt16.self)
            UnsafeMutableRawBufferPointer(rebasing: rtx[26...]).copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[24...]))
            engine.handleRtp(from: publisher, packet: rtx, now: now)
            blackHole(engine.transmitCount)
            engine.clearTransmits()
        }
        benchmark.stopMeasurement()
        precondition(engine.rtxRecovered > 0 && engine.nacksSent > 0, "no gap was NACKed and recovered")
    }
}

/// The worker's own packet path with real SRTP and real sends (`WorkerBenchmarkRig`): one
/// publisher, 10 subscribers, AEAD_AES_128_GCM, `sendmmsg` to a loopback sink. The library
/// mallocs of Debian's NSS-backed libsrtp2 are listed in bench/malloc-allowances.txt; the
/// worker's part (routing, chaining, counting, inbox, timer) must allocate nothing.
let workerBenchmarks: @Sendable () -> Void = {
    Benchmark("Worker flush 1->10: route + srtp_protect GCM + sendmmsg, 1200 B (per received packet)",
              configuration: .init(thresholds: [.mallocCountTotal: .init(absolute: [.p50: 50, .p100: 50])])) { benchmark in
        let rig = try! WorkerBenchmarkRig(runtime: try! CryptoRuntime(), fanOut: 10)
        rig.routeAndFlush()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.routeAndFlush() }
        benchmark.stopMeasurement()
        precondition(rig.drops.isEmpty, "worker dropped packets: \(rig.drops)")
    }
    Benchmark("Worker loop iteration 1->10: srtp_unprotect + route + flush + inbox + timer, 1200 B (per received packet)",
              configuration: .init(thresholds: [.mallocCountTotal: .init(absolute: [.p50: 60, .p100: 60])])) { benchmark in
        let rig = try! WorkerBenchmarkRig(runtime: try! CryptoRuntime(), fanOut: 10)
        rig.receiveOneDatagram()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { blackHole(rig.receiveOneDatagram()) }
        benchmark.stopMeasurement()
        precondition(rig.drops.isEmpty, "worker dropped packets: \(rig.drops)")
    }
}
