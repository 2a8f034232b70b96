internal import Foundation
internal import MinatoTransport

/// Derives and checks room password hashes (PBKDF2, tens of milliseconds each) on one thread of
/// their own, so the room actor and Swift's cooperative pool never run them: a client that
/// sends many passwords slows only this queue, never another socket's requests.
/// Wrong passwords are throttled per connection by `RoomService` (`passwordDelay`).
final class PasswordChecks: Sendable {
    private let queue = DispatchQueue(label: "minato.passwords", qos: .utility)

    func hash(_ password: String) async -> PasswordHash {
        await withCheckedContinuation { c in queue.async { c.resume(returning: PasswordHash(password: password)) } }
    }

    /// Waits `delay` (the caller's throttle), then compares on the queue.
    func matches(_ hash: PasswordHash, _ password: String, after delay: Duration) async -> Bool {
        if delay > .zero { try? await Task.sleep(for: delay) }
        return await withCheckedContinuation { c in queue.async { c.resume(returning: hash.matches(password)) } }
    }

    /// How long a connection waits before its next password check after `failures` wrong ones
    /// (counting checks still running): 0, then 0.25 s doubling up to 4 s.
    static func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        let ms = 250 << min(failures - 1, 4)
        return .milliseconds(ms)
    }
}
