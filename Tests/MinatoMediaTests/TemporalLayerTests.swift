import Testing
@testable import MinatoMedia
import MinatoWire

/// VP8 temporal layers of a simulcast consumer on a simulated clock: dropping the layers above
/// the target closes the numbering (sequence numbers and PictureIDs go on by one, TL0PICIDX is
/// untouched), a down-switch waits for a frame start, an up-switch for each layer's sync frame,
/// and late and resent packets get the numbers they would have had.
@Suite struct TemporalLayerTests {
    typealias Forwarded = (ssrc: UInt32, seq: UInt16, ts: UInt32, pictureId: UInt16, tl0: UInt8)

    /// libwebrtc's three-layer VP8 pattern (8 frames): each frame's TID and layer-sync bit.
    static let pattern: [(tid: UInt8, sync: Bool)] = [
        (0, false), (2, true), (1, true), (2, false), (0, false), (2, false), (1, false), (2, false),
    ]

    /// The top layer's encoder: whole frames of `packets` packets on layer 2 (PictureID per
    /// frame, TL0PICIDX per TID 0 frame), 33 ms apart. Returns what reached the consumer.
    final class Encoder {
        let pub: SimulcastTests.Publisher
        var index = 0
        /// Packets held back by `frame(late:)`, to be delivered later.
        var held: [[UInt8]] = []

        init(_ pub: SimulcastTests.Publisher) { self.pub = pub }

        func deliver(_ bytes: [UInt8]) -> [Forwarded] {
            var copy = bytes
            copy.withUnsafeMutableBytes { pub.h.engine.handleRtp(from: pub.h.publisher, packet: $0, now: pub.h.now) }
            return SimulcastTests.forwarded(pub.h.drain())
        }

        /// The next frame of the pattern; `between` runs after its first packet; the packets
        /// whose index is in `late` are held back.
        func frame(packets: Int = 2, late: Set<Int> = [], between: () -> Void = {}) -> (tid: UInt8, out: [Forwarded]) {
            let (tid, sync) = TemporalLayerTests.pattern[index % TemporalLayerTests.pattern.count]
            index += 1
            pub.h.now &+= 33_000_000
            pub.ts[2] &+= 3000
            pub.pictureId[2] = (pub.pictureId[2] &+ 1) & 0x7FFF
            if tid == 0 { pub.tl0[2] &+= 1 }
            var out: [Forwarded] = []
            for k in 0..<packets {
                pub.seq[2] &+= 1
                let bytes = SimulcastTests.packet(ssrc: 0xA3, seq: pub.seq[2], ts: pub.ts[2], rid: nil,
                                                  pictureId: pub.pictureId[2], tl0: pub.tl0[2], keyframe: false,
                                                  tid: tid, sync: sync, start: k == 0)
                if late.contains(k) { held.append(bytes) } else { out += deliver(bytes) }
                if k == 0 { between() }
            }
            return (tid, out)
        }

        func frames(_ n: Int) -> [(tid: UInt8, out: [Forwarded])] { (0..<n).map { _ in frame() } }
    }

    static func setTarget(_ pub: SimulcastTests.Publisher, _ c: ConsumerId, _ layer: Int) {
        pub.h.engine.consumers[Int(c.slot)].targetTemporalLayer = layer
    }

    /// A consumer started on the top layer and then cut to TID 0 for one pattern cycle: the
    /// publisher, the consumer, its encoder, and the last packet forwarded in that cycle.
    static func cutToBaseLayer() throws -> (pub: SimulcastTests.Publisher, c: ConsumerId, enc: Encoder, last: Forwarded) {
        let pub = try SimulcastTests.Publisher()
        let c = try pub.startedOnTop()
        let enc = Encoder(pub)
        Self.setTarget(pub, c, 0)
        let last = try #require(enc.frames(8).flatMap(\.out).last)
        return (pub, c, enc, last)
    }

    /// Each forwarded packet follows the one before: sequence +1; within a frame the same
    /// PictureID, else PictureID +1.
    static func expectContinuous(_ out: [Forwarded], after first: Forwarded, sourceLocation: SourceLocation = #_sourceLocation) {
        var last = first
        for p in out {
            #expect(p.seq == last.seq &+ 1, "sequence \(p.seq) after \(last.seq)", sourceLocation: sourceLocation)
            if p.ts != last.ts {
                #expect(p.pictureId == (last.pictureId &+ 1) & 0x7FFF, "PictureID \(p.pictureId) after \(last.pictureId)",
                        sourceLocation: sourceLocation)
            } else {
                #expect(p.pictureId == last.pictureId, sourceLocation: sourceLocation)
            }
            last = p
        }
    }

    @Test func droppingUpperLayersClosesTheNumberingAndWaitsForAFrameStart() throws {
        let pub = try SimulcastTests.Publisher()
        let c = try pub.startedOnTop()
        let enc = Encoder(pub)
        // All layers: every packet of every frame.
        let all = enc.frames(8)
        #expect(all.allSatisfy { $0.out.count == 2 })
        var last = try #require(all.last?.out.last)
        // The target drops to TID 0 in the middle of a TID 2 frame: that frame is finished.
        _ = enc.frame()   // TID 0
        let midFrame = enc.frame { TemporalLayerTests.setTarget(pub, c, 0) }
        #expect(midFrame.tid == 2 && midFrame.out.count == 2)
        let afterSwitch = enc.frames(15)
        // From the next frame start only TID 0 frames: 4 of the next 15 pattern frames.
        #expect(afterSwitch.filter { !$0.out.isEmpty }.map(\.tid) == [0, 0, 0, 0])
        #expect(afterSwitch.allSatisfy { $0.tid == 0 ? $0.out.count == 2 : $0.out.isEmpty })
        let forwarded = afterSwitch.flatMap(\.out)
        last = try #require(midFrame.out.last)
        Self.expectContinuous(forwarded, after: last)
        // TL0PICIDX is not rewritten by drops (every TID 0 frame is forwarded): one per frame.
        let tl0s = forwarded.map(\.tl0)
        #expect(zip(tl0s, tl0s.dropFirst()).allSatisfy { $1 == $0 || $1 == $0 &+ 1 })
        // Timestamps are the publisher's (offset unchanged): 4 frames, 133 ms apart.
        #expect(forwarded[2].ts &- forwarded[0].ts == 12_000)
        #expect(pub.h.engine.drops(.temporalLayerNotSelected) == 22)
        let stats = try #require(pub.h.engine.consumerStats(c))
        #expect(stats.temporalLayer == 0 && stats.targetTemporalLayer == 0 && stats.temporalLayerSwitches == 1)
    }

    @Test func goingUpTakesOneLayerAtEachSyncFrame() throws {
        let (pub, c, enc, last) = try Self.cutToBaseLayer()
        // Back to all layers. The pattern's frame 1 is TID 2's sync frame and frame 2 TID 1's:
        // TID 2 cannot be taken before TID 1 (its later frames refer to TID 1's).
        Self.setTarget(pub, c, Int.max)
        let cycle1 = enc.frames(8)
        #expect(cycle1.map { $0.out.isEmpty ? -1 : Int($0.tid) } == [0, -1, 1, -1, 0, -1, 1, -1])
        #expect(pub.h.engine.consumerStats(c)?.temporalLayer == 1)
        let cycle2 = enc.frames(8)
        #expect(cycle2.map { $0.out.isEmpty ? -1 : Int($0.tid) } == [0, 2, 1, 2, 0, 2, 1, 2])
        let forwarded = cycle1.flatMap(\.out) + cycle2.flatMap(\.out)
        Self.expectContinuous(forwarded, after: last)
        let stats = try #require(pub.h.engine.consumerStats(c))
        #expect(stats.temporalLayer == 2 && stats.targetTemporalLayer == nil && stats.temporalLayerSwitches == 3)
    }

    @Test func aKeyFrameTakesEveryLayerAtOnce() throws {
        let (pub, c, enc, _) = try Self.cutToBaseLayer()
        Self.setTarget(pub, c, Int.max)
        pub.h.now &+= 33_000_000
        #expect(SimulcastTests.forwarded(pub.send(2, keyframe: true)).count == 1)
        #expect(pub.h.engine.consumerStats(c)?.temporalLayer == nil)
        enc.index = 1
        #expect(enc.frames(7).allSatisfy { $0.out.count == 2 })
    }

    @Test func lateAndResentPacketsGetTheNumbersTheyWouldHaveHad() throws {
        let (pub, c, enc, start) = try Self.cutToBaseLayer()
        // A TID 0 frame whose second packet is late, two dropped frames, the next TID 0 frame.
        #expect(enc.frame(late: [1]).out.count == 1)     // TID 0
        #expect(enc.frames(3).allSatisfy { $0.out.isEmpty })   // TID 2, 1, 2
        let next = enc.frame().out                       // TID 0
        let late = try #require(enc.deliver(enc.held.removeFirst()).first)
        #expect(late.seq == start.seq &+ 2)
        #expect(late.pictureId == (start.pictureId &+ 1) & 0x7FFF)
        #expect(next.first?.seq == start.seq &+ 3)
        #expect(next.first?.pictureId == (start.pictureId &+ 2) & 0x7FFF)
        // The subscriber NACKs the late packet and the next frame's first: each resend is what it got.
        let firstOfNext = try #require(next.first)
        for wanted in [late, firstOfNext] {
            var nack = [UInt8](repeating: 0, count: 64)
            let n = nack.withUnsafeMutableBytes { b in
                RtcpWriter.nack(into: b, senderSsrc: 0xABCD, mediaSsrc: 0x5000, pid: wanted.seq, blp: 0)
            }
            nack.withUnsafeBytes {
                pub.h.engine.handleRtcp(from: pub.sub, packet: UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: pub.h.now)
            }
            let resent = try #require(SimulcastTests.forwarded(pub.h.drain()).first)
            #expect(resent.seq == wanted.seq && resent.pictureId == wanted.pictureId && resent.ts == wanted.ts)
        }
        // A number that was closed up over dropped packets maps to the packet that took it.
        #expect(pub.h.engine.consumers[Int(c.slot)].rewriter.original(of: firstOfNext.seq) == pub.seq[2] &- 1)
    }

    @Test func droppedNumbersMapBothWaysAcrossRunsAndWrap() {
        var r = SequenceRewriter(clockRate: 90_000, initialSequence: 1000, initialTimestamp: 0)
        // Producer numbers from 65530 (wrapping); every third one dropped.
        var sent: [(UInt16, UInt16)] = []
        var s: UInt16 = 65_530
        for i in 0..<300 {
            if i % 3 == 2 {
                r.drop(sequence: s)
            } else if let (out, _) = r.rewrite(sequence: s, timestamp: 0, now: 0) {
                sent.append((s, out))
            }
            s &+= 1
        }
        // Gap-free output, and each number maps back to its packet while its run is kept.
        #expect(zip(sent, sent.dropFirst()).allSatisfy { $1.1 == $0.1 &+ 1 })
        let recent = sent.suffix(40)
        #expect(recent.allSatisfy { r.original(of: $0.1) == $0.0 })
        // Older than the 32 runs kept: unknown, not wrong.
        #expect(r.original(of: sent[0].1) == nil)
        // A dropped number arriving late has no place; a late forwarded one gets its own.
        #expect(r.rewrite(sequence: s &- 1, timestamp: 0, now: 0) == nil)
        var dropped = DroppedNumbers(mask: 0x7F)
        for v: UInt16 in [126, 127, 0, 5] { dropped.append(v) }
        #expect(dropped.dropsNewer(than: 125) == 4 && dropped.dropsNewer(than: 127) == 2 && dropped.dropsNewer(than: 3) == 1)
        #expect(dropped.contains(0) && !dropped.contains(1))
    }

    /// A consumer leaving the whole layer takes the highest TID that fits with the temporal
    /// headroom (30%); one already cut keeps its TID at the bare rate (and climbs with it).
    @Test func aFirstCutLeavesHeadroomAndAnExistingCutKeepsItsLayer() throws {
        let pub = try SimulcastTests.Publisher()
        let c = try pub.startedOnTop()
        let slot = pub.h.engine.currentSlot(Int(c.slot))
        // TID 0, 0+1, 0+1+2: 20, 45, 75 kbit/s.
        pub.h.engine.producers[slot].temporalBitrates = SIMD4(20_000, 25_000, 30_000, 0)
        #expect(pub.h.engine.consumers[Int(c.slot)].targetTemporalLayer == Int.max)
        // 52 kbit/s holds TID 0+1 at the bare rate and with 15%, but not with 30% (58.5).
        #expect(pub.h.engine.temporalLayerFitting(Int(c.slot), slot: slot, budget: 52_000) == 0)
        #expect(pub.h.engine.temporalLayerFitting(Int(c.slot), slot: slot, budget: 59_000) == 1)
        Self.setTarget(pub, c, 1)
        #expect(pub.h.engine.temporalLayerFitting(Int(c.slot), slot: slot, budget: 47_000) == 1)
        // TID 0+1+2 is 75 kbit/s: 97.5 with the headroom.
        #expect(pub.h.engine.temporalLayerFitting(Int(c.slot), slot: slot, budget: 90_000) == 1)
        #expect(pub.h.engine.temporalLayerFitting(Int(c.slot), slot: slot, budget: 98_000) == Int.max)
        Self.setTarget(pub, c, 0)
        #expect(pub.h.engine.temporalLayerFitting(Int(c.slot), slot: slot, budget: 52_000) == 0)
    }
}
