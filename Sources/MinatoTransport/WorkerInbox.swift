internal import CNice
internal import MinatoMedia
internal import Foundation

/// A duration in whole nanoseconds for the worker's timers: negative is 0 (disabled), and
/// anything beyond UInt64 nanoseconds (584 years) saturates. Never traps.
func nanoseconds(of d: Duration) -> Nanoseconds {
    let (seconds, attoseconds) = d.components
    guard seconds >= 0, attoseconds >= 0 || seconds > 0 else { return 0 }
    let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
    if overflow { return .max }
    let (sum, overflow2) = whole.addingReportingOverflow(UInt64(clamping: attoseconds / 1_000_000_000))
    return overflow2 ? .max : sum
}

struct UncheckedBox<T>: @unchecked Sendable { let value: T; init(_ v: T) { value = v } }

/// What crosses into a worker thread (a media worker or a client worker): a queue of jobs
/// for its `Core`, and a wakeup of the thread's `GMainContext`, which runs them after its
/// current iteration. Everything else of the worker is confined to its thread.
final class WorkerInbox<Core>: @unchecked Sendable {
    typealias Job = @Sendable (Core) -> Void
    /// Guards `jobs`. A pthread mutex (`NSLock`) rather than `Synchronization.Mutex`, whose
    /// futex ThreadSanitizer cannot see: under `make sanitize` it reported every post/run pair
    /// as a race.
    private let lock = NSLock()
    private var jobs: [Job] = []
    /// The batch being run: touched only by the worker thread (`runJobs`). Swapped with `jobs`
    /// under the lock, so neither array is copied (posting a job still allocates its closure).
    private var running: [Job] = []
    let context: OpaquePointer   // GMainContext*, owned by the worker thread
    init(context: OpaquePointer) { self.context = context }

    func post(_ job: @escaping Job) {
        lock.lock()
        jobs.append(job)
        lock.unlock()
        g_main_context_wakeup(context)
    }

    /// Runs every job posted so far, in order, on the calling (worker) thread. Takes the lock
    /// once per call (once per worker loop iteration) to swap the queue; the drain itself does
    /// not allocate (the jobs it runs may).
    func runJobs(_ core: Core) {
        lock.lock()
        swap(&jobs, &running)
        lock.unlock()
        guard !running.isEmpty else { return }
        var i = 0
        while i < running.count {
            running[i](core)
            i += 1
        }
        running.removeAll(keepingCapacity: true)
    }

    /// Runs `body` on the worker thread and returns its result.
    func perform<T: Sendable>(_ body: @escaping @Sendable (Core) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            post { core in
                do { continuation.resume(returning: try body(core)) } catch { continuation.resume(throwing: error) }
            }
        }
    }
}

/// A new `GMainContext` for a worker core driven by hand on the calling thread (tests, the
/// benchmark rig); give it back with `releaseMainContext`.
func makeMainContext() -> OpaquePointer? { g_main_context_new() }

func releaseMainContext(_ context: OpaquePointer) { g_main_context_unref(context) }
