import Testing
@testable import MinatoMedia
import MinatoWire

/// A consumer restarted because its transport (re)connected waits for a keyframe and then
/// continues its sequence numbers without a gap for the packets dropped meanwhile.
@Suite struct RestartContinuityTests {
    @Test func aRestartLeavesNoSequenceGap() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let sub = h.subscriber()
        _ = try h.consumer(p, on: sub, ssrc: 0x2222)
        _ = h.drain()
        var last: UInt16?
        for i in 0..<5 {
            for sent in h.send(keyframe: i == 0) where !sent.isRtcp { last = sent.rtp?.seq }
        }
        let before = try #require(last)
        h.engine.restartConsumers(on: sub, now: h.now)
        _ = h.drain()
        for _ in 0..<7 {                                             // deltas dropped while waiting
            let sent = h.send()
            #expect(!sent.contains { !$0.isRtcp })
        }
        let resumed = h.send(keyframe: true).compactMap(\.rtp)
        #expect(resumed.first?.seq == before &+ 1)
    }

    /// A new consumer with an ended consumer's SSRC on the same transport (a WHEP m-section
    /// taking its publisher's next publication) continues that stream: sequence last+1 and a
    /// timestamp moved on by the time between, so the player's jitter buffer sees no jump.
    @Test func aNewConsumerWithTheSameSsrcContinuesTheEndedStream() throws {
        let h = EngineHarness()
        let first = try h.producer()
        let sub = h.subscriber()
        let c1 = try h.consumer(first, on: sub, ssrc: 0x3333)
        _ = h.drain()
        var last: (seq: UInt16, ts: UInt32)?
        for i in 0..<5 {
            for sent in h.send(keyframe: i == 0) { if let r = sent.rtp, r.ssrc == 0x3333 { last = (r.seq, r.ts) } }
        }
        let before = try #require(last)
        h.engine.removeConsumer(c1)
        h.engine.removeProducer(first)
        let second = try h.producer(ssrc: 0x4444)
        _ = try h.consumer(second, on: sub, ssrc: 0x3333)
        _ = h.drain()
        let resumed = h.send(ssrc: 0x4444, keyframe: true).compactMap(\.rtp).filter { $0.ssrc == 0x3333 }
        let next = try #require(resumed.first)
        #expect(next.seq == before.seq &+ 1)
        #expect(next.ts &- before.ts == 2970)                      // 33 ms at 90 kHz
        // Another SSRC starts a stream of its own.
        let other = try h.consumer(second, on: sub, ssrc: 0x5555)
        _ = other
        _ = h.drain()
        let fresh = h.send(ssrc: 0x4444, keyframe: true).compactMap(\.rtp).filter { $0.ssrc == 0x5555 }
        #expect(fresh.count == 1)
    }
}
