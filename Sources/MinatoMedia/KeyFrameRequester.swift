/// Throttles keyframe requests (PLI/FIR) to one producer: at most one per `interval`; a request
/// inside the interval is remembered and sent when the interval ends. Sans-IO.
public struct KeyFrameRequester: Sendable {
    public static let defaultInterval: Nanoseconds = 500_000_000
    public let interval: Nanoseconds
    public private(set) var lastSent: Nanoseconds?
    public private(set) var pending = false
    public private(set) var firSequence: UInt8 = 0

    public init(interval: Nanoseconds = KeyFrameRequester.defaultInterval) { self.interval = interval }

    /// Returns true when a request should go out now.
    public mutating func request(now: Nanoseconds) -> Bool {
        if let last = lastSent, now &- last < interval {
            pending = true
            return false
        }
        lastSent = now
        pending = false
        firSequence &+= 1
        return true
    }

    /// Returns true when a remembered request is due.
    public mutating func poll(now: Nanoseconds) -> Bool {
        guard pending, let last = lastSent, now &- last >= interval else { return false }
        lastSent = now
        pending = false
        firSequence &+= 1
        return true
    }

    /// When the next remembered request is due, if any.
    public var deadline: Nanoseconds? {
        guard pending, let last = lastSent else { return nil }
        return last &+ interval
    }
}
