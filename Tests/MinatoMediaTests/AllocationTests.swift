import Testing
@testable import MinatoMedia
import MinatoWire

/// A simulcast consumer on a subscriber transport with transport-wide feedback: its layer
/// follows the estimate (down on loss, up again after a clean probe), every packet it gets is
/// numbered in one transport-wide sequence, and probes are padding on its RTX stream.
@Suite struct AllocationTests {
    static let twcc: UInt8 = 3
    static let sizes = [200, 800, 1400]

    final class Rig {
        let h: EngineHarness
        var producer: ProducerId!
        var consumer: ConsumerId!
        var sub: TransportIndex!
        var seq: [UInt16] = [0, 1000, 2000]
        var twccNext: UInt16 = 0
        /// Transport-wide sequence numbers the subscriber got since the last feedback, with their time.
        var unreported: [(UInt16, Nanoseconds)] = []
        var padding = 0
        /// VP8 temporal layers (libwebrtc's three-layer pattern) in each layer's descriptor, and
        /// each layer's payload size.
        let temporal: Bool
        var sizes: [Int]
        var frames = [0, 0, 0]
        /// TIDs of the packets the subscriber got (media on the consumer's SSRC).
        var tids: [UInt8] = []
        /// A policer on the subscriber's link: given a packet's length on the wire and the
        /// time, whether it passes (nil: none). What it drops is reported lost.
        var policer: ((Int, Nanoseconds) -> Bool)?
        var policed: Set<UInt16> = []
        var mediaDropped = 0, paddingDropped = 0, mediaPassed = 0
        /// The lengths of the padding-only packets (probes) sent to the subscriber.
        var paddingLengths: Set<Int> = []

        init(temporal: Bool = false, sizes: [Int] = AllocationTests.sizes, tuning: EngineTuning = EngineTuning()) throws {
            h = EngineHarness(tuning: tuning)
            self.temporal = temporal
            self.sizes = sizes
            var p = ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0, payloadType: 96, clockRate: 90_000,
                                       codec: .vp8, keyFrameRequest: .pli, rtxPayloadType: 97, nack: true,
                                       rids: SimulcastTests.rids, ridExtensionId: SimulcastTests.ridExtension)
            p.transportSequenceExtensionId = AllocationTests.twcc
            producer = try h.engine.addProducer(p)
            sub = h.subscriber()
            var ids = ExtensionIdMap()
            ids[AllocationTests.twcc] = 5
            var c = ConsumerParameters(producer: producer, transport: sub, ssrc: 0x5000, payloadType: 100, extensionIds: ids,
                                       rtxSsrc: 0x5001, rtxPayloadType: 101)
            c.transportSequenceExtensionId = 5
            // Every layer is receiving before the consumer starts.
            for layer in 0..<3 { send(layer, keyframe: true) }
            consumer = try h.engine.addConsumer(c, now: h.now)
            _ = h.drain()
        }

        /// One packet of `layer` (RID and transport-wide sequence number elements, payload of
        /// that layer's size); what reached the subscriber is noted for feedback.
        func send(_ layer: Int, keyframe: Bool = false) {
            seq[layer] &+= 1
            let r = Array(SimulcastTests.rids[layer].utf8)
            var bytes = [UInt8](repeating: 0, count: 12)
            bytes.withUnsafeMutableBytes { b in
                _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: seq[layer], timestamp: 0, ssrc: SimulcastTests.ssrcs[layer])
            }
            bytes[0] |= 0x10
            var ext: [UInt8] = [SimulcastTests.ridExtension << 4 | UInt8(r.count - 1)] + r
            ext += [AllocationTests.twcc << 4 | 1, UInt8(twccNext >> 8), UInt8(twccNext & 0xFF)]
            twccNext &+= 1
            while ext.count % 4 != 0 { ext.append(0) }
            bytes += [0xBE, 0xDE, 0, UInt8(ext.count / 4)] + ext
            if temporal {
                let (tid, sync) = keyframe ? (0, false) : TemporalLayerTests.pattern[frames[layer] % 8]
                frames[layer] += 1
                bytes += [0x90, 0x20, tid << 6 | (sync ? 0x20 : 0)]
            } else {
                bytes += [0x10]
            }
            bytes += [keyframe ? 0x00 : 0x01] + [UInt8](repeating: 0x55, count: sizes[layer])
            bytes.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: h.now) }
            collect()
        }

        func collect() {
            for s in h.drain() where !s.isRtcp && s.transport == sub {
                var copy = s.bytes
                copy.withUnsafeMutableBytes { b in
                    guard let v = RtpPacketView(b), let n = v.transportSequenceNumber(id: 5) else { return }
                    let isPadding = v.ssrc == 0x5001 && v.payloadLength == 0
                    if isPadding { paddingLengths.insert(b.count) }
                    // On the wire: SRTP's 16-byte tag, UDP and IPv4 headers.
                    if let policer, !policer(b.count + 16 + 8 + 20, h.now) {
                        policed.insert(n)
                        if isPadding { paddingDropped += 1 } else if v.ssrc == 0x5000 { mediaDropped += 1 }
                        unreported.append((n, h.now))
                        return
                    }
                    if v.ssrc == 0x5000 { mediaPassed += 1 }
                    if v.ssrc == 0x5001, v.hasPadding { padding += 1 }
                    let payload = UnsafeRawBufferPointer(v.payload)
                    if v.ssrc == 0x5000, let d = Vp8PayloadDescriptor(payload), let tid = d.temporalLayer(in: payload) {
                        tids.append(tid)
                    }
                    unreported.append((n, h.now))
                }
            }
        }

        /// 100 ms of all three layers at 30 fps; every 50 ms the subscriber's feedback, which
        /// reports every packet but those `lost` says it lost.
        func run(ms: Int, lost: (Int) -> Bool) {
            for tick in 0..<(ms / 33) {
                h.now &+= 33_000_000
                for layer in 0..<3 { send(layer) }
                h.engine.handleTimeout(now: h.now)
                collect()
                if tick % 2 == 1 { feedback(lost: lost) }
            }
        }

        func feedback(lost: (Int) -> Bool) {
            guard let first = unreported.first else { return }
            let sorted = unreported.sorted { Int16(bitPattern: $0.0 &- $1.0) < 0 }
            let base = sorted[0].0
            let count = Int(sorted.last!.0 &- base) + 1
            var byOffset = [Nanoseconds?](repeating: nil, count: count)
            for (i, (n, at)) in sorted.enumerated() where !lost(i) && !policed.contains(n) { byOffset[Int(n &- base)] = at + 10_000_000 }
            policed.subtract(sorted.map(\.0))
            let bytes = transportFeedbackPacket(base: base, arrivals: byOffset, fallback: first.1)
            bytes.withUnsafeBytes { h.engine.handleRtcp(from: sub, packet: $0, now: h.now) }
            unreported.removeAll()
            collect()
        }
    }

    @Test func theLayerFollowsTheEstimateDownAndAProbeBringsItBack() throws {
        let rig = try Rig()
        // Clean: the top layer (its keyframe was asked for at start).
        rig.send(2, keyframe: true)
        rig.run(ms: 1500) { _ in false }
        var stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        #expect(stats.layer == 2)
        #expect(stats.estimate != nil)
        // Heavy loss (3 of 4 packets): the estimate falls and the consumer is moved to the lowest layer.
        rig.run(ms: 2000) { $0 % 4 != 0 }
        stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        print("[allocation] after loss: estimate \(stats.estimate ?? -1), bandwidth layer \(stats.bandwidthLayer ?? -1)")
        #expect(stats.bandwidthLayer == 0 && stats.targetLayer == 0)
        // The top layer stopped at once (the link was losing it): nothing until the lowest's keyframe.
        #expect(stats.layer == nil)
        rig.unreported.removeAll()
        rig.send(2)
        #expect(rig.unreported.isEmpty)
        rig.send(0, keyframe: true)
        #expect(rig.h.engine.consumerStats(rig.consumer)?.layer == 0)
        // Clean again: probes (padding on the RTX stream) find the room and the layer climbs.
        rig.padding = 0
        rig.run(ms: 14000) { _ in false }
        stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        print("[allocation] after 14 s clean: estimate \(stats.estimate ?? -1), bandwidth layer \(stats.bandwidthLayer ?? -1), padding packets \(rig.padding), probes \(rig.h.engine.probesStarted)")
        #expect(rig.h.engine.probesStarted >= 1 && rig.padding > 0)
        #expect(stats.bandwidthLayer == 2)
    }

    @Test func aProbeThatFitsLiftsTheConsumerToTheLayerItProbedFor() throws {
        let rig = try Rig()
        rig.send(2, keyframe: true)
        rig.run(ms: 1500) { _ in false }
        rig.run(ms: 2000) { $0 % 4 != 0 }
        rig.send(0, keyframe: true)
        #expect(rig.h.engine.consumerStats(rig.consumer)?.layer == 0)
        // Clean: wait, 100 ms at a time, for the next probe to start and then to end.
        let slot = Int(rig.sub.slot)
        let probesBefore = rig.h.engine.probesStarted
        var ms = 0
        while rig.h.engine.probesStarted == probesBefore, ms < 10_000 { rig.run(ms: 100) { _ in false }; ms += 100 }
        let probeRate = rig.h.engine.transports[slot].estimator?.probeRate ?? 0
        // The top layer's encoder goes 5% higher meanwhile (a real one's rate moves all the time).
        rig.sizes[2] = rig.sizes[2] * 105 / 100
        while rig.h.engine.transports[slot].estimator?.probeRate != 0, ms < 20_000 { rig.run(ms: 100) { _ in false }; ms += 100 }
        rig.run(ms: 1000) { _ in false }
        let stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        print("[allocation] a probe at \(probeRate) bit/s started on the clean link; \(ms + 1000) ms in: estimate \(stats.estimate ?? -1), bandwidth layer \(stats.bandwidthLayer ?? -1)")
        // That one probe (for the top layer, the highest receiving one) is enough: the estimate
        // it leaves clears the top layer's rate with the upgrade headroom.
        #expect(rig.h.engine.transports[slot].estimator?.failedProbes == 0)
        #expect(rig.h.engine.probesStarted == probesBefore + 1)
        #expect(stats.bandwidthLayer == 2)
    }

    @Test func belowTheLowestLayersRateTheConsumerGetsItsLowerTemporalLayers() throws {
        // The lowest layer alone is ~250 kbit/s (1000 bytes at 30 frames/s): TID 0 a quarter of it.
        let rig = try Rig(temporal: true, sizes: [1000, 1100, 1200])
        rig.send(2, keyframe: true)
        rig.run(ms: 1500) { _ in false }
        #expect(rig.h.engine.consumerStats(rig.consumer)?.layer == 2)
        // Heavy loss: down to the lowest layer, and then below its whole rate.
        rig.run(ms: 2000) { $0 % 4 != 0 }
        #expect(rig.h.engine.producerStats(rig.producer)?.layers.map(\.temporalLayers) == [3, 3, 3])
        rig.send(0, keyframe: true)
        rig.run(ms: 3000) { $0 % 4 != 0 }
        var stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        print("[allocation] temporal: after loss estimate \(stats.estimate ?? -1), layer \(stats.layer ?? -1), temporal layer \(stats.temporalLayer ?? -1) (target \(stats.targetTemporalLayer ?? -1))")
        #expect(stats.layer == 0)
        let cut = try #require(stats.targetTemporalLayer)
        #expect(cut < 2 && stats.temporalLayer == cut)
        rig.tids.removeAll()
        rig.run(ms: 1000) { $0 % 4 != 0 }
        #expect(!rig.tids.isEmpty && rig.tids.allSatisfy { Int($0) <= cut })
        // Clean: the whole of the layer again, then the layers above.
        rig.run(ms: 14000) { _ in false }
        stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        print("[allocation] temporal: after 14 s clean estimate \(stats.estimate ?? -1), target layer \(stats.targetLayer ?? -1), temporal target \(stats.targetTemporalLayer ?? -1), temporal switches \(stats.temporalLayerSwitches)")
        #expect(stats.targetTemporalLayer == nil && stats.bandwidthLayer == 2)
    }

    @Test func everythingSentOnTheTransportIsNumberedInOneSequence() throws {
        let rig = try Rig()
        // A second consumer on the same transport (capped at the lowest layer): two streams, one sequence.
        var ids = ExtensionIdMap()
        ids[AllocationTests.twcc] = 5
        var second = ConsumerParameters(producer: rig.producer, transport: rig.sub, ssrc: 0x6000, payloadType: 100,
                                        extensionIds: ids, preferredLayer: 0)
        second.transportSequenceExtensionId = 5
        _ = try rig.h.engine.addConsumer(second, now: rig.h.now)
        rig.send(2, keyframe: true)
        rig.send(0, keyframe: true)
        rig.run(ms: 1000) { _ in false }
        rig.unreported.removeAll()
        for _ in 0..<20 {
            rig.h.now &+= 33_000_000
            for layer in 0..<3 { rig.send(layer) }
        }
        let numbers = rig.unreported.map(\.0)
        #expect(numbers.count == 40)                                // 20 packets of each stream
        #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $1 == $0 &+ 1 })
    }
}
