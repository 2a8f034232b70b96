import Testing
@testable import MinatoMedia
import MinatoWire

/// A simulcast producer (three VP8 layers learned by RID) and its consumers on a simulated
/// clock: SSRC binding, the keyframe rule for switches, continuity of sequence numbers,
/// timestamps, PictureID and TL0PICIDX across them, the preference cap, silent layers, and
/// resends after a switch.
@Suite struct SimulcastTests {
    static let ridExtension: UInt8 = 10
    static let rrid: UInt8 = 11
    static let rids = ["l", "m", "h"]
    static let ssrcs: [UInt32] = [0xA1, 0xA2, 0xA3]

    /// Per layer: its own sequence, timestamp, PictureID and TL0PICIDX spaces (as a browser's
    /// three encoders), so a switch shows whether the consumer's stream stays continuous.
    final class Publisher {
        let h = EngineHarness()
        var seq: [UInt16] = [100, 20_000, 40_000]
        var ts: [UInt32] = [1_000, 900_000_000, 3_000_000_000]
        var pictureId: [UInt16] = [5, 9_000, 30_000]
        var tl0: [UInt8] = [1, 100, 250]
        var producer: ProducerId!
        /// The subscriber transport of `subscribe()`.
        var sub: TransportIndex!

        init(rtx: Bool = false) throws {
            producer = try h.engine.addProducer(ProducerParameters(
                transport: h.publisher, kind: .video, ssrc: 0, payloadType: 96, clockRate: 90_000, codec: .vp8,
                keyFrameRequest: .pli, rtxPayloadType: rtx ? 97 : nil, nack: true, rids: SimulcastTests.rids,
                ridExtensionId: SimulcastTests.ridExtension, repairedRidExtensionId: rtx ? SimulcastTests.rrid : 0))
        }

        /// One packet of `layer` (a whole frame: PictureID and TL0PICIDX move on with each),
        /// carrying its RID when `rid`; what the engine queued.
        @discardableResult
        func send(_ layer: Int, keyframe: Bool = false, rid: Bool = true, advance: Nanoseconds = 0) -> [EngineHarness.Sent] {
            h.now &+= advance
            seq[layer] &+= 1
            ts[layer] &+= 3000
            pictureId[layer] = (pictureId[layer] &+ 1) & 0x7FFF
            tl0[layer] &+= 1
            var bytes = SimulcastTests.packet(ssrc: SimulcastTests.ssrcs[layer], seq: seq[layer], ts: ts[layer],
                                              rid: rid ? SimulcastTests.rids[layer] : nil, pictureId: pictureId[layer],
                                              tl0: tl0[layer], keyframe: keyframe)
            bytes.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: h.now) }
            return h.drain()
        }

        /// Every layer sends once (so all are bound and receiving), then a subscriber transport
        /// gets a consumer (SSRC 0x5000; `preferredLayer` as `ConsumerParameters`); returns it
        /// with the PLIs its start queued.
        func subscribe(preferredLayer: Int? = nil) throws -> (consumer: ConsumerId, plis: [UInt32]) {
            _ = round()
            sub = h.subscriber()
            let c = try h.engine.addConsumer(ConsumerParameters(producer: producer, transport: sub, ssrc: 0x5000, payloadType: 100,
                                                                extensionIds: .identity, preferredLayer: preferredLayer), now: h.now)
            return (c, SimulcastTests.pliTargets(h.drain()))
        }

        /// `subscribe()`, then the top layer's keyframe starts the consumer there.
        func startedOnTop() throws -> ConsumerId {
            let c = try subscribe().consumer
            _ = send(2, keyframe: true)
            return c
        }

        /// One packet of each layer, 33 ms apart per round.
        func round(keyframe: Bool = false) -> [EngineHarness.Sent] {
            h.now &+= 33_000_000
            return (0..<3).flatMap { send($0, keyframe: keyframe) }
        }
    }

    /// An RTP packet with a one-byte-header extension block (the RID, when given) and a VP8
    /// descriptor with a 15-bit PictureID, TL0PICIDX and a temporal index (`tid`, its layer-sync
    /// bit `sync`); `start`: the first packet of its frame.
    static func packet(ssrc: UInt32, seq: UInt16, ts: UInt32, rid: String?, pictureId: UInt16, tl0: UInt8,
                       keyframe: Bool, payloadType: UInt8 = 96, tid: UInt8 = 0, sync: Bool = true,
                       start: Bool = true) -> [UInt8] {
        var ext: [UInt8] = []
        if let rid {
            let r = Array(rid.utf8)
            ext = [ridExtension << 4 | UInt8(r.count - 1)] + r
            while ext.count % 4 != 0 { ext.append(0) }
        }
        var header = [UInt8](repeating: 0, count: 12)
        header.withUnsafeMutableBytes { b in
            _ = RtpPacketView.writeHeader(into: b, payloadType: payloadType, sequenceNumber: seq, timestamp: ts, ssrc: ssrc)
        }
        if !ext.isEmpty {
            header[0] |= 0x10
            header += [0xBE, 0xDE, 0, UInt8(ext.count / 4)] + ext
        }
        let descriptor: [UInt8] = [start ? 0x90 : 0x80, 0xE0, 0x80 | UInt8(pictureId >> 8), UInt8(pictureId & 0xFF), tl0,
                                   tid << 6 | (sync ? 0x20 : 0),
                                   keyframe ? 0x00 : 0x01, 0x55, 0x55]
        return header + descriptor
    }

    /// (ssrc, seq, ts, pictureId, tl0) of the RTP packets in `sent`.
    static func forwarded(_ sent: [EngineHarness.Sent]) -> [(ssrc: UInt32, seq: UInt16, ts: UInt32, pictureId: UInt16, tl0: UInt8)] {
        sent.compactMap { s in
            guard !s.isRtcp else { return nil }
            var copy = s.bytes
            return copy.withUnsafeMutableBytes { b -> (UInt32, UInt16, UInt32, UInt16, UInt8)? in
                guard let v = RtpPacketView(b) else { return nil }
                let p = UnsafeRawBufferPointer(v.payload)
                guard let d = Vp8PayloadDescriptor(p), let id = d.pictureId(in: p), let tl0 = d.tl0PicIdx(in: p) else { return nil }
                return (v.ssrc, v.sequenceNumber, v.timestamp, id, tl0)
            }
        }
    }

    /// The media SSRCs named by the PLIs in `sent`.
    static func pliTargets(_ sent: [EngineHarness.Sent]) -> [UInt32] {
        sent.filter(\.isPli).compactMap { s in
            s.bytes.withUnsafeBytes { b in
                var it = RtcpIterator(b)
                while let p = it.next() { if let pli = PictureLossIndication(p) { return pli.mediaSsrc } }
                return nil
            }
        }
    }

    @Test func layersAreBoundByTheirRidAndOnlyTheirRid() throws {
        let pub = try Publisher()
        let e = pub.h.engine
        // Before binding: a packet naming an announced RID is expected; one without is not.
        var named = Self.packet(ssrc: 0xA1, seq: 1, ts: 1, rid: "l", pictureId: 1, tl0: 1, keyframe: false)
        var anonymous = Self.packet(ssrc: 0xB0, seq: 1, ts: 1, rid: nil, pictureId: 1, tl0: 1, keyframe: false)
        var unknownRid = Self.packet(ssrc: 0xB1, seq: 1, ts: 1, rid: "x", pictureId: 1, tl0: 1, keyframe: false)
        #expect(named.withUnsafeMutableBytes { e.expectsPacket(0xA1, $0, on: pub.h.publisher) })
        #expect(!anonymous.withUnsafeMutableBytes { e.expectsPacket(0xB0, $0, on: pub.h.publisher) })
        #expect(!unknownRid.withUnsafeMutableBytes { e.expectsPacket(0xB1, $0, on: pub.h.publisher) })
        _ = pub.round()
        // Bound: later packets need no RID; the statistics name each layer's SSRC.
        for layer in 0..<3 { pub.send(layer, rid: false) }
        let stats = try #require(e.producerStats(pub.producer))
        #expect(stats.layers.map(\.rid) == Self.rids)
        #expect(stats.layers.map(\.ssrc) == Self.ssrcs.map { Optional($0) })
        #expect(stats.layers.map(\.packetsReceived) == [2, 2, 2])
        #expect(stats.packetsReceived == 6)
        // An SSRC that claims a bound RID again is not taken.
        var again = Self.packet(ssrc: 0xC0, seq: 1, ts: 1, rid: "h", pictureId: 1, tl0: 1, keyframe: false)
        #expect(!again.withUnsafeMutableBytes { e.expectsPacket(0xC0, $0, on: pub.h.publisher) })
        let before = e.drops(.unknownSsrc)
        again.withUnsafeMutableBytes { e.handleRtp(from: pub.h.publisher, packet: $0, now: pub.h.now) }
        #expect(e.drops(.unknownSsrc) == before + 1)
    }

    /// A relay's simulcast producer: its layers' SSRCs are declared, so packets without any RID
    /// are taken at once, each as its layer; a wrong declaration is refused.
    @Test func declaredLayerSsrcsNeedNoRid() throws {
        let h = EngineHarness()
        var p = ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0, payloadType: 96, clockRate: 90_000,
                                   codec: .vp8, keyFrameRequest: .pli, rtxPayloadType: 97, nack: true, rids: Self.rids)
        p.layerSsrcs = [0xD1, 0xD3, 0xD5]
        p.layerRtxSsrcs = [0xD2, 0xD4, 0xD6]
        var wrong = p
        wrong.layerSsrcs = [0xD1, 0xD3]
        #expect(throws: MediaError.self) { try h.engine.addProducer(wrong) }
        var duplicate = p
        duplicate.layerRtxSsrcs = [0xD1, 0xD4, 0xD6]
        #expect(throws: MediaError.self) { try h.engine.addProducer(duplicate) }
        let producer = try h.engine.addProducer(p)
        for (i, ssrc) in p.layerSsrcs.enumerated() {
            var packet = Self.packet(ssrc: ssrc, seq: UInt16(10 + i), ts: 1, rid: nil, pictureId: 1, tl0: 1, keyframe: true)
            packet.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: h.now) }
        }
        let stats = try #require(h.engine.producerStats(producer))
        #expect(stats.layers.map(\.ssrc) == p.layerSsrcs.map { Optional($0) })
        #expect(stats.layers.map(\.packetsReceived) == [1, 1, 1])
        #expect(h.engine.drops(.unknownSsrc) == 0)
    }

    @Test func aConsumerStartsOnTheHighestLayerAtItsKeyframe() throws {
        let pub = try Publisher()
        let (c, plis) = try pub.subscribe()
        // The top layer is asked for a keyframe (by its SSRC).
        #expect(plis == [0xA3])
        // Delta frames of every layer and a keyframe of a lower layer do not start it.
        #expect(Self.forwarded(pub.round()).isEmpty)
        #expect(Self.forwarded(pub.send(0, keyframe: true)).isEmpty)
        let started = Self.forwarded(pub.send(2, keyframe: true))
        #expect(started.map(\.ssrc) == [0x5000])
        let after = Self.forwarded(pub.round())
        #expect(after.count == 1)
        #expect(after.first?.pictureId == pub.pictureId[2])   // no switch yet: values pass as sent
        let stats = try #require(pub.h.engine.consumerStats(c))
        #expect(stats.layer == 2 && stats.targetLayer == 2 && stats.layerSwitches == 0)
        #expect(pub.h.engine.drops(.layerNotSelected) > 0)
    }

    @Test func aSwitchWaitsForTheTargetsKeyframeAndKeepsTheStreamContinuous() throws {
        let pub = try Publisher()
        let c = try pub.startedOnTop()
        var last = try #require(Self.forwarded(pub.round()).last)
        // Down to the lowest: its keyframe is requested; the top layer keeps flowing meanwhile.
        // (Requests to two layers of one sender are 350 ms apart: a browser drops the second.)
        pub.h.now &+= 350_000_000
        pub.h.engine.setPreferredLayer(c, 0, now: pub.h.now)
        #expect(Self.pliTargets(pub.h.drain()) == [0xA1])
        for _ in 0..<3 {
            let out = Self.forwarded(pub.round())
            #expect(out.count == 1)
            #expect(out.first.map { $0.seq == last.seq &+ 1 && $0.pictureId == (last.pictureId &+ 1) & 0x7FFF } == true)
            last = try #require(out.first)
        }
        pub.h.now &+= 10_000_000
        let switched = try #require(Self.forwarded(pub.send(0, keyframe: true)).first)
        #expect(switched.seq == last.seq &+ 1)
        #expect(switched.pictureId == (last.pictureId &+ 1) & 0x7FFF)
        #expect(switched.tl0 == last.tl0 &+ 1)
        #expect(switched.ts &- last.ts == 900)                     // 10 ms at 90 kHz since the last packet
        // From now on only the lowest layer, continuing its own increments.
        let next = Self.forwarded(pub.round())
        #expect(next.count == 1)
        #expect(next.first.map { $0.seq == switched.seq &+ 1 && $0.pictureId == switched.pictureId &+ 1
            && $0.tl0 == switched.tl0 &+ 1 && $0.ts == switched.ts &+ 3000 } == true)
        let stats = try #require(pub.h.engine.consumerStats(c))
        #expect(stats.layer == 0 && stats.targetLayer == 0 && stats.layerSwitches == 1)
        // And back up without a cap: the top layer's keyframe again.
        // (The top layer was asked for a keyframe moments ago: this request waits out the
        // per-layer throttle and then goes.)
        pub.h.engine.setPreferredLayer(c, nil, now: pub.h.now)
        var plis = Self.pliTargets(pub.h.drain())
        pub.h.now &+= 1_000_000_000
        pub.h.engine.handleTimeout(now: pub.h.now)
        plis += Self.pliTargets(pub.h.drain())
        #expect(plis == [0xA3])
        let up = try #require(Self.forwarded(pub.send(2, keyframe: true)).first)
        #expect(up.seq == next.first.map { $0.seq &+ 1 })
        #expect(up.pictureId == next.first.map { $0.pictureId &+ 1 })
    }

    @Test func requestsToTwoLayersOfOneSenderAreSpacedOut() throws {
        let pub = try Publisher()
        let (c, plis) = try pub.subscribe()
        #expect(plis == [0xA3])
        let asked = pub.h.now
        pub.h.engine.setPreferredLayer(c, 0, now: asked &+ 100_000_000)
        #expect(Self.pliTargets(pub.h.drain()).isEmpty)
        #expect(pub.h.engine.nextDeadline == asked &+ 350_000_000)
        pub.h.engine.handleTimeout(now: asked &+ 350_000_000)
        #expect(Self.pliTargets(pub.h.drain()) == [0xA1])
    }

    @Test func aPreferenceAtStartCapsTheLayer() throws {
        let pub = try Publisher()
        let (c, plis) = try pub.subscribe(preferredLayer: 1)
        #expect(plis == [0xA2])
        #expect(Self.forwarded(pub.send(2, keyframe: true)).isEmpty)
        #expect(Self.forwarded(pub.send(1, keyframe: true)).count == 1)
        #expect(pub.h.engine.consumerStats(c)?.layer == 1)
    }

    @Test func aLayerThatFallsSilentIsLeftForTheNextOneDown() throws {
        let pub = try Publisher()
        let c = try pub.startedOnTop()
        // The publisher stops the top layer (its uplink estimate fell); the others go on.
        var plis: [UInt32] = []
        for _ in 0..<90 {
            pub.h.now &+= 33_000_000
            _ = pub.send(0)
            _ = pub.send(1)
            pub.h.engine.handleTimeout(now: pub.h.now)
            plis += Self.pliTargets(pub.h.drain())
        }
        #expect(plis.contains(0xA2))
        #expect(pub.h.engine.consumerStats(c)?.targetLayer == 1)
        #expect(Self.forwarded(pub.send(1, keyframe: true)).count == 1)
        #expect(pub.h.engine.consumerStats(c)?.layer == 1)
    }

    @Test func aResendAfterASwitchCarriesTheRewrittenPictureId() throws {
        let pub = try Publisher()
        let c = try pub.startedOnTop()
        pub.h.engine.setPreferredLayer(c, 0, now: pub.h.now)
        _ = pub.h.drain()
        let first = try #require(Self.forwarded(pub.send(0, keyframe: true)).first)
        _ = pub.round()
        // The subscriber NACKs the switch's first packet: the resend equals what it first got.
        var nack = [UInt8](repeating: 0, count: 64)
        let n = nack.withUnsafeMutableBytes { b in
            RtcpWriter.nack(into: b, senderSsrc: 0xABCD, mediaSsrc: 0x5000, pid: first.seq, blp: 0)
        }
        nack.withUnsafeBytes { pub.h.engine.handleRtcp(from: pub.sub, packet: UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: pub.h.now) }
        let resent = try #require(Self.forwarded(pub.h.drain()).first)
        #expect(resent.seq == first.seq && resent.pictureId == first.pictureId && resent.tl0 == first.tl0 && resent.ts == first.ts)
    }

    @Test func removingTheProducerFreesEveryLayer() throws {
        let pub = try Publisher(rtx: true)
        _ = pub.round()
        let sub = pub.h.subscriber()
        _ = try pub.h.consumer(pub.producer, on: sub, ssrc: 0x5000)
        #expect(pub.h.engine.activeProducerCount == 3)
        pub.h.engine.removeProducer(pub.producer)
        #expect(pub.h.engine.activeProducerCount == 0)
        #expect(pub.h.engine.activeConsumerCount == 0)
        var rtx = Self.packet(ssrc: 0xD1, seq: 1, ts: 1, rid: "l", pictureId: 1, tl0: 1, keyframe: false)
        #expect(!rtx.withUnsafeMutableBytes { pub.h.engine.expectsPacket(0xD1, $0, on: pub.h.publisher) })
        // A second simulcast producer on the transport works as the first did.
        let again = try Publisher()
        _ = again.round()
        #expect(again.h.engine.producerStats(again.producer)?.layers.map(\.packetsReceived) == [1, 1, 1])
    }
}
