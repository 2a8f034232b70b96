/// Maps a producer's RTP sequence numbers and timestamps onto one consumer's outgoing stream,
/// keeping both continuous across pauses and restarts: after a `resync`, the next forwarded
/// packet continues at last+1 (sequence) and at last + elapsed time (timestamp). Sans-IO.
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

    /// Rewrites one packet's numbers; returns (sequence, timestamp) to write.
    @inline(__always)
    public mutating func rewrite(sequence: UInt16, timestamp: UInt32, now: Nanoseconds) -> (UInt16, UInt32) {
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
            runStart = nextSeq
            timestampOffset = nextTs &- timestamp
            started = true
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

    /// The producer's sequence number for an outgoing one this consumer already sent in the
    /// current run (for answering a NACK); nil for numbers before the run or not sent yet.
    public func original(of outgoing: UInt16) -> UInt16? {
        guard started, !needsSync, Int16(bitPattern: outgoing &- runStart) >= 0,
              Int16(bitPattern: lastSequence &- outgoing) >= 0 else { return nil }
        return outgoing &- sequenceOffset
    }

    /// Translates a producer RTP timestamp (e.g. from a sender report) into this stream.
    public func translate(timestamp: UInt32) -> UInt32 { timestamp &+ timestampOffset }
    public var hasStarted: Bool { started }
}
