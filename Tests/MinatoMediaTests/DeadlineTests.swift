import Testing
@testable import MinatoMedia
import MinatoWire

/// Timers by deadline: the engine reports when it next has work, does none before that, and
/// reports nothing at all when idle (so its worker arms no timer).
@Suite struct DeadlineTests {
    @Test func anEmptyEngineHasNoDeadline() {
        let engine = MediaEngine()
        #expect(engine.nextDeadline == nil)
        engine.handleTimeout(now: 5_000_000_000)
        #expect(engine.transmitCount == 0 && engine.nextDeadline == nil)
    }

    @Test func aRoomWithoutTrafficStopsWakingAfterOneRetryCheck() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        #expect(h.drain().filter(\.isPli).count == 1)      // the first request goes out at once
        // One check when a retry would be due; the publisher sent nothing, so no retry.
        let check = h.now + KeyFrameRequester.defaultRetryInterval
        #expect(h.engine.nextDeadline == check)
        h.engine.handleTimeout(now: check)
        #expect(h.drain().isEmpty && h.engine.nextDeadline == nil)
        for _ in 0..<10 {
            h.now &+= 1_000_000_000
            h.engine.handleTimeout(now: h.now)
        }
        #expect(h.drain().isEmpty && h.engine.nextDeadline == nil)
    }

    @Test func aThrottledKeyFrameRequestSetsTheDeadlineAndNothingRunsBeforeIt() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        let sentAt = h.now
        _ = h.drain()
        h.now &+= 100_000_000
        h.engine.requestKeyFrame(p, now: h.now)            // throttled: remembered
        let due = sentAt + KeyFrameRequester.defaultInterval
        #expect(h.engine.nextDeadline == due)
        h.engine.handleTimeout(now: due - 1)
        #expect(h.drain().isEmpty && h.engine.nextDeadline == due)
        h.engine.handleTimeout(now: due)
        #expect(h.drain().filter(\.isPli).count == 1)
        // Next: the check whether that request brought a keyframe.
        #expect(h.engine.nextDeadline == due + KeyFrameRequester.defaultRetryInterval)
    }

    @Test func theSoonestOfSeveralProducersIsReported() throws {
        let h = EngineHarness()
        let a = try h.producer(ssrc: 0x1111)
        let b = try h.producer(ssrc: 0x2222)
        let t = h.subscriber()
        _ = try h.consumer(a, on: t, ssrc: 0xA)
        h.now &+= 200_000_000
        _ = try h.consumer(b, on: t, ssrc: 0xB)            // b's first request: 200 ms after a's
        let aSent = h.now - 200_000_000, bSent = h.now
        _ = h.drain()
        h.now &+= 10_000_000
        h.engine.requestKeyFrame(b, now: h.now)
        h.engine.requestKeyFrame(a, now: h.now)
        #expect(h.engine.nextDeadline == aSent + KeyFrameRequester.defaultInterval)
        h.engine.handleTimeout(now: aSent + KeyFrameRequester.defaultInterval)
        #expect(h.drain().filter(\.isPli).count == 1)
        #expect(h.engine.nextDeadline == bSent + KeyFrameRequester.defaultInterval)
        h.engine.handleTimeout(now: bSent + KeyFrameRequester.defaultInterval)
        #expect(h.drain().filter(\.isPli).count == 1)
        #expect(h.engine.nextDeadline == aSent + KeyFrameRequester.defaultInterval + KeyFrameRequester.defaultRetryInterval)
    }

    @Test func receiverReportsStopWhenTheTrafficStops() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        h.send(keyframe: true)
        let firstReport = h.now + MediaEngine.reportInterval
        #expect(h.engine.nextDeadline == firstReport)
        h.engine.handleTimeout(now: firstReport)
        #expect(h.drain().count == 1)                       // the receiver report
        // Nothing arrived since: the next deadline reports nothing and disarms.
        let second = try #require(h.engine.nextDeadline)
        #expect(second == firstReport + MediaEngine.reportInterval)
        h.now = second
        h.engine.handleTimeout(now: second)
        #expect(h.drain().isEmpty && h.engine.nextDeadline == nil)
        // The next packet arms it again.
        h.send(keyframe: false)
        #expect(h.engine.nextDeadline == h.now + MediaEngine.reportInterval)
    }

    @Test func keyFrameRequesterReportsItsDeadlineWhilePendingOrAwaiting() {
        var k = KeyFrameRequester(interval: 100, retryInterval: 1_000)
        #expect(k.deadline == nil)
        let first = k.request(now: 1_000)
        #expect(first && k.deadline == 2_000)               // retry check
        let throttled = k.request(now: 1_050)
        #expect(!throttled && k.deadline == 1_100)
        let early = k.poll(now: 1_099)
        let due = k.poll(now: 1_100)
        #expect(early == nil && due == .throttled)
        #expect(k.deadline == 2_100)
        #expect(k.poll(now: 2_100) == .retry)
        k.keyFrameArrived()
        #expect(k.deadline == nil && k.poll(now: 9_000) == nil)
    }
}
