internal import MinatoWire

/// Finds the packets missing from one incoming RTP stream and says when to NACK them
/// (RFC 4585 generic NACK): a gap is NACKed at once, then again every retry interval (paced
/// by the round-trip time) until the packet arrives, it is `maxAge` old, or it was NACKed
/// `maxRetries` times; then it is given up and the caller asks for a keyframe instead. A gap
/// wider than `capacity` packets is not NACKed at all (a keyframe is cheaper). A packet that
/// comes after its only NACK measures the round trip to the sender (`lastRepairDelay`). Sans-IO: takes
/// sequence numbers and the time; a fixed list, nothing allocated after `init`.
///
/// Owned by one producer in `MediaEngine`, on its media worker's thread.
public struct NackGenerator: Sendable {
    struct Missing: Sendable {
        var sequence: UInt64 = 0
        var firstMissingAt: Nanoseconds = 0
        /// 0: not NACKed yet.
        var lastNackAt: Nanoseconds = 0
        var retries: UInt8 = 0
    }

    /// What one received packet meant.
    public enum Arrival: Equatable, Sendable {
        /// The next packet, or a later one with no new gap.
        case inOrder
        /// A packet that was missing arrived (a retransmission, or a late one).
        case recovered
        /// New packets are missing before this one; NACK them now (`poll`).
        case gap
        /// So many packets were missing that they were not listed: ask for a keyframe.
        case gapTooLarge
        /// Older than the highest seen and not missing (a duplicate, or given up already).
        case old
    }

    public let capacity: Int
    public let maxAge: Nanoseconds
    public let maxRetries: UInt8
    private var missing: ContiguousArray<Missing>
    public private(set) var missingCount = 0
    /// For the last `.recovered` arrival: how long after its only NACK the packet came (a
    /// round-trip time to the sender, its retransmission included); 0 when it was NACKed more
    /// than once or not at all (which NACK it answers is unknown: Karn's rule).
    public private(set) var lastRepairDelay: Nanoseconds = 0
    /// For the last `.gap` or `.gapTooLarge` arrival: how many packets were missing before it.
    public private(set) var lastGap: UInt64 = 0
    private var unwrapper = SequenceUnwrapper()
    private var highest: UInt64 = 0
    private var started = false

    public init(capacity: Int = 256, maxAge: Nanoseconds = 1_000_000_000, maxRetries: UInt8 = 10) {
        self.capacity = max(capacity, 1)
        self.maxAge = maxAge
        self.maxRetries = max(maxRetries, 1)
        missing = ContiguousArray(repeating: Missing(), count: self.capacity)
    }

    /// Notes that `sequence` arrived.
    public mutating func received(_ sequence: UInt16, now: Nanoseconds) -> Arrival {
        let ext = unwrapper.unwrap(sequence)
        guard started else {
            started = true
            highest = ext
            return .inOrder
        }
        if ext > highest {
            let gap = ext &- highest &- 1
            highest = ext
            if gap == 0 { return .inOrder }
            lastGap = gap
            if gap > UInt64(capacity - missingCount) {
                missingCount = 0
                return .gapTooLarge
            }
            var s = ext &- gap
            while s < ext {
                missing[missingCount] = Missing(sequence: s, firstMissingAt: now)
                missingCount += 1
                s &+= 1
            }
            return .gap
        }
        // Entries are in increasing order: find, then close the hole.
        var i = 0
        while i < missingCount, missing[i].sequence < ext { i += 1 }
        guard i < missingCount, missing[i].sequence == ext else { return .old }
        let m = missing[i]
        lastRepairDelay = m.retries == 1 && m.lastNackAt != 0 && now > m.lastNackAt ? now &- m.lastNackAt : 0
        remove(at: i)
        return .recovered
    }

    /// The sequence numbers to NACK at `now` (new gaps, and those whose last NACK is
    /// `retryInterval` old), written to `into` (at most `limit`, oldest first); drops entries
    /// that are too old or NACKed too often. Returns how many were written and whether any
    /// was given up.
    public mutating func poll(now: Nanoseconds, retryInterval: Nanoseconds,
                              into out: UnsafeMutablePointer<UInt16>, limit: Int) -> (count: Int, gaveUp: Bool) {
        var written = 0
        var gaveUp = false
        var i = 0
        while i < missingCount {
            let m = missing[i]
            if now &- m.firstMissingAt > maxAge || m.retries >= maxRetries {
                remove(at: i)
                gaveUp = true
                continue
            }
            if written < limit, m.lastNackAt == 0 || now &- m.lastNackAt >= retryInterval {
                out[written] = UInt16(truncatingIfNeeded: m.sequence)
                written += 1
                missing[i].lastNackAt = now
                missing[i].retries &+= 1
            }
            i += 1
        }
        return (written, gaveUp)
    }

    /// When `poll` next has work: the soonest retry or give-up; nil when nothing is missing.
    public func deadline(retryInterval: Nanoseconds) -> Nanoseconds? {
        guard missingCount > 0 else { return nil }
        var soonest = Nanoseconds.max
        for i in 0..<missingCount {
            let m = missing[i]
            let retry = m.lastNackAt == 0 ? m.firstMissingAt : m.lastNackAt &+ retryInterval
            soonest = min(soonest, retry, m.firstMissingAt &+ maxAge &+ 1)
        }
        return soonest
    }

    /// Forgets every missing packet (the stream restarts, e.g. after a keyframe request).
    public mutating func reset() { missingCount = 0 }

    private mutating func remove(at i: Int) {
        var j = i
        while j + 1 < missingCount {
            missing[j] = missing[j + 1]
            j += 1
        }
        missingCount -= 1
    }
}
