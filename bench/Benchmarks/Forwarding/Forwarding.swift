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

    audioBenchmarks()

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

    // srtp_protect alone for one 1200-byte packet, per profile: what libsrtp2 (scripts/build-libsrtp.sh,
    // its ciphers on libgcrypt and nettle) costs per subscriber packet. Neither profile allocates (AES-CM +
    // HMAC-SHA1 did twice per call while its HMAC was OpenSSL 3's).
    for (name, profile) in [("GCM", SrtpProfile.aeadAes128Gcm), ("AES-CM-HMAC-SHA1-80", .aes128CmSha1_80)] {
        Benchmark("srtp_protect \(name), 1200 B (per packet)") { benchmark in
            let key = [UInt8](repeating: 0x5A, count: profile == .aeadAes128Gcm ? 28 : 30)
            let session = try! SrtpSession(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1200 + SrtpSession.maxTrailer, alignment: 16)
            defer { buffer.deallocate() }
            var seq: UInt16 = 1
            var protected = 0
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                seq &+= 1
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[0..<1200]))
                buffer.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                protected &+= session.protectRtp(buffer.baseAddress!, length: 1200) ?? 0
            }
            benchmark.stopMeasurement()
            blackHole(protected)
        }
    }

    // The whole per-subscriber send work short of the syscall: the engine's copy and header
    // rewrite for each of 10 consumers, then srtp_protect (AEAD_AES_128_GCM) in place in the
    // engine's outbox, as WorkerCore.flush does. Nothing allocates.
    Benchmark("Router fan-out 1->10 + header rewrite + srtp_protect GCM, 1200 B (per received packet)") { benchmark in
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

    // Simulcast with congestion control: three layers learned by RID, each in three VP8
    // temporal layers (libwebrtc's 8-frame pattern), 10 subscribers capped at different
    // layers, every packet numbered per subscriber transport (transport-wide-cc) and recorded
    // for the publisher's feedback; every 30 rounds each subscriber's feedback is fed to its
    // estimator (allocation included) and the timers run (publisher feedback, reports). With
    // `maxKbps` below the lowest layer's rate every subscriber is cut to TID 0: 3 of 4 frames
    // are dropped and the numbering closes up over them.
    func simulcast(_ title: String, maxKbps: Int) {
    Benchmark(title) { benchmark in
        var tuning = EngineTuning()
        tuning.maxSubscriberBitrate = maxKbps * 1000
        tuning.minSubscriberBitrate = min(tuning.minSubscriberBitrate, tuning.maxSubscriberBitrate)
        let engine = MediaEngine(tuning: tuning)
        let publisher = engine.addTransport(router: RouterId(1), feedbackSsrc: 1)
        var params = ProducerParameters(transport: publisher, kind: .video, ssrc: 0, payloadType: 96, clockRate: 90_000,
                                        codec: .vp8, keyFrameRequest: .pli, rtxPayloadType: 97, nack: true,
                                        rids: ["l", "m", "h"], ridExtensionId: 10)
        params.transportSequenceExtensionId = 3
        let producer = try! engine.addProducer(params)
        var ids = ExtensionIdMap()
        ids[3] = 5
        var subscribers: [TransportIndex] = []
        for i in 0..<10 {
            let t = engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(100 + i))
            var c = ConsumerParameters(producer: producer, transport: t, ssrc: UInt32(0x2000 + i), payloadType: 100,
                                       extensionIds: ids, rtxSsrc: UInt32(0x3000 + i), rtxPayloadType: 101,
                                       preferredLayer: i % 3)
            c.transportSequenceExtensionId = 5
            _ = try! engine.addConsumer(c, now: 1)
            subscribers.append(t)
        }
        engine.clearTransmits()
        // One 1200-byte packet per layer: RID (id 10), transport-wide sequence (id 3), VP8 with
        // PictureID and TID.
        let layers = (0..<3).map { layer -> UnsafeMutableRawBufferPointer in
            let b = UnsafeMutableRawBufferPointer.allocate(byteCount: 1200, alignment: 16)
            b.initializeMemory(as: UInt8.self, repeating: 0)
            _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: 1, timestamp: 90_000, ssrc: UInt32(0xA0 + layer))
            b[0] |= 0x10
            let ext: [UInt8] = [0xBE, 0xDE, 0x00, 0x02, 0xA0, [0x6C, 0x6D, 0x68][layer], 0x31, 0x00, 0x01, 0x00, 0x00, 0x00]
            for (i, v) in ext.enumerated() { b[12 + i] = v }
            let vp8: [UInt8] = [0x90, 0xA0, 0x80, 0x01, 0x00, 0x00]
            for (i, v) in vp8.enumerated() { b[24 + i] = v }
            return b
        }
        let feedback = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500, alignment: 4)
        let arrivals = UnsafeMutablePointer<TransportFeedback.Arrival>.allocate(capacity: 256)
        // Per subscriber: the first transport-wide number not yet fed back, and how many since.
        var firstUnreported = [UInt16](repeating: 0, count: 10)
        var unreported = [Int](repeating: 0, count: 10)
        var now: UInt64 = 1_000_000_000
        var seq: UInt16 = 1, twcc: UInt16 = 0
        var round = 0
        // TID and layer-sync bit per frame of the pattern (TID << 6 | Y << 5).
        let pattern: [UInt8] = [0x00, 0xA0, 0x60, 0x80, 0x00, 0x80, 0x40, 0x80]
        func send(_ keyframe: Bool) {
            now &+= 11_000_000
            seq &+= 1
            for layer in 0..<3 {
                let b = layers[layer]
                b.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                b.storeBytes(of: twcc.bigEndian, toByteOffset: 19, as: UInt16.self)
                twcc &+= 1
                b.storeBytes(of: (0x8000 | seq & 0x7FFF).bigEndian, toByteOffset: 26, as: UInt16.self)   // PictureID
                b[28] = keyframe ? 0x00 : pattern[Int(seq) & 7]
                b[29] = keyframe ? 0x00 : 0x01   // VP8 payload header's P bit
                engine.handleRtp(from: publisher, packet: b, now: now)
            }
            for i in 0..<engine.transmitCount {
                let tx = engine.transmit(at: i)
                guard !tx.isRtcp, let v = RtpPacketView(UnsafeMutableRawBufferPointer(start: tx.bytes, count: tx.length)),
                      let n = v.transportSequenceNumber(id: 5), let k = subscribers.firstIndex(of: tx.transport) else { continue }
                if unreported[k] == 0 { firstUnreported[k] = n }
                unreported[k] = min(unreported[k] + 1, 256)
            }
            engine.clearTransmits()
        }
        for _ in 0..<40 { send(true) }   // bind the layers, start every consumer, measure layer rates
        engine.handleTimeout(now: now)
        engine.clearTransmits()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            send(round % 300 == 0)
            round &+= 1
            if round % 30 == 0 {
                for k in 0..<10 where unreported[k] > 0 {
                    for j in 0..<unreported[k] { arrivals[j] = TransportFeedback.Arrival(delta: j == 0 ? 0 : 4) }
                    let n = RtcpWriter.transportFeedback(into: feedback, senderSsrc: 7, mediaSsrc: 0x2000, baseSequence: firstUnreported[k],
                                                         referenceTime: Int32(truncatingIfNeeded: now / 64_000_000), feedbackCount: 0,
                                                         arrivals: UnsafeBufferPointer(start: arrivals, count: unreported[k])).bytes
                    engine.handleRtcp(from: subscribers[k], packet: UnsafeRawBufferPointer(rebasing: feedback[0..<n]), now: now)
                    unreported[k] = 0
                }
                engine.handleTimeout(now: now)
                blackHole(engine.transmitCount)
                engine.clearTransmits()
            }
        }
        benchmark.stopMeasurement()
        precondition(engine.transportFeedbackSent > 0, "no transport-wide feedback went to the publisher")
        precondition(maxKbps > 1000 || engine.drops(.temporalLayerNotSelected) > 0, "no temporal layer was cut")
    }
    }
    simulcast("Simulcast 3 layers 1->10 + transport-wide numbering, feedback and allocation (per round of 3 packets)",
              maxKbps: 20_000)
    simulcast("Simulcast 1->10 cut to temporal layer 0 by a 100 kbit/s estimate cap (per round of 3 packets)",
              maxKbps: 100)


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

    // Hostile RTCP: a subscriber's transport-wide feedback claiming 65,535 lost packets in 40
    // bytes is refused from its header (invalid_feedback); a claim of 4096, the most the
    // estimator walks, is what one admitted feedback can cost at worst. `step` keeps each
    // within its transport's RTCP budget (1000 packets and 20000 work units a second), so what
    // is measured is the work, not the budget's refusal.
    func feedbackClaim(_ title: String, count: Int, step: UInt64) {
        Benchmark(title) { benchmark in
            let engine = MediaEngine()
            let publisher = engine.addTransport(router: RouterId(1), feedbackSsrc: 1)
            let producer = try! engine.addProducer(ProducerParameters(
                transport: publisher, kind: .video, ssrc: 0x1111, payloadType: 96, clockRate: 90_000,
                codec: .vp8, keyFrameRequest: .pli))
            let subscriber = engine.addTransport(router: RouterId(1), feedbackSsrc: 100)
            var c = ConsumerParameters(producer: producer, transport: subscriber, ssrc: 0x2000, payloadType: 100,
                                       extensionIds: .identity)
            c.transportSequenceExtensionId = 5
            _ = try! engine.addConsumer(c, now: 1)
            engine.clearTransmits()
            let feedback = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 4)
            feedback.initializeMemory(as: UInt8.self, repeating: 0)
            var o = 20, left = count
            while left > 0 {
                let run = min(left, 0x1FFF)   // run-length chunk of "not received"
                feedback.storeBytes(of: UInt16(run).bigEndian, toByteOffset: o, as: UInt16.self)
                o += 2
                left -= run
            }
            o = (o + 3) & ~3
            feedback[0] = 0x8F
            feedback[1] = 205
            feedback.storeBytes(of: UInt16(o / 4 - 1).bigEndian, toByteOffset: 2, as: UInt16.self)
            feedback.storeBytes(of: UInt32(7).bigEndian, toByteOffset: 4, as: UInt32.self)
            feedback.storeBytes(of: UInt32(0x2000).bigEndian, toByteOffset: 8, as: UInt32.self)
            feedback.storeBytes(of: UInt16(count).bigEndian, toByteOffset: 14, as: UInt16.self)
            var now: UInt64 = 1_000_000_000
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                now &+= step
                engine.handleRtcp(from: subscriber, packet: UnsafeRawBufferPointer(rebasing: feedback[0..<o]), now: now)
            }
            benchmark.stopMeasurement()
            precondition(engine.drops(.rtcpOverBudget) == 0, "the benchmark ran over the RTCP budget")
            precondition(count <= 4096 || engine.drops(.invalidFeedback) > 0, "the maximal claim was not refused")
        }
    }
    feedbackClaim("RTCP: transport-wide feedback claiming 65535 statuses in 40 bytes, refused (per packet)",
                  count: 0xFFFF, step: 1_000_000)
    feedbackClaim("RTCP: transport-wide feedback claiming 4096 lost statuses, walked (per packet)",
                  count: 4096, step: 250_000_000)

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
/// publisher, 10 subscribers, AEAD_AES_128_GCM, `sendmmsg` to a loopback sink. Nothing may
/// allocate: neither the worker (routing, chaining, counting, inbox, timer) nor libsrtp2 on OpenSSL.
let workerBenchmarks: @Sendable () -> Void = {
    Benchmark("Worker flush 1->10: route + srtp_protect GCM + sendmmsg, 1200 B (per received packet)") { benchmark in
        let rig = try! WorkerBenchmarkRig(runtime: try! CryptoRuntime(), fanOut: 10)
        rig.routeAndFlush()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { rig.routeAndFlush() }
        benchmark.stopMeasurement()
        precondition(rig.drops.isEmpty, "worker dropped packets: \(rig.drops)")
    }
    Benchmark("Worker loop iteration 1->10: srtp_unprotect + route + flush + inbox + timer, 1200 B (per received packet)") { benchmark in
        let rig = try! WorkerBenchmarkRig(runtime: try! CryptoRuntime(), fanOut: 10)
        rig.receiveOneDatagram()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { blackHole(rig.receiveOneDatagram()) }
        benchmark.stopMeasurement()
        precondition(rig.drops.isEmpty, "worker dropped packets: \(rig.drops)")
    }
}
