import Testing
@testable import MinatoMedia
import MinatoWire

/// RTCP costs what the packet is, not what it claims: a transport-wide feedback claiming more
/// packets than the estimator remembers is dropped before it is walked, each transport's RTCP
/// is held to a budget of packets and work per second, and a NACK stops being looked up once
/// the consumer's resend budget is spent. On a simulated clock.
@Suite struct RtcpBudgetTests {
    /// A transport-wide feedback packet claiming `count` packets, all lost, in run-length chunks
    /// of at most 8191 (a valid packet: the chunks encode exactly `count` statuses).
    static func lostRun(count: Int, base: UInt16 = 0) -> [UInt8] {
        var chunks: [UInt8] = []
        var left = count
        while left > 0 {
            let run = min(left, 0x1FFF)
            chunks += [UInt8(run >> 8), UInt8(run & 0xFF)]  // symbol 0 (not received)
            left -= run
        }
        var b: [UInt8] = [0x8F, 205, 0, 0, 0, 0, 0xAB, 0xCD, 0, 0, 0x50, 0x00,
                          UInt8(base >> 8), UInt8(base & 0xFF), UInt8(count >> 8), UInt8(count & 0xFF), 0, 0, 1, 0]
        b += chunks
        while b.count % 4 != 0 { b.append(0) }
        let words = b.count / 4 - 1
        b[2] = UInt8(words >> 8); b[3] = UInt8(words & 0xFF)
        return b
    }

    static func parse(_ bytes: [UInt8], maxStatusCount: Int = 0xFFFF) -> Int? {
        bytes.withUnsafeBytes { b in
            var it = RtcpIterator(b)
            guard let p = it.next() else { return nil }
            return TransportFeedback(p, maxStatusCount: maxStatusCount)?.statusCount
        }
    }

    @Test func aFortyBytePacketCanClaimSixtyFiveThousandStatusesAndTheCapRefusesIt() {
        let maximal = Self.lostRun(count: 0xFFFF)
        #expect(maximal.count == 40)
        #expect(Self.parse(maximal) == 0xFFFF)  // valid on the wire
        #expect(Self.parse(maximal, maxStatusCount: SendSideEstimator.historySize) == nil)
        #expect(Self.parse(Self.lostRun(count: SendSideEstimator.historySize), maxStatusCount: SendSideEstimator.historySize)
                == SendSideEstimator.historySize)
    }

    @Test func aMaximalClaimFromASubscriberIsDroppedAsInvalidAndMovesNothing() throws {
        let rig = try AllocationTests.Rig()
        rig.run(ms: 500) { _ in false }
        let t = Int(rig.sub.slot)
        let before = try #require(rig.h.engine.transports[t].estimator?.estimate)
        var packet = Self.lostRun(count: 0xFFFF, base: rig.twccNext)
        for _ in 0..<10 {
            packet.withUnsafeMutableBytes { rig.h.engine.handleRtcp(from: rig.sub, packet: UnsafeRawBufferPointer($0), now: rig.h.now) }
        }
        #expect(rig.h.engine.drops(.invalidFeedback) == 10)
        #expect(rig.h.engine.transports[t].estimator?.estimate == before)
    }

    @Test func feedbackToATransportWithoutAnEstimatorIsNotParsed() throws {
        let h = EngineHarness()
        var packet = Self.lostRun(count: 0xFFFF)
        packet.withUnsafeMutableBytes { h.engine.handleRtcp(from: h.publisher, packet: UnsafeRawBufferPointer($0), now: h.now) }
        #expect(h.engine.drops(.invalidFeedback) == 0)
        #expect(h.engine.drops(.rtcpOverBudget) == 0)
    }

    @Test func compoundPacketsBeyondTheBudgetAreDroppedUntilItRefills() {
        var tuning = EngineTuning()
        tuning.rtcpPacketsPerSecond = 10
        let engine = MediaEngine(tuning: tuning)
        let t = engine.addTransport(router: RouterId(1), feedbackSsrc: 1)
        var rr = [UInt8](repeating: 0, count: 8)
        _ = rr.withUnsafeMutableBytes { RtcpWriter.receiverReport(into: $0, senderSsrc: 7, block: nil) }
        let now: Nanoseconds = 5_000_000_000
        for _ in 0..<15 { rr.withUnsafeBytes { engine.handleRtcp(from: t, packet: $0, now: now) } }
        #expect(engine.drops(.rtcpOverBudget) == 5)
        // 100 ms later one more fits (10 a second), not two.
        for _ in 0..<2 { rr.withUnsafeBytes { engine.handleRtcp(from: t, packet: $0, now: now + 100_000_000) } }
        #expect(engine.drops(.rtcpOverBudget) == 6)
        // A second later the bucket is full again: 10, never more.
        for _ in 0..<12 { rr.withUnsafeBytes { engine.handleRtcp(from: t, packet: $0, now: now + 2_000_000_000) } }
        #expect(engine.drops(.rtcpOverBudget) == 8)
    }

    @Test func feedbackIsPricedByTheStatusesItClaimsBeforeItIsWalked() throws {
        var tuning = EngineTuning()
        tuning.rtcpWorkPerSecond = 3000
        let rig = try AllocationTests.Rig(tuning: tuning)
        let t = Int(rig.sub.slot)
        let before = try #require(rig.h.engine.transports[t].estimator?.estimate)
        // 4000 lost packets: valid (within the estimator's history) but over a 3000-unit budget.
        var packet = Self.lostRun(count: 4000, base: rig.twccNext)
        packet.withUnsafeMutableBytes { rig.h.engine.handleRtcp(from: rig.sub, packet: UnsafeRawBufferPointer($0), now: rig.h.now) }
        #expect(rig.h.engine.drops(.rtcpOverBudget) == 1)
        #expect(rig.h.engine.drops(.invalidFeedback) == 0)
        #expect(rig.h.engine.transports[t].estimator?.estimate == before)
        // 2000 fit.
        packet = Self.lostRun(count: 2000, base: rig.twccNext)
        packet.withUnsafeMutableBytes { rig.h.engine.handleRtcp(from: rig.sub, packet: UnsafeRawBufferPointer($0), now: rig.h.now) }
        #expect(rig.h.engine.drops(.rtcpOverBudget) == 1)
    }

    @Test func aNackStopsBeingLookedUpWhenTheResendBudgetIsSpent() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let sub = h.subscriber()
        _ = try h.consumer(p, on: sub, ssrc: 0x2222)
        for i in 0..<5 { h.send(keyframe: i == 0) }
        // 300 pairs, every bit set: 5100 packets asked for in one NACK.
        var nack: [UInt8] = [0x81, 205, 0, 0, 0, 0, 0xAB, 0xCD, 0, 0, 0x22, 0x22]
        for i in 0..<300 { nack += [UInt8((i * 17) >> 8 & 0xFF), UInt8((i * 17) & 0xFF), 0xFF, 0xFF] }
        let words = nack.count / 4 - 1
        nack[2] = UInt8(words >> 8); nack[3] = UInt8(words & 0xFF)
        nack.withUnsafeBytes { h.engine.handleRtcp(from: sub, packet: $0, now: h.now) }
        let looked = h.engine.retransmissionHits + h.engine.retransmissionMisses
        #expect(looked == UInt64(MediaEngine.resendBudget))
        #expect(h.engine.retransmissionsThrottled == 1)
    }

    @Test func probesNeedAOneByteHeaderExtensionId() {
        #expect(!MediaEngine.canCarryProbe(extensionId: 0))
        #expect(MediaEngine.canCarryProbe(extensionId: 1))
        #expect(MediaEngine.canCarryProbe(extensionId: 14))
        #expect(!MediaEngine.canCarryProbe(extensionId: 15))
        #expect(!MediaEngine.canCarryProbe(extensionId: 200))
    }

    @Test func theBudgetRefillsByTheNanosecondWithoutLosingFractions() {
        var budget = RtcpBudget(packetsPerSecond: 1000, workPerSecond: 1000)
        var now: Nanoseconds = 10_000_000_000
        var admitted = 0
        while budget.admitPacket(now: now) { admitted += 1 }
        #expect(admitted == 1000)
        // 10 s in steps of 0.3 ms: 1 packet per ms refills, however the steps fall.
        admitted = 0
        for _ in 0..<33_333 {
            now += 300_000
            while budget.admitPacket(now: now) { admitted += 1 }
        }
        #expect(admitted == 9999)  // 33,333 × 0.3 ms = 9999.9 ms
        let spentAll = budget.spend(1000), spentMore = budget.spend(1)
        #expect(spentAll && !spentMore)
    }
}
