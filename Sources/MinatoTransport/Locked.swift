internal import Foundation

/// A value guarded by a pthread mutex (`NSLock`), for state of this module that more than one
/// thread touches. Not `Synchronization.Mutex`: its contended path parks on a futex inside the
/// standard library, which ThreadSanitizer cannot see, so `make sanitize` reported every
/// contended `withLock` as a race (checked with a four-thread program: one report per run).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
