internal import CNice
public import MinatoMedia
internal import Foundation
internal import Synchronization
public import Logging

/// What a media worker tells the control plane (through `MediaWorker.events`).
public enum WorkerEvent: Sendable {
    case transportConnected(TransportId)
    case transportClosed(TransportId, reason: String)
}

/// Counters a worker reports (read through `perform`).
public struct WorkerCounters: Sendable {
    public var rtpPacketsReceived: UInt64
    public var rtpPacketsForwarded: UInt64
    public var rtpBytesForwarded: UInt64
    public var keyFrameRequestsSent: UInt64
    public var drops: [String: UInt64]
    public var transports: Int
}

public enum WorkerError: Error, CustomStringConvertible, Sendable {
    case unknownTransport(TransportId)
    case media(MediaError)
    case transport(String)
    public var description: String {
        switch self {
        case .unknownTransport(let id): return "no such \(id) on this worker"
        case .media(let e): return e.description
        case .transport(let s): return s
        }
    }
}

/// The control plane's handle on one media worker thread: a command inbox (the one type that
/// crosses threads) and a stream of events. Every engine, agent, DTLS and SRTP object lives in
/// the worker's `WorkerCore`, touched only on its thread.
public final class MediaWorker: Sendable {
    public let index: Int
    public let events: AsyncStream<WorkerEvent>
    private let inbox: Inbox

    typealias Inbox = WorkerInbox<WorkerCore>

    /// `transportTimeout`: a connected transport that received no media or RTCP for this long
    /// is closed. `connectTimeout`: a transport whose ICE and DTLS have not connected this long
    /// after it was created is closed (reason "connect timeout: …"). Zero disables either.
    public init(index: Int, runtime: CryptoRuntime, ice: IceConfiguration,
                transportTimeout: Duration, connectTimeout: Duration = .seconds(20), logger: Logger) {
        self.index = index
        let context = g_main_context_new()!
        let inbox = Inbox(context: context)
        self.inbox = inbox
        let (stream, continuation) = AsyncStream<WorkerEvent>.makeStream()
        self.events = stream
        let timeoutNs = nanoseconds(of: transportTimeout)
        let connectTimeoutNs = nanoseconds(of: connectTimeout)
        let box = UncheckedBox((context, runtime, ice, continuation, logger))
        let thread = Thread {
            let (context, runtime, ice, continuation, logger) = box.value
            let core = WorkerCore(context: context, runtime: runtime, ice: ice, events: continuation,
                                  transportTimeout: timeoutNs, connectTimeout: connectTimeoutNs, logger: logger)
            core.run(inbox: inbox)
        }
        thread.name = "minato-media-\(index)"
        thread.start()
    }

    /// Runs `body` on the worker thread and returns its result.
    public func perform<T: Sendable>(_ body: @escaping @Sendable (WorkerCore) throws -> T) async throws -> T {
        try await inbox.perform(body)
    }

    /// Fire-and-forget command.
    public func post(_ body: @escaping @Sendable (WorkerCore) -> Void) { inbox.post(body) }

    /// Stops the thread after closing every transport.
    public func shutdown() { inbox.post { $0.stop() } }
}

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
    private let jobs = Mutex<[@Sendable (Core) -> Void]>([])
    let context: OpaquePointer   // GMainContext*, owned by the worker thread
    init(context: OpaquePointer) { self.context = context }

    func post(_ job: @escaping @Sendable (Core) -> Void) {
        jobs.withLock { $0.append(job) }
        g_main_context_wakeup(context)
    }

    func take() -> [@Sendable (Core) -> Void] {
        jobs.withLock { jobs in
            let all = jobs
            jobs.removeAll(keepingCapacity: true)
            return all
        }
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

/// Everything one media worker owns. Confined to the worker thread (checked in debug builds).
public final class WorkerCore {
    let context: OpaquePointer
    let runtime: CryptoRuntime
    let ice: IceConfiguration
    /// Outbox slots: a flush is forced when half are used (`flushIfFull`), so one received
    /// packet may fan out to up to `outboxSlots / 2` consumers without drops.
    static let outboxSlots = 2048
    let engine = MediaEngine(outboxSlots: WorkerCore.outboxSlots)
    private let batch = SendBatch(slots: WorkerCore.outboxSlots)
    let logger: Logger
    private let eventSink: AsyncStream<WorkerEvent>.Continuation
    private let transportTimeout: Nanoseconds
    private let connectTimeout: Nanoseconds
    private var transports: [TransportId: WebRtcTransport] = [:]
    /// Engine transport index -> transport, for the send path.
    private var byIndex = ContiguousArray<WebRtcTransport?>()
    private var stopping = false
    private var thread: pthread_t?

    init(context: OpaquePointer, runtime: CryptoRuntime, ice: IceConfiguration,
         events: AsyncStream<WorkerEvent>.Continuation, transportTimeout: Nanoseconds,
         connectTimeout: Nanoseconds = 20_000_000_000, logger: Logger) {
        self.context = context
        self.runtime = runtime
        self.ice = ice
        self.eventSink = events
        self.transportTimeout = transportTimeout
        self.connectTimeout = connectTimeout
        self.logger = logger
    }

    func run(inbox: MediaWorker.Inbox) {
        thread = pthread_self()
        g_main_context_push_thread_default(context)
        let me = Unmanaged.passUnretained(self).toOpaque()
        let tick = g_timeout_source_new(20)
        g_source_set_callback(tick, { data in
            guard let data else { return 0 }
            Unmanaged<WorkerCore>.fromOpaque(data).takeUnretainedValue().tick()
            return 1
        }, me, nil)
        g_source_attach(tick, context)
        while !stopping {
            g_main_context_iteration(context, 1)
            // Packets received in this iteration were routed into the outbox; send them now,
            // batched per subscriber.
            flush()
            for job in inbox.take() { job(self) }
        }
        for t in transports.values { t.close(reason: "server shutting down") }
        transports.removeAll()
        g_source_destroy(tick)
        g_source_unref(tick)
        g_main_context_pop_thread_default(context)
        eventSink.finish()
    }

    func stop() { stopping = true }

    @inline(__always) func assertOnThread() {
        assert(thread.map { pthread_equal($0, pthread_self()) != 0 } ?? true, "WorkerCore used off its thread")
    }

    // MARK: Commands (run through MediaWorker.perform)

    public func createTransport(id: TransportId, router: RouterId) throws -> TransportDescription {
        assertOnThread()
        let index = engine.addTransport(router: router, feedbackSsrc: UInt32.random(in: 1...UInt32.max))
        let transport = WebRtcTransport(id: id, index: index, core: self, now: monotonicNow())
        do {
            let description = try transport.open(runtime: runtime, context: context, configuration: ice)
            transports[id] = transport
            while byIndex.count <= Int(index.slot) { byIndex.append(nil) }
            byIndex[Int(index.slot)] = transport
            return description
        } catch {
            engine.removeTransport(index)
            throw WorkerError.transport("\(error)")
        }
    }

    public func setRemote(_ id: TransportId, _ remote: RemoteTransportParameters) throws {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        t.setRemote(remote)
    }

    public func addRemoteCandidate(_ id: TransportId, _ candidate: String?) throws {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        t.addRemoteCandidate(candidate)
    }

    public func engineIndex(of id: TransportId) throws -> TransportIndex {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        return t.index
    }

    public func addProducer(on id: TransportId, _ make: (TransportIndex) -> ProducerParameters) throws -> ProducerId {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        do { return try engine.addProducer(make(t.index)) } catch { throw WorkerError.media(error) }
    }

    public func addConsumer(on id: TransportId, _ make: (TransportIndex) -> ConsumerParameters) throws -> ConsumerId {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        do {
            let c = try engine.addConsumer(make(t.index), now: monotonicNow())
            flush()
            return c
        } catch { throw WorkerError.media(error) }
    }

    public func removeProducer(_ p: ProducerId) { engine.removeProducer(p) }
    public func removeConsumer(_ c: ConsumerId) { engine.removeConsumer(c) }
    public func setPaused(_ p: ProducerId, _ paused: Bool) { engine.setPaused(p, paused, now: monotonicNow()); flush() }
    public func requestKeyFrame(_ p: ProducerId) { engine.requestKeyFrame(p, now: monotonicNow()); flush() }
    public func producerStats(_ p: ProducerId) -> ProducerStats? { engine.producerStats(p) }
    public func consumerStats(_ c: ConsumerId) -> ConsumerStats? { engine.consumerStats(c) }

    public func closeTransport(_ id: TransportId) {
        guard let t = transports.removeValue(forKey: id) else { return }
        t.close(reason: nil)
        engine.removeTransport(t.index)
        if Int(t.index.slot) < byIndex.count, byIndex[Int(t.index.slot)] === t { byIndex[Int(t.index.slot)] = nil }
    }

    public var counters: WorkerCounters {
        var drops: [String: UInt64] = [:]
        for r in DropReason.allCases { drops[r.name] = engine.drops(r) }
        return WorkerCounters(rtpPacketsReceived: engine.rtpPacketsReceived, rtpPacketsForwarded: engine.rtpPacketsForwarded,
                              rtpBytesForwarded: engine.rtpBytesForwarded, keyFrameRequestsSent: engine.keyFrameRequestsSent,
                              drops: drops, transports: transports.count)
    }

    // MARK: Packet path

    /// Protects everything the engine left in its outbox (in place), chains each transport's
    /// packets, and sends each chain in one batch (`WebRtcTransport.sendChain`). Allocation-free.
    @inline(__always)
    func flush() {
        let n = engine.transmitCount
        guard n > 0 else { return }
        var touchedCount = 0
        var i = 0
        while i < n {
            let tx = engine.transmit(at: i)
            let ti = Int(tx.transport.slot)
            // The generation check keeps a packet for a closed transport from reaching the one
            // that reused its slot.
            if ti < byIndex.count, let t = byIndex[ti], t.index == tx.transport, let srtp = t.srtp,
               let length = tx.isRtcp ? srtp.protectRtcp(tx.bytes, length: tx.length) : srtp.protectRtp(tx.bytes, length: tx.length) {
                batch.bases[i] = tx.bytes
                batch.lengths[i] = length
                batch.next[i] = -1
                if t.batchTail < 0 {
                    t.batchHead = Int32(i)
                    batch.touched[touchedCount] = Unmanaged.passUnretained(t)
                    touchedCount += 1
                } else {
                    batch.next[Int(t.batchTail)] = Int32(i)
                }
                t.batchTail = Int32(i)
            }
            i += 1
        }
        for k in 0..<touchedCount { batch.touched[k].takeUnretainedValue().sendChain(batch) }
        engine.clearTransmits()
    }

    /// Flushes early when half the outbox is used (a burst of input before the loop iteration ends).
    @inline(__always)
    func flushIfFull() {
        if engine.transmitCount >= WorkerCore.outboxSlots / 2 { flush() }
    }

    // MARK: From transports

    func transportConnected(_ t: WebRtcTransport) {
        logger.debug("transport connected", metadata: ["transport": "\(t.id)"])
        engine.restartConsumers(on: t.index, now: monotonicNow())
        flush()
        eventSink.yield(.transportConnected(t.id))
    }

    func transportFailed(_ t: WebRtcTransport, reason: String) {
        guard transports[t.id] != nil else { return }
        logger.info("transport failed", metadata: ["transport": "\(t.id)", "reason": "\(reason)"])
        closeTransport(t.id)
        eventSink.yield(.transportClosed(t.id, reason: reason))
    }

    static func secondsText(_ ns: Nanoseconds) -> String {
        let tenths = ns / 100_000_000
        return tenths % 10 == 0 ? "\(tenths / 10)" : "\(tenths / 10).\(tenths % 10)"
    }

    private func tick() {
        let now = monotonicNow()
        engine.handleTimeout(now: now)
        var expired: [WebRtcTransport] = []
        var unconnected: [WebRtcTransport] = []
        for t in transports.values {
            t.tick(now: now)
            if transportTimeout > 0, t.sawMedia, let last = engine.lastReceived(on: t.index), last > 0,
               now &- last > transportTimeout {
                expired.append(t)
            } else if connectTimeout > 0, t.state != .connected, now > t.createdAt, now - t.createdAt > connectTimeout {
                unconnected.append(t)
            }
        }
        for t in expired { transportFailed(t, reason: "no media or RTCP for \(transportTimeout / 1_000_000_000) s") }
        for t in unconnected {
            transportFailed(t, reason: "connect timeout: ICE and DTLS did not connect within \(Self.secondsText(connectTimeout)) s")
        }
        flush()
    }
}
