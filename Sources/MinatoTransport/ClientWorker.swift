internal import CNice
internal import Foundation

/// A client-side media thread: one `GMainContext` running the libnice agents, DTLS and SRTP
/// of every `ClientConnection` made on it, plus timers (packet sources pace themselves with
/// them). The handle is `Sendable`; everything it runs lives in its `ClientWorkerCore`, touched
/// only on the thread (through `perform` / `post`).
public final class ClientWorker: Sendable {
    private let inbox: Inbox

    typealias Inbox = WorkerInbox<ClientWorkerCore>

    /// `ice` gives the local addresses (127.0.0.1 by default) and the port range of the client's
    /// agents (0...0 lets the kernel pick); its `lite` and `tcp` flags are ignored (clients run
    /// full ICE over UDP). `minIterationMicros` > 0 starts main-loop iterations at least that far
    /// apart: each iteration polls every socket of the thread, so a load generator with hundreds
    /// of connections on one thread reads many packets per poll instead of one (packets wait
    /// in the sockets' buffers meanwhile, adding up to that much latency).
    public init(runtime: CryptoRuntime, ice: IceConfiguration = IceConfiguration(portMin: 0, portMax: 0),
                name: String = "minato-client", minIterationMicros: Int = 0) {
        let context = g_main_context_new()!
        let inbox = Inbox(context: context)
        self.inbox = inbox
        var config = ice
        config.lite = false
        config.tcp = false
        let box = UncheckedBox((context, runtime, config))
        let thread = Thread {
            let (context, runtime, ice) = box.value
            ClientWorkerCore(context: context, runtime: runtime, ice: ice).run(inbox: inbox, minIterationMicros: minIterationMicros)
        }
        thread.name = name
        thread.start()
    }

    /// Runs `body` on the worker thread and returns its result.
    public func perform<T: Sendable>(_ body: @escaping @Sendable (ClientWorkerCore) throws -> T) async throws -> T {
        try await inbox.perform(body)
    }

    /// Fire-and-forget job on the worker thread.
    public func post(_ body: @escaping @Sendable (ClientWorkerCore) -> Void) { inbox.post(body) }

    /// Closes every connection, stops every timer, and ends the thread.
    public func shutdown() { inbox.post { $0.stop() } }
}

/// What one client worker thread owns. Confined to that thread.
public final class ClientWorkerCore {
    let context: OpaquePointer
    let runtime: CryptoRuntime
    let ice: IceConfiguration
    private var connections: [ObjectIdentifier: ClientConnection] = [:]
    private var timers: [UInt32: UnsafeMutablePointer<GSource>] = [:]
    private var nextTimer: UInt32 = 1
    private var stopping = false

    init(context: OpaquePointer, runtime: CryptoRuntime, ice: IceConfiguration) {
        self.context = context
        self.runtime = runtime
        self.ice = ice
    }

    func run(inbox: ClientWorker.Inbox, minIterationMicros: Int) {
        g_main_context_push_thread_default(context)
        let tick = every(milliseconds: 20) { [unowned self] in
            for c in self.connections.values { c.tick() }
            return true
        }
        let interval = UInt64(max(0, minIterationMicros)) * 1000
        var started = DispatchTime.now().uptimeNanoseconds
        while !stopping {
            g_main_context_iteration(context, 1)
            inbox.runJobs(self)
            guard interval > 0 else { continue }
            let now = DispatchTime.now().uptimeNanoseconds
            let next = started &+ interval
            if now < next { usleep(UInt32(truncatingIfNeeded: (next - now) / 1000)) }
            started = max(now, next)
        }
        cancel(tick)
        for c in Array(connections.values) { c.close() }
        for id in Array(timers.keys) { cancel(id) }
        g_main_context_pop_thread_default(context)
    }

    func stop() { stopping = true }

    /// A new connection on this thread. `srtpProfiles` (OpenSSL names, e.g.
    /// "SRTP_AEAD_AES_128_GCM") narrows what this client offers in DTLS; nil offers all three.
    /// `relays`: TURN servers its agents allocate relayed candidates on.
    public func makeConnection(srtpProfiles: String? = nil, relays: [IceRelay] = []) throws -> ClientConnection {
        let c = try ClientConnection(core: self, srtpProfiles: srtpProfiles, relays: relays)
        connections[ObjectIdentifier(c)] = c
        return c
    }

    func forget(_ c: ClientConnection) { connections[ObjectIdentifier(c)] = nil }

    /// Calls `body` on this thread every `milliseconds` until it returns false or the timer is
    /// cancelled. Returns the timer's id.
    @discardableResult
    public func every(milliseconds: UInt32, _ body: @escaping () -> Bool) -> UInt32 {
        let id = nextTimer
        nextTimer &+= 1
        let source = g_timeout_source_new(milliseconds)!
        let box = Unmanaged.passRetained(TimerBox(body)).toOpaque()
        g_source_set_callback(source, { data in
            Unmanaged<TimerBox>.fromOpaque(data!).takeUnretainedValue().body() ? 1 : 0
        }, box, { data in Unmanaged<TimerBox>.fromOpaque(data!).release() })
        g_source_attach(source, context)
        timers[id] = source
        return id
    }

    /// Stops a timer made with `every`.
    public func cancel(_ timer: UInt32) {
        guard let source = timers.removeValue(forKey: timer) else { return }
        g_source_destroy(source)
        g_source_unref(source)
    }
}

private final class TimerBox {
    let body: () -> Bool
    init(_ body: @escaping () -> Bool) { self.body = body }
}
