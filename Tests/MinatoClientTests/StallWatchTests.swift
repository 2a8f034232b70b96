import Testing
@testable import MinatoClient

/// The media stall watch of the Swift SDK's recovery, on a simulated clock: samples every
/// 250 ms as the member's supervisor takes them.
@Suite struct StallWatchTests {
    /// Feeds `counts` one per 250 ms from `start` ms; returns the verdicts that were not `.none`
    /// with the sample's time in ms.
    static func run(_ watch: inout StallWatch, _ counts: [UInt64], start: Int = 0) -> [(Int, StallWatch.Verdict)] {
        var out: [(Int, StallWatch.Verdict)] = []
        for (i, c) in counts.enumerated() {
            let t = start + i * 250
            let v = watch.sample(at: .milliseconds(t), received: c)
            if v != .none { out.append((t, v)) }
        }
        return out
    }

    @Test func aFlowThatStopsStallsOnceAfterTheTimeout() {
        var w = StallWatch(stallAfter: .seconds(2))
        // Growing every sample for 2 s (last growth at 1750 ms), then flat.
        let counts: [UInt64] = (0..<8).map { UInt64($0 * 10) } + Array(repeating: 70, count: 12)
        let verdicts = Self.run(&w, counts)
        #expect(verdicts.count == 1)
        #expect(verdicts.first?.0 == 3750)   // 1750 + 2000
        #expect(verdicts.first?.1 == .stalled)
        #expect(w.stalled)
    }

    @Test func oneSilenceShortOfTheTimeoutIsNoStall() {
        var w = StallWatch(stallAfter: .seconds(2))
        // Flow, 1.75 s of nothing, flow again.
        let counts: [UInt64] = [0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5, 6]
        #expect(Self.run(&w, counts).isEmpty)
    }

    /// The send connection hears one receiver report a second: that is a flow too.
    @Test func oneReportASecondIsAFlow() {
        var w = StallWatch(stallAfter: .seconds(2))
        var counts: [UInt64] = []
        for s in 0..<4 { counts += [UInt64(s + 1), UInt64(s + 1), UInt64(s + 1), UInt64(s + 1)] }   // +1 each second
        counts += Array(repeating: 4, count: 10)
        let verdicts = Self.run(&w, counts)
        #expect(verdicts.map(\.1) == [.stalled])
        #expect(verdicts.first?.0 == 3000 + 2000)
    }

    @Test func aConnectionThatNeverReceivedNeverStalls() {
        var w = StallWatch(stallAfter: .seconds(2))
        #expect(Self.run(&w, Array(repeating: 0, count: 40)).isEmpty)
        // One DTLS flight, then nothing: not a flow.
        var v = StallWatch(stallAfter: .seconds(2))
        #expect(Self.run(&v, [0, 3] + Array(repeating: 3, count: 40)).isEmpty)
    }

    @Test func packetsAgainAfterAStallResume() {
        var w = StallWatch(stallAfter: .seconds(1))
        let verdicts = Self.run(&w, [0, 1, 2, 3] + Array(repeating: 3, count: 5) + [4])
        #expect(verdicts.map(\.1) == [.stalled, .resumed])
        #expect(!w.stalled)
    }

    /// After a restart the watch forgets the old flow: a publisher that really paused does not
    /// make it restart again and again.
    @Test func afterAResetOnlyANewFlowCanStallAgain() {
        var w = StallWatch(stallAfter: .seconds(1))
        #expect(Self.run(&w, [0, 1, 2, 3] + Array(repeating: 3, count: 5)).map(\.1) == [.stalled])
        w.reset()
        #expect(Self.run(&w, Array(repeating: 3, count: 20), start: 2250).isEmpty)
        #expect(Self.run(&w, [4, 5, 6] + Array(repeating: 6, count: 5), start: 7250).map(\.1) == [.stalled])
    }
}

/// The Swift SDK's connection quality from loss, window by window.
@Suite struct QualityRaterTests {
    @Test func levelsFollowTheBrowserSDKsLossBounds() {
        var r = QualityRater()
        // 1000 expected, 990 received: 1% -> good.
        #expect(r.rate(received: 990, expected: 1000, fractionLost: 0, reports: 0, mediaDown: false) == .good)
        // Same level again: no change to report.
        #expect(r.rate(received: 1980, expected: 2000, fractionLost: 0, reports: 0, mediaDown: false) == nil)
        // 5% lost in this window -> poor.
        #expect(r.rate(received: 2930, expected: 3000, fractionLost: 0, reports: 0, mediaDown: false) == .poor)
        // 20% -> bad.
        #expect(r.rate(received: 3730, expected: 4000, fractionLost: 0, reports: 0, mediaDown: false) == .bad)
        #expect(r.quality == .bad)
    }

    @Test func theServersReportCountsForTheSendDirection() {
        var r = QualityRater()
        #expect(r.rate(received: 100, expected: 100, fractionLost: 0, reports: 1, mediaDown: false) == .good)
        // A new report saying 30/256 (11.7%) lost: bad, though the receive side lost nothing.
        #expect(r.rate(received: 200, expected: 200, fractionLost: 30, reports: 2, mediaDown: false) == .bad)
        // No new report: the old one is not counted again.
        #expect(r.rate(received: 300, expected: 300, fractionLost: 30, reports: 2, mediaDown: false) == .good)
    }

    @Test func tooFewPacketsSayNothingAndDownIsBad() {
        var r = QualityRater()
        #expect(r.rate(received: 5, expected: 10, fractionLost: 0, reports: 0, mediaDown: false) == nil)
        #expect(r.quality == nil)
        #expect(r.down() == .bad)
        #expect(r.down() == nil)
        #expect(r.rate(received: 1000, expected: 1000, fractionLost: 0, reports: 0, mediaDown: false) == .good)
        // Counters that went back (new connections after a rejoin): that window says nothing.
        #expect(r.rate(received: 10, expected: 10, fractionLost: 0, reports: 0, mediaDown: false) == nil)
        #expect(r.rate(received: 110, expected: 110, fractionLost: 0, reports: 0, mediaDown: false) == nil)
        #expect(r.quality == .good)
    }
}
