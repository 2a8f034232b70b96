internal import MinatoWire

/// The receive side of transport-wide congestion control for one publisher transport
/// (draft-holmer-rmcat-transport-wide-cc-extensions-01): when each transport-wide sequence
/// number arrived, until the engine reports them (`MediaEngine.sendTransportFeedback`), so the
/// publisher's own estimator (GCC in browsers) sees its uplink's delay and loss. Storage is
/// allocated once; recording and reporting allocate nothing. Sans-IO.
struct TransportFeedbackRecorder {
    /// Sequence numbers held between two reports (a power of two); a publisher sending faster
    /// than this per report interval has its oldest unreported ones reported as lost.
    static let capacity = 2048
    private static let mask = UInt64(capacity - 1)
    /// Arrival time per sequence number (`sequence & mask`); 0: not received.
    private var arrivals = ContiguousArray<Nanoseconds>(repeating: 0, count: capacity)
    private var unwrapper = SequenceUnwrapper()
    /// The first sequence number not reported yet and the highest received; nil before any.
    private(set) var next: UInt64?
    private(set) var highest: UInt64 = 0
    /// Feedback packets written (the packet's feedback count wraps at 256).
    private(set) var feedbackCount: UInt8 = 0

    /// True when something arrived since the last report.
    var hasPending: Bool { next.map { highest >= $0 } ?? false }

    @inline(__always)
    mutating func received(_ sequence: UInt16, at now: Nanoseconds) {
        let s = unwrapper.unwrap(sequence)
        guard let first = next else {
            next = s
            highest = s
            arrivals[Int(s & Self.mask)] = max(now, 1)
            return
        }
        guard s >= first else { return }  // reported already (a late duplicate or reordering)
        if s > highest {
            // Clear the slots skipped over (they may hold times from a lap ago).
            var k = highest &+ 1
            let stop = min(s, k &+ UInt64(Self.capacity))
            while k < stop {
                arrivals[Int(k & Self.mask)] = 0
                k &+= 1
            }
            highest = s
            if s - first >= UInt64(Self.capacity) { next = s - UInt64(Self.capacity) + 1 }
        }
        arrivals[Int(s & Self.mask)] = max(now, 1)
    }

    /// When sequence number `s` (unwrapped) arrived; 0: not received.
    func arrival(_ s: UInt64) -> Nanoseconds { arrivals[Int(s & Self.mask)] }

    /// Marks everything up to `highest` reported (after `MediaEngine` wrote it) and counts the packets.
    mutating func reported(upTo last: UInt64, packets: Int) {
        next = last &+ 1
        feedbackCount &+= UInt8(truncatingIfNeeded: packets)
    }
}
