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
}
