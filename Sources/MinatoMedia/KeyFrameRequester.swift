/// Keyframe requests (PLI/FIR) to one producer that are neither too frequent nor lost: at most
/// one per `interval` (a request inside the interval is remembered and sent when it ends), and
/// while a sent request has brought no keyframe it is sent again every `retryInterval` (the
/// request or the keyframe's first packet may have been lost). Sans-IO.
public struct KeyFrameRequester: Sendable {
    public static let defaultInterval: Nanoseconds = 500_000_000
    public static let defaultRetryInterval: Nanoseconds = 1_000_000_000

    /// Why `poll` says a request is due.
    public enum Due: Equatable, Sendable {
        /// A request made inside the throttle interval, now sent.
        case throttled
        /// The last request brought no keyframe within `retryInterval`.
        case retry
    }

    public let interval: Nanoseconds
    public let retryInterval: Nanoseconds
    public private(set) var lastSent: Nanoseconds?
    public private(set) var pending = false
    /// A request went out and no keyframe arrived since.
    public private(set) var awaiting = false
    public private(set) var firSequence: UInt8 = 0
    /// No request goes out before this time (`hold`); a request made earlier waits for it.
    public private(set) var heldUntil: Nanoseconds = 0

    public init(interval: Nanoseconds = KeyFrameRequester.defaultInterval,
                retryInterval: Nanoseconds = KeyFrameRequester.defaultRetryInterval) {
        self.interval = interval
        self.retryInterval = max(retryInterval, interval)
    }

    /// Returns true when a request should go out now.
    public mutating func request(now: Nanoseconds) -> Bool {
        if now < heldUntil {
            pending = true
            return false
        }
        if let last = lastSent, now &- last < interval {
            pending = true
            return false
        }
        sent(now)
        return true
    }

    /// A keyframe arrived: it answers every request made so far.
    public mutating func keyFrameArrived() {
        pending = false
        awaiting = false
    }

    /// Stops retrying (the producer went silent; the next request starts over).
    public mutating func stopAwaiting() { awaiting = false }

    /// Whether a remembered request or a retry is due at `now` (and if so, counts it sent).
    public mutating func poll(now: Nanoseconds) -> Due? {
        guard now >= heldUntil else { return nil }
        guard let last = lastSent else {
            if pending {
                sent(now)
                return .throttled
            }
            return nil
        }
        if pending, now &- last >= interval {
            sent(now)
            return .throttled
        }
        if awaiting, now &- last >= retryInterval {
            sent(now)
            return .retry
        }
        return nil
    }

    /// When `poll` next has work, if ever.
    public var deadline: Nanoseconds? {
        guard let last = lastSent else { return pending ? heldUntil : nil }
        if pending { return max(last &+ interval, heldUntil) }
        if awaiting { return max(last &+ retryInterval, heldUntil) }
        return nil
    }

    /// Sends nothing before `time` (a request made meanwhile goes out then). For a sender
    /// that ignores requests too close to another one it just answered: a browser's simulcast
    /// encoder takes one keyframe request per 300 ms across all its layers.
    public mutating func hold(until time: Nanoseconds) { heldUntil = max(heldUntil, time) }

    private mutating func sent(_ now: Nanoseconds) {
        lastSent = now
        pending = false
        awaiting = true
        firSequence &+= 1
    }
}
