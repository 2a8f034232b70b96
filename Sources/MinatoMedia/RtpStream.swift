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
    /// Relative transit time of the last packet (RFC 3550 A.8), in timestamp units modulo 2^32.
    private var lastTransit: UInt32 = 0
    private var hasTransit = false
    /// Middle 32 bits of the last sender report's NTP time, and when it arrived.
    public private(set) var lastSenderReport: UInt32 = 0
    public private(set) var lastSenderReportAt: Nanoseconds = 0
    /// The last sender report itself, for translating it to consumers.
    public private(set) var senderReportNtp: UInt64 = 0
    public private(set) var senderReportRtp: UInt32 = 0

    public init() {}

    /// Packets never received so far (RFC 3550 A.3: expected minus received; negative with duplicates).
    public var cumulativeLost: Int64 {
        guard packets > 0 else { return 0 }
        return Int64(truncatingIfNeeded: highestSequence &- baseSequence &+ 1) &- Int64(truncatingIfNeeded: packets)
    }
    /// Interarrival jitter in timestamp units.
    public var jitter: UInt32 { jitterQ4 >> 4 }

    /// One packet of the stream. `repaired`: restored from the publisher's RTX stream; it counts
    /// in `bytes` (the stream's rate) and in nothing else: like libwebrtc (which keeps recovered
    /// packets out of its receive statistics) and RFC 4588 (the retransmission stream has an
    /// SSRC of its own), the reports count the original stream's packets as they arrived, so
    /// cumulative and fractional loss are the loss *before* repair (what the publisher's link
    /// lost), and a retransmission arriving a round trip late adds no jitter. The jitter also
    /// skips a late packet on the stream's own SSRC (reordered, or resent without RTX): only a
    /// packet newer than every one before it updates it, as in libwebrtc.
    @inline(__always)
    public mutating func received(sequence: UInt16, timestamp: UInt32, length: Int, now: Nanoseconds, clockRate: UInt32,
                                  repaired: Bool = false) {
        bytes &+= UInt64(length)
        if repaired { return }
        let ext = unwrapper.unwrap(sequence)
        var newest = packets == 0
        if packets == 0 { baseSequence = ext; highestSequence = ext }
        else if ext > highestSequence { highestSequence = ext; newest = true }
        packets &+= 1
        // Interarrival jitter in timestamp units (RFC 3550 A.8), in the RTP timestamp's own
        // modulo-2^32 arithmetic so neither the timestamp's wrap nor any uptime disturbs it.
        guard newest else { return }
        let arrival = UInt32(truncatingIfNeeded: mediaTicks(now, clockRate: clockRate))
        let transit = arrival &- timestamp
        if hasTransit {
            let d = Int32(bitPattern: transit &- lastTransit).magnitude
            let dq = min(d, UInt32.max >> 5)
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
        // Wrapping and full-width forms throughout: nothing here traps on any input or uptime.
        let expected = highestSequence &- baseSequence &+ 1
        let lost = Int64(truncatingIfNeeded: expected) &- Int64(truncatingIfNeeded: packets)
        let expectedInterval = expected &- expectedPrior
        let receivedInterval = packets &- receivedPrior
        expectedPrior = expected
        receivedPrior = packets
        var fraction: UInt8 = 0
        if expectedInterval > 0, expectedInterval > receivedInterval {
            let lostInterval = expectedInterval - receivedInterval
            if lostInterval >= expectedInterval {
                fraction = 255
            } else {
                // lostInterval < expectedInterval, so the quotient is below 256 and fits.
                let q = expectedInterval.dividingFullWidth(lostInterval.multipliedFullWidth(by: 256)).quotient
                fraction = UInt8(truncatingIfNeeded: min(255, q))
            }
        }
        var dlsr: UInt32 = 0
        if lastSenderReportAt != 0 {
            // Units of 1/65536 s; saturates (after about 18 hours without a sender report).
            let elapsed = now &- lastSenderReportAt
            let units = (elapsed / 1_000_000_000) &* 65_536 &+ (elapsed % 1_000_000_000) * 65_536 / 1_000_000_000
            dlsr = UInt32(clamping: units)
        }
        return ReportBlock(
            ssrc: ssrc, fractionLost: fraction,
            cumulativeLost: Int32(clamping: max(-0x800000, min(0x7FFFFF, lost))),
            extendedHighestSequence: UInt32(truncatingIfNeeded: highestSequence),
            jitter: jitterQ4 >> 4, lastSR: lastSenderReport, delaySinceLastSR: dlsr)
    }
}

/// `ns` nanoseconds counted in ticks of a `clockRate` Hz media clock, modulo 2^64. Split into
/// whole seconds and the remainder so no product can overflow (the remainder times any
/// 32-bit rate stays below 2^63): exact for every uptime, never traps.
@inline(__always)
func mediaTicks(_ ns: Nanoseconds, clockRate: UInt32) -> UInt64 {
    let rate = UInt64(clockRate)
    return (ns / 1_000_000_000) &* rate &+ (ns % 1_000_000_000) * rate / 1_000_000_000
}
