internal import CNice
internal import CMinatoShims

/// A GLib source of a worker's own (`minato_deadline_source_new`): GLib dispatches it when its
/// deadline has passed (`setDeadline`) or a unix fd added to it is ready
/// (`g_source_add_unix_fd`), and `callback` then runs with `owner`. The worker's deadline
/// timer, its agent-timer source and the direct receiver's epoll watch are ones. Moving the
/// deadline wakes nothing (unlike `g_source_set_ready_time`, which writes the context's wakeup
/// eventfd each time): set it on the thread that iterates the context. A deadline in the past
/// keeps the source dispatched each iteration until it is moved. Destroy it on that thread too.
/// It may recurse (see init): never iterate its context from its callback.
final class CallbackSource {
    let source: UnsafeMutablePointer<GSource>
    private var destroyed = false

    init?(context: OpaquePointer, callback: @convention(c) (gpointer?) -> gboolean, owner: UnsafeMutableRawPointer) {
        guard let source = minato_deadline_source_new() else { return nil }
        self.source = source
        g_source_set_callback(source, callback, owner, nil)
        // Not blocked while dispatched: GLib blocks a non-recursive source by taking its fds
        // out of the poll set and back afterwards, and each of the two changes writes the
        // context's wakeup eventfd, so the next iteration polls and reads once more for nothing.
        // Nothing iterates a worker's context from inside these callbacks.
        g_source_set_can_recurse(source, 1)
        g_source_attach(source, context)
    }

    /// When to dispatch: CLOCK_MONOTONIC microseconds (`g_get_monotonic_time`); -1: never.
    func setDeadline(_ microseconds: Int64) {
        minato_deadline_source_set(source, gint64(microseconds))
    }

    func destroy() {
        guard !destroyed else { return }
        destroyed = true
        g_source_destroy(source)
        g_source_unref(source)
    }

    deinit { destroy() }
}
