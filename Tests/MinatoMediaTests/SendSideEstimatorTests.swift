import Testing
@testable import MinatoMedia
import MinatoWire

/// The subscriber-side estimate on simulated links: a sender picks the highest of three
/// simulcast layer rates that fits the estimate (as the allocator does), packets cross a link
/// (a policer that drops without a queue, or a bottleneck with a queue), and the receiver's
/// transport-wide feedback, written by the real writer every 50 ms, is fed back.
@Suite struct SendSideEstimatorTests {
    static let layers = [150_000, 500_000, 1_500_000]

    /// A link and the receiver at its end.
    struct Link {
        /// Policer: token bucket of `rate` bits/s and a small burst, no queue. Queue: a FIFO
        /// draining at `rate` (arrival = when the packet leaves the queue).
        var policer: Bool
        var rate: Int
        /// The policer's bucket in bits (nftables' byte limits hold about a second of traffic).
        var burst = 6 * 1200.0 * 8
        var tokens = 0.0
        var lastFill: Nanoseconds = 0
        var queueFree: Nanoseconds = 0
        let propagation: Nanoseconds = 20_000_000

        /// When the packet arrives; nil: dropped.
        mutating func carry(bytes: Int, at now: Nanoseconds) -> Nanoseconds? {
            if policer {
                tokens = min(burst, tokens + Double(now &- lastFill) / 1e9 * Double(rate))
                lastFill = now
                guard tokens >= Double(bytes * 8) else { return nil }
                tokens -= Double(bytes * 8)
                return now + propagation
            }
            let start = max(now, queueFree)
            queueFree = start + UInt64(Double(bytes * 8) / Double(rate) * 1e9)
            // A queue longer than 500 ms overflows.
            guard queueFree - now < 500_000_000 else { queueFree = start; return nil }
            return queueFree + propagation
        }
    }

    /// Runs `seconds` of traffic; returns the estimates every 250 ms and the layer chosen at the end.
    static func run(_ estimator: inout SendSideEstimator, link: inout Link, seconds: Double, from start: Nanoseconds,
                    sequence: inout UInt16) -> (estimates: [Int], layer: Int, end: Nanoseconds) {
        var now = start
        var pending: [(UInt16, Nanoseconds?)] = []
        var estimates: [Int] = []
        var nextFeedback = now + 50_000_000
        var nextSample = now
        let end = start + UInt64(seconds * 1e9)
        var layer = 0
        var carry = 0.0
        while now < end {
            layer = layers.lastIndex { $0 <= estimator.estimate } ?? 0
            tick(&estimator, link: &link, rate: layers[layer], carry: &carry, now: now, sequence: &sequence, pending: &pending)
            now += 5_000_000
            if now >= nextFeedback {
                // The receiver reports what arrived by now, and the losses before it.
                let lastArrived = pending.lastIndex { $0.1.map { $0 <= now } ?? false }
                if let lastArrived {
                    feed(&estimator, Array(pending[...lastArrived]), now: now)
                    pending.removeFirst(lastArrived + 1)
                }
                nextFeedback = now + 50_000_000
            }
            if now >= nextSample {
                estimates.append(estimator.estimate)
                nextSample = now + 250_000_000
            }
        }
        return (estimates, layers.lastIndex { $0 <= estimator.estimate } ?? 0, now)
    }

    /// Hands the receiver's feedback for `reports` (consecutive sequence numbers) to the estimator.
    static func feed(_ estimator: inout SendSideEstimator, _ reports: [(UInt16, Nanoseconds?)], now: Nanoseconds) {
        let bytes = transportFeedbackPacket(base: reports[0].0, arrivals: reports.map(\.1), fallback: now)
        bytes.withUnsafeBytes { b in
            var it = RtcpIterator(b)
            while let p = it.next() { if let f = TransportFeedback(p) { _ = estimator.received(f, now: now) } }
        }
    }

    /// 5 ms of sending at `rate` in 1200-byte packets (fractions carried in `carry`): each one
    /// into the estimator's history and across the link, its fate kept in `pending`.
    static func tick(_ estimator: inout SendSideEstimator, link: inout Link, rate: Int, carry: inout Double,
                     now: Nanoseconds, sequence: inout UInt16, pending: inout [(UInt16, Nanoseconds?)]) {
        carry += Double(rate) / 8 * 0.005
        while carry >= 1200 {
            carry -= 1200
            estimator.sent(sequence, bytes: 1200, at: now)
            pending.append((sequence, link.carry(bytes: 1200, at: now)))
            sequence &+= 1
        }
    }

    @Test func aPolicerBringsTheEstimateDownToTheLowestLayerQuickly() {
        var estimator = SendSideEstimator(initial: 2_000_000, minimum: 50_000, maximum: 20_000_000)
        var link = Link(policer: true, rate: 2_500_000)
        var seq: UInt16 = 65_000
        let clean = Self.run(&estimator, link: &link, seconds: 3, from: 1_000_000_000, sequence: &seq)
        #expect(clean.layer == 2)
        link.rate = 300_000
        let policed = Self.run(&estimator, link: &link, seconds: 5, from: clean.end, sequence: &seq)
        print("[estimator] policer 300 kbit/s, estimate every 250 ms: \(policed.estimates)")
        #expect(policed.layer == 0)
        // Within 2 s the estimate fits the lowest layer and stays below the policer's rate.
        let settled = policed.estimates.firstIndex { $0 < Self.layers[1] }
        #expect(settled.map { $0 <= 8 } == true)
        #expect(policed.estimates.suffix(8).allSatisfy { $0 < Self.layers[1] })
    }

    @Test func aQueueShowsAsDelayBeforeLoss() {
        var estimator = SendSideEstimator(initial: 2_000_000, minimum: 50_000, maximum: 20_000_000)
        var link = Link(policer: false, rate: 800_000)
        var seq: UInt16 = 10
        let run = Self.run(&estimator, link: &link, seconds: 6, from: 1_000_000_000, sequence: &seq)
        print("[estimator] 800 kbit/s bottleneck with a queue, estimate every 250 ms: \(run.estimates)")
        #expect(run.layer == 1)
        #expect(run.estimates.suffix(8).allSatisfy { $0 < 1_000_000 })
    }

    @Test func aCleanProbeRaisesTheEstimateAndALossyOneDoesNot() {
        var estimator = SendSideEstimator(initial: 200_000, minimum: 50_000, maximum: 20_000_000)
        var link = Link(policer: true, rate: 300_000)
        var seq: UInt16 = 0
        var run = Self.run(&estimator, link: &link, seconds: 2, from: 1_000_000_000, sequence: &seq)
        // Behind the policer a probe at 600 kbit/s loses packets: it fails, the estimate stays.
        estimator.startProbe(rate: 600_000, now: run.end)
        run = Self.probe(&estimator, link: &link, rate: 600_000, from: run.end, sequence: &seq)
        #expect(estimator.failedProbes == 1)
        #expect(estimator.estimate < 500_000)
        // The policer goes: the next probe (allowed 6 s after a failure) succeeds.
        link.rate = 10_000_000
        #expect(estimator.nextProbeAllowed == estimator.lastProbeEnd + 6_000_000_000)
        estimator.startProbe(rate: 1_800_000, now: run.end)
        run = Self.probe(&estimator, link: &link, rate: 1_800_000, from: run.end, sequence: &seq)
        print("[estimator] after a clean probe at 1.8 Mbit/s: \(estimator.estimate)")
        #expect(estimator.failedProbes == 0)
        #expect(estimator.estimate >= 1_500_000)
        // After a probe that fits, the next layer up may be tried a second later.
        #expect(estimator.nextProbeAllowed == estimator.lastProbeEnd + 1_000_000_000)
    }

    @Test func aProbeThatFitsInAPolicersBurstFailsOnItsSecondHalfAndCostsTheEstimateNothing() {
        var estimator = SendSideEstimator(initial: 200_000, minimum: 50_000, maximum: 20_000_000)
        // One second of 300 kbit/s as burst, full after seconds at 150 kbit/s.
        var link = Link(policer: true, rate: 300_000, burst: 300_000)
        var seq: UInt16 = 0
        var run = Self.run(&estimator, link: &link, seconds: 3, from: 1_000_000_000, sequence: &seq)
        let before = estimator.estimate
        estimator.startProbe(rate: 1_500_000, now: run.end)
        // The probe empties the bucket, and the retransmissions of the media it cost go out into
        // it at once (Chromium behind a 300 kbit/s policer: 10 or so, lost again; they cut the
        // estimate from 216 to 112 kbit/s before their losses were the probe's).
        run = Self.probe(&estimator, link: &link, rate: 1_500_000, from: run.end, sequence: &seq, repairs: 10)
        let after = estimator.estimate
        run = Self.run(&estimator, link: &link, seconds: 1, from: run.end, sequence: &seq)
        print("[estimator] probe at 1.5 Mbit/s into a 300 kbit/s policer with a 1 s burst, then 10 repairs: failed \(estimator.failedProbes), estimate \(before) before, \(after) after the probe, \(estimator.estimate) a second later")
        #expect(estimator.failedProbes == 1)
        #expect(after < 500_000)
        // The probe's own losses and its repairs' do not lower the estimate: a failed probe
        // means no more room, not less.
        #expect(after >= before)
        #expect(estimator.estimate >= before)
    }

    @Test func aProbeIntoAQueueFailsWithoutLoweringTheEstimate() {
        var estimator = SendSideEstimator(initial: 600_000, minimum: 50_000, maximum: 20_000_000)
        var link = Link(policer: false, rate: 800_000)
        var seq: UInt16 = 0
        var run = Self.run(&estimator, link: &link, seconds: 4, from: 1_000_000_000, sequence: &seq)
        let before = estimator.estimate
        estimator.startProbe(rate: 2_000_000, now: run.end)
        run = Self.probe(&estimator, link: &link, rate: 2_000_000, from: run.end, sequence: &seq)
        print("[estimator] probe at 2 Mbit/s into an 800 kbit/s queue: failed \(estimator.failedProbes), estimate \(estimator.estimate) (before it \(before))")
        #expect(estimator.failedProbes == 1)
        #expect(estimator.estimate >= before)
    }

    /// A policer whose bucket (a second of its rate) filled while the subscriber got less than
    /// its rate, probed at 1.9 times that rate (a probe for the whole lowest layer of a small
    /// camera, issue 25 item 6): a one-second probe fits in the burst plus a second of the
    /// rate and succeeded, and the upgrade after it then lost for a second. A probe must run
    /// long enough to find such a policer.
    @Test func aProbeUnderTwiceAFullPolicersRateFails() {
        var estimator = SendSideEstimator(initial: 200_000, minimum: 50_000, maximum: 20_000_000)
        var link = Link(policer: true, rate: 400_000)
        link.burst = 400_000
        var seq: UInt16 = 0
        // 4 s at the lowest layer (150 kbit/s, under the policer): the bucket is full.
        var run = Self.run(&estimator, link: &link, seconds: 4, from: 1_000_000_000, sequence: &seq)
        let before = estimator.estimate
        #expect(before < 400_000)
        estimator.startProbe(rate: 760_000, now: run.end)
        run = Self.probe(&estimator, link: &link, rate: 760_000, from: run.end, sequence: &seq)
        print("[estimator] probe at 760 kbit/s into a full 400 kbit/s policer: failed \(estimator.failedProbes), estimate \(estimator.estimate) (before it \(before))")
        #expect(estimator.failedProbes == 1)
        #expect(estimator.estimate < 400_000)
    }

    /// A 160-wide layer behind a policer between its lowest temporal layer (25 kbit/s) and the
    /// next (47 kbit/s, taken when the estimate holds 15% more), as in issue 25 item 6's test:
    /// the estimate grows into T0+T1, which loses. Once it has, the loss ceiling keeps it from
    /// growing back into the same wall for a minute, then two: at most 2 losing tries in 150 s
    /// (1 here). Without the ceiling the estimate came back every 35 s here (3 tries), every
    /// 10–20 s in the interop test, each try a 0.6–0.8 s freeze for the viewer. A probe that
    /// succeeds above the ceiling lifts it.
    @Test func aRateThatLostIsNotTriedAgainForAMinute() {
        var estimator = SendSideEstimator(initial: 30_000, minimum: 30_000, maximum: 20_000_000)
        var link = Link(policer: true, rate: 41_000)
        link.burst = 41_000
        link.tokens = 41_000
        var seq: UInt16 = 0
        var now: Nanoseconds = 1_000_000_000
        var pending: [(UInt16, Nanoseconds?)] = []
        var carry = 0.0
        var high = false
        var tries: [Double] = []
        while now < 151_000_000_000 {
            let wantsHigh = estimator.estimate >= 54_000
            if wantsHigh, !high { tries.append(Double(now) / 1e9) }
            high = wantsHigh
            Self.tick(&estimator, link: &link, rate: high ? 47_000 : 25_000, carry: &carry, now: now,
                      sequence: &seq, pending: &pending)
            now += 5_000_000
            if now % 50_000_000 == 0, let last = pending.lastIndex(where: { $0.1.map { $0 <= now } ?? false }) {
                Self.feed(&estimator, Array(pending[...last]), now: now)
                pending.removeFirst(last + 1)
            }
        }
        print("[estimator] T0 25 / T0+T1 47 kbit/s behind a 41 kbit/s policer: tries of T0+T1 at \(tries) s; ceiling \(estimator.lossCeiling)")
        #expect(tries.count >= 1 && tries.count <= 2, "tries at \(tries)")
        if tries.count == 2 { #expect(tries[1] - tries[0] >= 60) }
        #expect(estimator.lossCeiling > 0)
        // The policer goes; a probe above the ceiling succeeds and lifts it.
        link.rate = 10_000_000
        link.burst = 100_000
        estimator.startProbe(rate: 120_000, now: now)
        _ = Self.probe(&estimator, link: &link, rate: 120_000, from: now, sequence: &seq)
        #expect(estimator.failedProbes == 0)
        #expect(estimator.lossCeiling == 0)
        #expect(estimator.estimate >= 100_000)
    }

    /// Sends at `rate` while the probe runs (as the engine's padding: it stops when the probe
    /// ends early on losses), then at the lowest layer until 400 ms after the probe's duration,
    /// with feedback. `repairs`: packets sent at once when the probe has ended (the
    /// retransmissions of the media it cost, NACKed meanwhile).
    static func probe(_ estimator: inout SendSideEstimator, link: inout Link, rate: Int, from start: Nanoseconds,
                      sequence: inout UInt16, repairs: Int = 0) -> (estimates: [Int], layer: Int, end: Nanoseconds) {
        var now = start
        var pending: [(UInt16, Nanoseconds?)] = []
        var carry = 0.0
        var repairsLeft = repairs
        while now < start + SendSideEstimator.probeDuration + 400_000_000 {
            let r = estimator.probing(at: now) ? rate : layers[0]
            if estimator.probeRate == 0, repairsLeft > 0 {
                for _ in 0..<repairsLeft {
                    estimator.sent(sequence, bytes: 1200, at: now)
                    pending.append((sequence, link.carry(bytes: 1200, at: now)))
                    sequence &+= 1
                }
                repairsLeft = 0
            }
            tick(&estimator, link: &link, rate: r, carry: &carry, now: now, sequence: &sequence, pending: &pending)
            now += 5_000_000
            if (now - start) % 50_000_000 == 0, let last = pending.lastIndex(where: { $0.1.map { $0 <= now } ?? false }) {
                feed(&estimator, Array(pending[...last]), now: now)
                pending.removeFirst(last + 1)
            }
        }
        now += 100_000_000
        if !pending.isEmpty { feed(&estimator, pending, now: now) }
        return ([estimator.estimate], 0, now)
    }
}
