/// Maps a producer's RTP sequence numbers and timestamps onto one consumer's outgoing stream,
/// keeping both continuous across pauses and restarts: after a `resync`, the next forwarded
/// packet continues at last+1 (sequence) and at last + elapsed time (timestamp). Packets the
/// consumer leaves out (`drop`, a VP8 temporal layer it does not forward) close up: the next
/// forwarded one takes the dropped one's number, so the subscriber sees no gap to NACK. A late
/// packet is numbered with the offset that held at its place (`DroppedNumbers`). Sans-IO.
public struct SequenceRewriter: Sendable {
    public private(set) var sequenceOffset: UInt16
    public private(set) var timestampOffset: UInt32
    public private(set) var lastSequence: UInt16
    public private(set) var lastTimestamp: UInt32
    public private(set) var lastSentAt: Nanoseconds = 0
    public private(set) var needsSync = true
    /// The first outgoing sequence number of the current run (since the last resync).
    public private(set) var runStart: UInt16 = 0
    private var started = false
    private let clockRate: UInt32
    /// The newest producer sequence number of the run, forwarded or dropped.
    private var highestInput: UInt16 = 0
    /// Producer sequence numbers dropped in this run (`drop`).
    private var dropped = DroppedNumbers(mask: 0xFFFF)

    /// `initialSequence`/`initialTimestamp` are where the consumer's stream begins (random per RFC 3550).
    public init(clockRate: UInt32, initialSequence: UInt16, initialTimestamp: UInt32) {
        self.clockRate = clockRate
        self.sequenceOffset = 0
        self.timestampOffset = 0
        self.lastSequence = initialSequence &- 1
        self.lastTimestamp = initialTimestamp
    }

    /// The next packet starts a new run (after a pause or a source change).
    public mutating func resync() { needsSync = true }

    /// Rewrites one packet's numbers; returns (sequence, timestamp) to write. Nil for a late
    /// packet that has no number: it was dropped itself, or it is older than the drops kept.
    @inline(__always)
    public mutating func rewrite(sequence: UInt16, timestamp: UInt32, now: Nanoseconds) -> (UInt16, UInt32)? {
        var sequenceOffset = self.sequenceOffset
        if needsSync {
            needsSync = false
            let nextSeq = lastSequence &+ 1
            var nextTs = lastTimestamp
            if started {
                let elapsed = now &- lastSentAt
                // RTP timestamps wrap modulo 2^32 by design; the tick count itself never overflows.
                let ticks = UInt32(truncatingIfNeeded: mediaTicks(elapsed, clockRate: clockRate))
                nextTs = lastTimestamp &+ max(ticks, 1)
            }
            sequenceOffset = nextSeq &- sequence
            self.sequenceOffset = sequenceOffset
            runStart = nextSeq
            timestampOffset = nextTs &- timestamp
            started = true
            highestInput = sequence
            dropped.removeAll()
        } else if Int16(bitPattern: sequence &- highestInput) > 0 {
            highestInput = sequence
        } else if !dropped.isEmpty {
            // Late: it takes the number it would have had, before the drops after it.
            guard !dropped.contains(sequence), let later = dropped.dropsNewer(than: sequence) else { return nil }
            sequenceOffset &+= UInt16(truncatingIfNeeded: later)
        }
        let outSeq = sequence &+ sequenceOffset
        let outTs = timestamp &+ timestampOffset
        // Only move "last" forward (reordered packets keep their place).
        if Int16(bitPattern: outSeq &- lastSequence) > 0 {
            lastSequence = outSeq
            lastTimestamp = outTs
            lastSentAt = now
        }
        return (outSeq, outTs)
    }

    /// Leaves the producer's packet `sequence` out of this consumer's stream: later packets
    /// move down by one, so the numbers stay gap-free. A packet older than the newest one seen
    /// changes nothing (numbers after it were already sent).
    @inline(__always)
    public mutating func drop(sequence: UInt16) {
        guard started, !needsSync, Int16(bitPattern: sequence &- highestInput) > 0 else { return }
        highestInput = sequence
        sequenceOffset &-= 1
        dropped.append(sequence)
    }

    /// The producer's sequence number for an outgoing one this consumer already sent in the
    /// current run (for answering a NACK); nil for numbers before the run or not sent yet, or
    /// from before the drops kept.
    public func original(of outgoing: UInt16) -> UInt16? {
        guard started, !needsSync, Int16(bitPattern: outgoing &- runStart) >= 0,
              Int16(bitPattern: lastSequence &- outgoing) >= 0 else { return nil }
        return dropped.input(forOutput: outgoing, offset: sequenceOffset)
    }

    /// Translates a producer RTP timestamp (e.g. from a sender report) into this stream.
    public func translate(timestamp: UInt32) -> UInt32 { timestamp &+ timestampOffset }
    public var hasStarted: Bool { started }
}
