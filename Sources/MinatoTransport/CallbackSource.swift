internal import CNice

/// A GLib source of a worker's own, with no prepare or check function: GLib dispatches it when
/// its ready time has passed (`g_source_set_ready_time`) or a unix fd added to it is ready
/// (`g_source_add_unix_fd`), and `callback` then runs with `owner`. The worker's deadline timer
/// and the direct receiver's epoll watch are ones. Destroy it on the thread that iterates its
/// context.
final class CallbackSource {
    let source: UnsafeMutablePointer<GSource>
    private let funcs: UnsafeMutablePointer<GSourceFuncs>
    private var destroyed = false

    init?(context: OpaquePointer, callback: @convention(c) (gpointer?) -> gboolean, owner: UnsafeMutableRawPointer) {
        let funcs = UnsafeMutablePointer<GSourceFuncs>.allocate(capacity: 1)
        funcs.initialize(to: GSourceFuncs())
        funcs.pointee.dispatch = { _, callback, data in callback?(data) ?? 0 }
        guard let source = g_source_new(funcs, UInt32(MemoryLayout<GSource>.size)) else {
            funcs.deallocate()
            return nil
        }
        self.funcs = funcs
        self.source = source
        g_source_set_callback(source, callback, owner, nil)
        g_source_attach(source, context)
    }

    func destroy() {
        guard !destroyed else { return }
        destroyed = true
        g_source_destroy(source)
        g_source_unref(source)
    }

    deinit {
        destroy()
        funcs.deallocate()
    }
}
