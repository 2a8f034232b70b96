public import MinatoWire

/// Receive statistics of one incoming RTP stream (RFC 3550 A.3/A.8), for receiver reports.
public struct RtpStream: Sendable {
    public private(set) var packets: UInt64 = 0
    public private(set) var bytes: UInt64 = 0
    private var unwrapper = SequenceUnwrapper()
    private var baseSequence: UInt64 = 0
    public private(set) var highestSequence: UInt64 = 0
    private var expectedPrior: UInt64 = 0
    private var receivedPrior: UInt64 = 0
    private var jitterQ4: UInt32 = 0
    private var lastTransit: Int64 = 0
    private var hasTransit = false
    /// Middle 32 bits of the last sender report's NTP time, and when it arrived.
    public private(set) var lastSenderReport: UInt32 = 0
    public private(set) var lastSenderReportAt: Nanoseconds = 0
    /// The last sender report itself, for translating it to consumers.
    public private(set) var senderReportNtp: UInt64 = 0
    public private(set) var senderReportRtp: UInt32 = 0

    public init() {}

    @inline(__always)
    public mutating func received(sequence: UInt16, timestamp: UInt32, length: Int, now: Nanoseconds, clockRate: UInt32) {
        let ext = unwrapper.unwrap(sequence)
        if packets == 0 { baseSequence = ext; highestSequence = ext }
        else if ext > highestSequence { highestSequence = ext }
        packets &+= 1
        bytes &+= UInt64(length)
        // Interarrival jitter in timestamp units.
        let arrival = Int64(truncatingIfNeeded: (now / 1000) &* UInt64(clockRate) / 1_000_000)
        let transit = arrival &- Int64(timestamp)
        if hasTransit {
            var d = transit &- lastTransit
            if d < 0 { d = -d }
            let dq = UInt32(truncatingIfNeeded: min(d, Int64(UInt32.max >> 5)))
            jitterQ4 = jitterQ4 &+ dq &- ((jitterQ4 &+ 8) >> 4)
        }
        lastTransit = transit
        hasTransit = true
    }

    public mutating func receivedSenderReport(ntp: UInt64, rtpTimestamp: UInt32, now: Nanoseconds) {
        lastSenderReport = UInt32(truncatingIfNeeded: ntp >> 16)
        lastSenderReportAt = now
        senderReportNtp = ntp
        senderReportRtp = rtpTimestamp
    }

    /// A report block for this stream; updates the "prior" counters (RFC 3550 A.3).
    public mutating func reportBlock(ssrc: UInt32, now: Nanoseconds) -> ReportBlock {
        let expected = highestSequence &- baseSequence &+ 1
        let lost = Int64(expected) - Int64(packets)
        let expectedInterval = expected &- expectedPrior
        let receivedInterval = packets &- receivedPrior
        expectedPrior = expected
        receivedPrior = packets
        let lostInterval = Int64(expectedInterval) - Int64(receivedInterval)
        var fraction: UInt8 = 0
        if expectedInterval > 0 && lostInterval > 0 {
            fraction = UInt8(truncatingIfNeeded: min(255, (lostInterval << 8) / Int64(expectedInterval)))
        }
        var dlsr: UInt32 = 0
        if lastSenderReportAt != 0 {
            dlsr = UInt32(truncatingIfNeeded: (now &- lastSenderReportAt) * 65_536 / 1_000_000_000)
        }
        return ReportBlock(
            ssrc: ssrc, fractionLost: fraction,
            cumulativeLost: Int32(clamping: max(-0x800000, min(0x7FFFFF, lost))),
            extendedHighestSequence: UInt32(truncatingIfNeeded: highestSequence),
            jitter: jitterQ4 >> 4, lastSR: lastSenderReport, delaySinceLastSR: dlsr)
    }
}
