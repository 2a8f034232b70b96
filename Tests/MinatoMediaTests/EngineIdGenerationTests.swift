import Testing
@testable import MinatoMedia
import MinatoWire

/// Ids carry their slot's generation: a late remove for an id whose slot was freed and reused
/// must not touch the newer object in that slot.
@Suite struct EngineIdGenerationTests {
    @Test func staleProducerIdDoesNotRemoveTheProducerThatReusedItsSlot() throws {
        let h = EngineHarness()
        let old = try h.producer(ssrc: 0x1111)
        h.engine.removeProducer(old)
        let new = try h.producer(ssrc: 0x1111)
        #expect(new.slot == old.slot && new.generation != old.generation)
        let b = h.subscriber()
        _ = try h.consumer(new, on: b, ssrc: 0xB0B0)
        _ = h.drain()

        h.engine.removeProducer(old)            // late, from the control plane
        h.engine.setPaused(old, true, now: h.now)
        #expect(h.engine.producerStats(old) == nil)
        #expect(h.engine.activeProducerCount == 1 && h.engine.activeConsumerCount == 1)
        let out = h.send(keyframe: true)
        #expect(out.count == 1 && out[0].transport == b && out[0].rtp?.ssrc == 0xB0B0)
        #expect(throws: MediaError.unknownProducer(old)) {
            _ = try h.consumer(old, on: b, ssrc: 0xC0C0)
        }
    }

    @Test func staleConsumerIdDoesNotRemoveTheConsumerThatReusedItsSlot() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        let old = try h.consumer(p, on: b, ssrc: 0xB0B0)
        h.engine.removeConsumer(old)
        let new = try h.consumer(p, on: b, ssrc: 0xB1B1)
        #expect(new.slot == old.slot && new.generation != old.generation)
        _ = h.drain()

        h.engine.removeConsumer(old)
        #expect(h.engine.consumerStats(old) == nil)
        #expect(h.engine.activeConsumerCount == 1)
        let out = h.send(keyframe: true)
        #expect(out.count == 1 && out[0].rtp?.ssrc == 0xB1B1)
        #expect(h.engine.consumerStats(new)?.packetsSent == 1)
    }

    @Test func staleTransportIndexDoesNotRemoveTheTransportThatReusedItsSlot() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let old = h.subscriber()
        h.engine.removeTransport(old)
        let new = h.subscriber()
        #expect(new.slot == old.slot && new.generation != old.generation)
        _ = try h.consumer(p, on: new, ssrc: 0xB0B0)
        _ = h.drain()

        h.engine.removeTransport(old)
        #expect(!h.engine.expectsSsrc(0x1111, on: old))
        #expect(throws: MediaError.unknownTransport(old)) {
            _ = try h.consumer(p, on: old, ssrc: 0xC0C0)
        }
        let out = h.send(keyframe: true)
        #expect(out.count == 1 && out[0].transport == new)
        // Packets "from" the stale index are not taken as the new transport's.
        var bytes = [UInt8](repeating: 0, count: 40)
        bytes.withUnsafeMutableBytes { b in
            _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: 1, timestamp: 1, ssrc: 0x1111)
            h.engine.handleRtp(from: old, packet: b, now: h.now)
        }
        #expect(h.drain().isEmpty)
    }

    @Test func removingATransportDoesNotTouchProducersReusingItsConsumerSlots() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        let c = try h.consumer(p, on: b, ssrc: 0xB0B0)
        h.engine.removeConsumer(c)
        h.engine.removeTransport(b)
        let b2 = h.subscriber()
        let c2 = try h.consumer(p, on: b2, ssrc: 0xB2B2)
        _ = h.drain()
        h.engine.removeConsumer(c)
        h.engine.removeTransport(b)
        #expect(h.engine.consumerStats(c2) != nil)
        #expect(h.send(keyframe: true).first?.rtp?.ssrc == 0xB2B2)
    }
}

/// The transport asks the engine, before `srtp_unprotect`, whether an SSRC is expected.
@Suite struct ExpectedSsrcTests {
    @Test func producerAndRtxSsrcsAreExpectedOnTheirTransportOnly() throws {
        let h = EngineHarness()
        let p = try h.engine.addProducer(ProducerParameters(
            transport: h.publisher, kind: .video, ssrc: 0x1111, rtxSsrc: 0x2222, payloadType: 96,
            clockRate: 90_000, codec: .vp8, keyFrameRequest: .pli))
        let other = h.subscriber()
        #expect(h.engine.expectsSsrc(0x1111, on: h.publisher))
        #expect(h.engine.expectsSsrc(0x2222, on: h.publisher))
        #expect(!h.engine.expectsSsrc(0x3333, on: h.publisher))
        #expect(!h.engine.expectsSsrc(0x1111, on: other))
        #expect(!h.engine.expectsSsrc(0, on: h.publisher))
        h.engine.removeProducer(p)
        #expect(!h.engine.expectsSsrc(0x1111, on: h.publisher))
        #expect(!h.engine.expectsSsrc(0x2222, on: h.publisher))
    }

    @Test func ssrcZeroIsAnOrdinarySsrc() throws {
        let h = EngineHarness()
        _ = try h.producer(ssrc: 0)
        #expect(h.engine.expectsSsrc(0, on: h.publisher))
    }

    @Test func rtxSsrcEqualToThePrimaryIsRefused() throws {
        let h = EngineHarness()
        #expect(throws: MediaError.ssrcInUse(0x1111)) {
            _ = try h.engine.addProducer(ProducerParameters(
                transport: h.publisher, kind: .video, ssrc: 0x1111, rtxSsrc: 0x1111, payloadType: 96,
                clockRate: 90_000, codec: .vp8, keyFrameRequest: .pli))
        }
    }

    @Test func unknownTransportExpectsNothing() {
        let h = EngineHarness()
        #expect(!h.engine.expectsSsrc(1, on: TransportIndex(slot: 999, generation: 0)))
        #expect(!h.engine.expectsSsrc(1, on: TransportIndex(slot: UInt32.max, generation: UInt32.max)))
    }
}
