internal import MinatoWire

/// The bandwidth estimate of one subscriber transport, from the transport-wide feedback its
/// receiver sends about what the SFU sent (a send-side estimator after GCC,
/// draft-ietf-rmcat-gcc-02, reduced to what an SFU choosing simulcast layers needs):
/// - **delay gradient**: packets sent within 5 ms form a group; the growth of one-way delay
///   between groups is accumulated, smoothed and its trend (a least-squares slope over the last
///   20 groups) compared with an adaptive threshold: a queue building up is *overuse*, and the
///   estimate drops to 85% of what the receiver got;
/// - **loss**: per feedback window of at least 100 ms and 20 packets, more than 10% lost
///   lowers the estimate by half the loss ratio; under 2% lets it grow 8% a second, never
///   beyond 1.5 times what the receiver got plus 10 kbit/s (no growth without evidence);
/// - **loss ceiling**: the rate the receiver got when such losses began is remembered, and for
///   `ceilingHold` (60 s; doubled, up to 4 min, each time the path loses again at the end of a
///   hold) growth stops at 90% of it. Without it the estimate crept back up within 10–20 s to
///   the rate that had just failed, the allocator tried that temporal layer again, and each
///   try cost the viewer a freeze of 0.6–0.8 s (a policer between a layer's lowest temporal
///   layer and the next). A probe that succeeds above the ceiling lifts it;
/// - **probing**: to learn whether a higher rate fits, the engine sends padding for
///   `probeDuration` at a rate the allocator asks for (`startProbe`); if that window's loss,
///   and its second half's alone, stay under 5% and no overuse shows, the estimate jumps to
///   the rate the receiver got. A probe's losses judge only the probe: the media sent while it
///   ran, and in `probeAftermath` after one that failed, counts in no loss window.
/// A policer (drops without a queue) shows up as loss only; a bottleneck with a buffer as delay.
/// Storage is allocated once; `sent` and `received` allocate nothing. Sans-IO.
struct SendSideEstimator {
    static let historySize = 4096
    private static let mask = historySize - 1
    /// What was sent, by transport-wide sequence number (`& mask`): when, how many bytes, and
    /// the full number (to tell a lap-old entry from this one).
    private var sentAt = ContiguousArray<Nanoseconds>(repeating: 0, count: historySize)
    private var sentBytes = ContiguousArray<UInt16>(repeating: 0, count: historySize)
    private var sentSequence = ContiguousArray<UInt16>(repeating: 0, count: historySize)

    let minimum: Int
    let maximum: Int
    /// The estimate in bits per second.
    private(set) var estimate: Int
    /// What the receiver got over the last 500 ms of arrivals (bits per second); 0 before any feedback.
    private(set) var ackedRate = 0
    /// The same over the last 200 ms: what a link that just got narrower still delivers.
    private(set) var recentAckedRate = 0
    private(set) var lastLossRatio = 0.0
    /// The receiver sent feedback at least once (before, the estimate is only the initial guess).
    private(set) var hasFeedback = false
    private(set) var overusing = false

    // Loss window.
    private var windowStart: Nanoseconds = 0
    private var windowPackets = 0
    private var windowLost = 0
    // Acked rate: bytes received per 100 ms bucket, over the last 5 buckets.
    private var ackBuckets = (0, 0, 0, 0, 0)
    private var ackBucketStart: Nanoseconds = 0
    /// When the first acknowledged packet was counted (the rate's window is shorter before 500 ms).
    private var ackStart: Nanoseconds = 0
    private static let ackBucket: Nanoseconds = 100_000_000
    // Delay gradient.
    private var groupSend: Nanoseconds = 0
    private var groupArrival: Nanoseconds = 0
    private var groupStarted = false
    private var previousGroupSend: Nanoseconds = 0
    private var previousGroupArrival: Nanoseconds = 0
    private var havePreviousGroup = false
    private var accumulatedDelay = 0.0
    private var smoothedDelay = 0.0
    private var trendTimes = ContiguousArray<Double>(repeating: 0, count: 20)
    private var trendDelays = ContiguousArray<Double>(repeating: 0, count: 20)
    private var trendCount = 0
    private var trendNext = 0
    private var firstArrival: Nanoseconds = 0
    private var threshold = 12.5
    private var lastThresholdUpdate: Nanoseconds = 0
    private var overuseCount = 0
    private var lastIncrease: Nanoseconds = 0
    private var lastDecrease: Nanoseconds = 0
    // Loss ceiling.
    /// Growth stops at 90% of this until `ceilingUntil` (0: none).
    private(set) var lossCeiling = 0
    private(set) var ceilingUntil: Nanoseconds = 0
    /// When the losses that set the ceiling began, and how many holds in a row ended in losses.
    private var ceilingSetAt: Nanoseconds = 0
    private var ceilingStrikes = 0
    static let ceilingHold: Nanoseconds = 60_000_000_000
    /// Decreases within this of the first one are one loss episode (one ceiling).
    static let lossEpisode: Nanoseconds = 5_000_000_000
    // Probing.
    /// A probe lasts this long unless its losses end it sooner (`received`). Long enough to
    /// drain the burst of a token-bucket policer (nftables byte limits hold a second of
    /// traffic): a probe at rate p for d seconds fits in a full bucket when p·d ≤ r·(1 + d),
    /// so a one-second probe passed any policer under half its rate, and the probe for the
    /// whole lowest layer of a small camera (1.4 times that layer, at 1.9 times the policer's
    /// rate) succeeded and the upgrade after it lost (issue 25 item 6). At 1.5 s it is found
    /// up to 1.67 times the policer's rate; a probe into a policer ends on its first losses.
    static let probeDuration: Nanoseconds = 1_500_000_000
    /// After a probe that failed, packets sent this long count in no loss window (`received`).
    static let probeAftermath: Nanoseconds = 300_000_000
    /// The rate being probed (bits per second) and the probe's window; 0: none.
    private(set) var probeRate = 0
    private(set) var probeStart: Nanoseconds = 0
    private var probePackets = 0
    private var probeLost = 0
    /// The probe's second half: a token-bucket policer passes the first part from its burst,
    /// so losses there tell whether the rate itself fits.
    private var probeLatePackets = 0
    private var probeLateLost = 0
    private var probeBytes = 0
    private var probeFirstArrival: Nanoseconds = 0
    private var probeLastArrival: Nanoseconds = 0
    private var probeOveruse = false
    /// Probes that failed in a row (the next waits longer; 0 after one that succeeded) and
    /// when the last one ended.
    private(set) var failedProbes = 0
    private(set) var lastProbeEnd: Nanoseconds = 0

    init(initial: Int, minimum: Int, maximum: Int) {
        self.minimum = max(minimum, 10_000)
        self.maximum = max(maximum, self.minimum)
        estimate = min(max(initial, self.minimum), self.maximum)
    }

    /// A packet went out with transport-wide sequence number `sequence`.
    @inline(__always)
    mutating func sent(_ sequence: UInt16, bytes: Int, at now: Nanoseconds) {
        let i = Int(sequence) & Self.mask
        sentAt[i] = max(now, 1)
        sentBytes[i] = UInt16(clamping: bytes)
        sentSequence[i] = sequence
    }

    /// One transport-wide feedback packet from the receiver. Returns true when the estimate changed.
    mutating func received(_ feedback: TransportFeedback, now: Nanoseconds) -> Bool {
        let before = estimate
        hasFeedback = true
        // Arrival times on the receiver's clock, in ns (only differences are used).
        var arrival = Int64(feedback.referenceTime) &* 64_000_000
        for (sequence, fate) in feedback {
            let i = Int(sequence) & Self.mask
            guard sentSequence[i] == sequence, sentAt[i] != 0 else { continue }
            let sendTime = sentAt[i]
            let inProbe = probeRate != 0 && sendTime >= probeStart && sendTime < probeStart &+ Self.probeDuration
            // A probe's losses judge the probe, not the rate that was known to work.
            let late = inProbe && sendTime &- probeStart >= Self.probeDuration / 2
            // Sent while a probe that has ended ran (its last reports): the probe's fate is
            // decided and its losses are not the media's, so they count for neither.
            let afterProbe = probeRate == 0 && probeStart != 0 && sendTime >= probeStart && sendTime < lastProbeEnd
            if afterProbe {
                if fate.received {
                    arrival &+= Int64(fate.delta) &* 250_000
                    sentAt[i] = 0
                }
                continue
            }
            // Sent just after a probe that failed: a policer's bucket that it emptied is still
            // filling, and the retransmissions of the media it cost go out into it at once.
            // Their losses are the probe's too (they cut 216 to 112 kbit/s behind a 300 kbit/s
            // policer); received, they count as usual.
            let aftermath = probeRate == 0 && failedProbes > 0 && sendTime >= lastProbeEnd
                && sendTime &- lastProbeEnd < Self.probeAftermath
            if inProbe { probePackets += 1 } else if !aftermath { windowPackets += 1 }
            if late { probeLatePackets += 1 }
            guard fate.received else {
                if inProbe { probeLost += 1 } else if !aftermath { windowLost += 1 }
                if late { probeLateLost += 1 }
                continue
            }
            arrival &+= Int64(fate.delta) &* 250_000
            let at = UInt64(bitPattern: max(arrival, 1))
            let bytes = Int(sentBytes[i])
            // A probe's bytes say what the path took for 300 ms; counted in the acknowledged
            // rate they would let the loss-based estimate creep past what the media can use.
            if !inProbe { addAcked(bytes, arrival: at) }
            if inProbe {
                probeBytes += bytes
                if probeFirstArrival == 0 { probeFirstArrival = at }
                probeLastArrival = max(probeLastArrival, at)
            }
            delaySample(sent: sendTime, arrived: at, now: now)
            sentAt[i] = 0  // reported: a repeated report is not counted twice
        }
        if windowStart == 0 { windowStart = now }
        if now &- windowStart >= 100_000_000, windowPackets >= 20 {
            lossUpdate(Double(windowLost) / Double(windowPackets), now: now)
            windowStart = now
            windowPackets = 0
            windowLost = 0
        }
        if probeRate != 0 {
            // Losses during the probe end it at once (less harm to the media sharing the link).
            if probeLost >= 3, Double(probeLost) > 0.05 * Double(probePackets) {
                finishProbe(now: now)
            } else if now &- probeStart >= Self.probeDuration &+ 200_000_000 {
                finishProbe(now: now)
            }
        }
        estimate = min(max(estimate, minimum), maximum)
        return estimate != before
    }

    /// Starts probing at `rate` (bits per second, everything sent included) unless one runs.
    mutating func startProbe(rate: Int, now: Nanoseconds) {
        guard probeRate == 0 else { return }
        probeRate = min(rate, maximum)
        probeStart = now
        probePackets = 0
        probeLost = 0
        probeLatePackets = 0
        probeLateLost = 0
        probeBytes = 0
        probeFirstArrival = 0
        probeLastArrival = 0
        probeOveruse = false
    }

    /// True while padding should go out for the probe started at `probeStart`.
    func probing(at now: Nanoseconds) -> Bool { probeRate != 0 && now &- probeStart < Self.probeDuration }

    /// When the next probe may start: 1 s after one that succeeded (the next layer up is
    /// tried at once, as GCC probes further after a probe that fits), 6 s after a failure,
    /// 8 s after more (a link that recovers is found within about 8 s; a failed probe costs a
    /// constrained link under a second of loss, then ends).
    var nextProbeAllowed: Nanoseconds {
        lastProbeEnd &+ (failedProbes == 0 ? 1_000_000_000 : min(3_000_000_000 &<< UInt64(min(failedProbes, 2)), 8_000_000_000))
    }

    /// A probe whose feedback never came (the receiver went away) ends as a failure.
    mutating func expireProbe(now: Nanoseconds) {
        if probeRate != 0, now &- probeStart >= Self.probeDuration &+ 1_000_000_000 { finishProbe(now: now) }
    }

    private mutating func finishProbe(now: Nanoseconds) {
        let loss = probePackets > 0 ? Double(probeLost) / Double(probePackets) : 1
        let lateLoss = probeLatePackets > 0 ? Double(probeLateLost) / Double(probeLatePackets) : 1
        let span = probeLastArrival > probeFirstArrival ? probeLastArrival - probeFirstArrival : 0
        let got = span >= 100_000_000 ? Int(Double(probeBytes) * 8 / (Double(span) / 1e9)) : 0
        if probePackets >= 10, loss < 0.05, lateLoss < 0.05, !probeOveruse, got > 0 {
            estimate = max(estimate, min(got, probeRate))
            failedProbes = 0
            if lossCeiling > 0, estimate >= lossCeiling {
                lossCeiling = 0
                ceilingUntil = 0
                ceilingStrikes = 0
            }
        } else {
            // A queue (delay grew, little loss) delivered about its capacity during the probe:
            // that much fits. Loss without delay is a policer, whose burst makes `got` too high.
            if probeOveruse, loss < 0.05, got > 0 { estimate = max(estimate, got * 85 / 100) }
            failedProbes += 1
        }
        probeRate = 0
        lastProbeEnd = now
    }

    /// Counts a received packet at its arrival time (the receiver's clock): what the path delivered.
    private mutating func addAcked(_ bytes: Int, arrival now: Nanoseconds) {
        if ackBucketStart == 0 {
            ackBucketStart = now
            ackStart = now
        }
        while now &- ackBucketStart >= Self.ackBucket {
            ackBuckets = (0, ackBuckets.0, ackBuckets.1, ackBuckets.2, ackBuckets.3)
            ackBucketStart &+= Self.ackBucket
            if now &- ackBucketStart > 10 * Self.ackBucket { ackBucketStart = now }
        }
        ackBuckets.0 += bytes
        let total = ackBuckets.0 + ackBuckets.1 + ackBuckets.2 + ackBuckets.3 + ackBuckets.4
        // Five buckets of 100 ms; before 500 ms of them, over the time there is.
        let span = min(max(now &- ackStart, Self.ackBucket), 5 * Self.ackBucket)
        ackedRate = Int(clamping: UInt64(total) &* 8 &* 1_000_000_000 / span)
        let recentSpan = min(max(now &- ackStart, Self.ackBucket), 2 * Self.ackBucket)
        recentAckedRate = Int(clamping: UInt64(ackBuckets.0 + ackBuckets.1) &* 8 &* 1_000_000_000 / recentSpan)
    }

    private mutating func lossUpdate(_ ratio: Double, now: Nanoseconds) {
        lastLossRatio = ratio
        if ratio > 0.10 {
            // At most one decrease per 300 ms (the feedback of a decrease takes a round trip).
            if now &- lastDecrease >= 300_000_000 {
                // From what the path delivers now, not half a second ago: one step down to a
                // rate that fits, instead of several (each costing the subscriber a keyframe).
                let base = recentAckedRate > 0 ? min(estimate, recentAckedRate) : estimate
                setCeiling(base, now: now)
                estimate = Int(Double(base) * (1 - 0.5 * ratio))
                lastDecrease = now
            }
        } else if ratio < 0.02, !overusing {
            let elapsed = lastIncrease == 0 ? 0.1 : min(Double(now &- lastIncrease) / 1e9, 1)
            let grown = Int(Double(estimate) * (1 + 0.08 * elapsed))
            var cap = ackedRate > 0 ? ackedRate * 3 / 2 + 10_000 : estimate
            if lossCeiling > 0, now < ceilingUntil { cap = min(cap, lossCeiling / 10 * 9) }
            if grown > estimate { estimate = max(estimate, min(grown, cap)) }
        }
        lastIncrease = now
    }

    /// A loss decrease from `rate` (what the path delivered as the losses came): the first of
    /// an episode sets the ceiling; one that comes when the last hold has just ended (the
    /// estimate grew back into the same wall) doubles the hold.
    private mutating func setCeiling(_ rate: Int, now: Nanoseconds) {
        if ceilingSetAt != 0, now &- ceilingSetAt < Self.lossEpisode { return }
        let again = lossCeiling > 0 && now < ceilingUntil &+ Self.ceilingHold
        ceilingStrikes = again ? min(ceilingStrikes + 1, 3) : 1
        lossCeiling = rate
        ceilingSetAt = now
        ceilingUntil = now &+ (Self.ceilingHold &<< UInt64(ceilingStrikes - 1))
    }

    /// One received packet for the delay-gradient trend (times in ns; arrival on the receiver's clock).
    private mutating func delaySample(sent: Nanoseconds, arrived: Nanoseconds, now: Nanoseconds) {
        if !groupStarted {
            groupStarted = true
            groupSend = sent
            groupArrival = arrived
            return
        }
        if sent >= groupSend, sent &- groupSend < 5_000_000 {
            groupArrival = max(groupArrival, arrived)
            return
        }
        guard sent > groupSend else { return }  // reordered into an earlier group
        if havePreviousGroup {
            let sendDelta = Double(Int64(bitPattern: groupSend &- previousGroupSend)) / 1e6
            let arrivalDelta = Double(Int64(bitPattern: groupArrival &- previousGroupArrival)) / 1e6
            trend(arrivalDelta - sendDelta, arrival: groupArrival, now: now)
        }
        previousGroupSend = groupSend
        previousGroupArrival = groupArrival
        havePreviousGroup = true
        groupSend = sent
        groupArrival = arrived
    }

    private mutating func trend(_ delta: Double, arrival: Nanoseconds, now: Nanoseconds) {
        if firstArrival == 0 { firstArrival = arrival }
        accumulatedDelay += delta
        smoothedDelay = 0.9 * smoothedDelay + 0.1 * accumulatedDelay
        trendTimes[trendNext] = Double(Int64(bitPattern: arrival &- firstArrival)) / 1e6
        trendDelays[trendNext] = smoothedDelay
        trendNext = (trendNext + 1) % trendTimes.count
        trendCount = min(trendCount + 1, trendTimes.count)
        guard trendCount >= trendTimes.count else { return }
        var meanT = 0.0, meanD = 0.0
        for k in 0..<trendCount { meanT += trendTimes[k]; meanD += trendDelays[k] }
        meanT /= Double(trendCount)
        meanD /= Double(trendCount)
        var num = 0.0, den = 0.0
        for k in 0..<trendCount {
            num += (trendTimes[k] - meanT) * (trendDelays[k] - meanD)
            den += (trendTimes[k] - meanT) * (trendTimes[k] - meanT)
        }
        let slope = den > 0 ? num / den : 0
        let modified = slope * 60 * 4
        // Adaptive threshold (GCC §5.4): follows the trend slowly, faster when below it.
        if lastThresholdUpdate == 0 { lastThresholdUpdate = now }
        let dt = min(Double(now &- lastThresholdUpdate) / 1e6, 100)
        if abs(modified) < threshold + 15 {
            let k = abs(modified) < threshold ? 0.039 : 0.0087
            threshold = min(max(threshold + k * (abs(modified) - threshold) * dt, 6), 600)
        }
        lastThresholdUpdate = now
        if modified > threshold {
            overuseCount += 1
            if overuseCount >= 2 && !overusing {
                overusing = true
                // During a probe the queue is the probe's own: it fails the probe (a failed
                // probe means "no more room", not "less") and leaves the estimate alone.
                if probeRate != 0 {
                    probeOveruse = true
                } else if ackedRate > 0, now &- lastDecrease >= 300_000_000 {
                    estimate = min(estimate, ackedRate * 85 / 100)
                    lastDecrease = now
                }
            }
        } else {
            overuseCount = 0
            overusing = false
        }
    }
}
