import Testing
@testable import MinatoMedia
import MinatoWire

/// Time arithmetic must neither trap nor drift over any realistic uptime (years) or gap
/// between events (a stream whose sender reports stopped days ago).
@Suite struct LongUptimeTests {
    static let hour: Nanoseconds = 3_600_000_000_000
    static let year: Nanoseconds = 365 * 24 * hour

    @Test func mediaTicksIsExactForYearsOfUptime() {
        #expect(mediaTicks(10 * Self.year, clockRate: 90_000) == 10 * 365 * 24 * 3600 * 90_000)
        #expect(mediaTicks(1_500_000_000, clockRate: 48_000) == 72_000)
        #expect(mediaTicks(999_999_999, clockRate: 90_000) == 89_999)
        // Extreme inputs wrap instead of trapping.
        _ = mediaTicks(.max, clockRate: .max)
        _ = mediaTicks(.max - 1, clockRate: 90_000)
    }

    @Test func delaySinceLastSenderReportSaturatesInsteadOfTrapping() {
        var stream = RtpStream()
        let t0: Nanoseconds = 5 * Self.year
        stream.received(sequence: 1, timestamp: 0, length: 100, now: t0, clockRate: 90_000)
        stream.receivedSenderReport(ntp: 0x0001_0002_0003_0004, rtpTimestamp: 0, now: t0)
        // 1.5 s: 1.5 * 65536.
        #expect(stream.reportBlock(ssrc: 1, now: t0 + 1_500_000_000).delaySinceLastSR == 98_304)
        // 100 hours (more than the 78 at which `elapsed * 65536` overflowed UInt64).
        let late = stream.reportBlock(ssrc: 1, now: t0 + 100 * Self.hour)
        #expect(late.delaySinceLastSR == UInt32.max)
        // A clock that went backwards is no trap either.
        _ = stream.reportBlock(ssrc: 1, now: t0 - 1)
    }

    @Test func jitterIsZeroForEvenlySpacedPacketsAcrossTheTimestampWrap() {
        var stream = RtpStream()
        var now: Nanoseconds = 3 * Self.year
        var ts: UInt32 = UInt32.max - 30_000
        for i in 0..<100 {
            stream.received(sequence: UInt16(truncatingIfNeeded: i), timestamp: ts, length: 100, now: now, clockRate: 90_000)
            now += 33_333_333
            ts &+= 3000
        }
        #expect(stream.reportBlock(ssrc: 1, now: now).jitter <= 1)
    }

    @Test func extremeTimestampsAndTimesDoNotTrap() {
        var stream = RtpStream()
        let times: [Nanoseconds] = [0, .max, 1, .max / 2, .max - 1_000_000_000, 0]
        let stamps: [UInt32] = [0, .max, 0x8000_0000, 1, 0x7FFF_FFFF, .max]
        for (i, now) in times.enumerated() {
            stream.received(sequence: UInt16(i * 20_000 % 65_536), timestamp: stamps[i], length: .max / 2,
                            now: now, clockRate: .max)
            stream.receivedSenderReport(ntp: .max, rtpTimestamp: stamps[i], now: now)
            _ = stream.reportBlock(ssrc: 0, now: times[(i + 1) % times.count])
        }
    }

    @Test func rewriterResyncAfterALongPauseDoesNotTrap() {
        var r = SequenceRewriter(clockRate: 90_000, initialSequence: 100, initialTimestamp: 5)
        _ = r.rewrite(sequence: 1, timestamp: 1, now: 1)
        r.resync()
        let first = r.rewrite(sequence: 50_000, timestamp: 77, now: .max)
        #expect(first?.0 == 101)
        r.resync()
        _ = r.rewrite(sequence: 2, timestamp: 2, now: 0)   // clock went backwards
        var big = SequenceRewriter(clockRate: .max, initialSequence: 0, initialTimestamp: 0)
        _ = big.rewrite(sequence: 0, timestamp: 0, now: 0)
        big.resync()
        _ = big.rewrite(sequence: 1, timestamp: 1, now: 20 * Self.year)
    }

    @Test func rewriterTimestampAdvancesByElapsedTimeAfterAnHourLongPause() throws {
        var r = SequenceRewriter(clockRate: 90_000, initialSequence: 0, initialTimestamp: 1000)
        let t0: Nanoseconds = 7 * Self.year
        let before = r.rewrite(sequence: 10, timestamp: 10, now: t0)
        let ts0 = try #require(before).1
        r.resync()
        let after = r.rewrite(sequence: 11, timestamp: 999_999, now: t0 + Self.hour)
        let ts1 = try #require(after).1
        #expect(ts1 &- ts0 == UInt32(truncatingIfNeeded: 3600 * 90_000 as UInt64))
    }

    @Test func engineRunsForYearsWithSenderReportsStoppingForDays() throws {
        let h = EngineHarness()
        h.now = 10 * Self.year
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        h.send(keyframe: true)
        var sr = [UInt8](repeating: 0, count: 64)
        let n = sr.withUnsafeMutableBytes {
            RtcpWriter.senderReport(into: $0, ssrc: 0x1111, ntpTimestamp: 0x1234_5678_9ABC_DEF0,
                                    rtpTimestamp: h.publisherTs, packetCount: 1, octetCount: 100)
        }
        sr.withUnsafeBytes { h.engine.handleRtcp(from: h.publisher, packet: UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: h.now) }
        _ = h.drain()
        // Media keeps flowing for 100 hours without another sender report; reports keep going out.
        for _ in 0..<100 {
            h.send(keyframe: false, advance: Self.hour)
            h.engine.handleTimeout(now: h.now)
            let rr = h.drain().filter { $0.rtcpKinds.contains { $0.0 == RtcpPacketType.receiverReport } }
            #expect(rr.count == 1)
        }
    }
}
