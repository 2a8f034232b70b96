internal import CNice
public import MinatoMedia
internal import Foundation
internal import CMinatoShims
internal import Synchronization
public import Logging

/// The control plane's handle on one media worker thread: a command inbox (the one type that
/// crosses threads) and a stream of events. Every engine, agent, DTLS and SRTP object lives in
/// the worker's `WorkerCore`, touched only on its thread.
public final class MediaWorker: Sendable {
    public let index: Int
    public let events: AsyncStream<WorkerEvent>
    private let inbox: Inbox

    typealias Inbox = WorkerInbox<WorkerCore>

    /// `transportTimeout`: a connected transport that carried media and then heard nothing from
    /// its peer (no media, RTCP or ICE consent check) for this long is closed
    /// (`TransportCloseReason.mediaTimeout`). `consentTimeout`: the same for one that never
    /// carried media (`.consentTimeout`). `connectTimeout`: a transport whose ICE and DTLS have
    /// not connected this long after it was created is closed (`.connectTimeout`). Zero
    /// disables one.
    public init(index: Int, runtime: CryptoRuntime, ice: IceConfiguration,
                transportTimeout: Duration, consentTimeout: Duration = .seconds(30), connectTimeout: Duration = .seconds(20),
                tuning: EngineTuning = EngineTuning(), dataLimits: DataLimits = DataLimits(), logger: Logger) {
        self.index = index
        let context = g_main_context_new()!
        let inbox = Inbox(context: context)
        self.inbox = inbox
        let (stream, continuation) = AsyncStream<WorkerEvent>.makeStream()
        self.events = stream
        let timeoutNs = nanoseconds(of: transportTimeout)
        let connectTimeoutNs = nanoseconds(of: connectTimeout)
        let consentTimeoutNs = nanoseconds(of: consentTimeout)
        let box = UncheckedBox((context, runtime, ice, continuation, logger, tuning, dataLimits))
        let name = "minato-media-\(index)"
        let thread = Thread {
            // Foundation names the thread only in its own bookkeeping: name it for the kernel
            // too (ps, top, /proc/<pid>/task/*/comm), else it shows its creator's name.
            minato_set_thread_name(name)
            let (context, runtime, ice, continuation, logger, tuning, dataLimits) = box.value
            let core = WorkerCore(context: context, runtime: runtime, ice: ice, events: continuation,
                                  transportTimeout: timeoutNs, consentTimeout: consentTimeoutNs, connectTimeout: connectTimeoutNs,
                                  tuning: tuning, dataLimits: dataLimits, logger: logger)
            core.run(inbox: inbox)
        }
        thread.name = name
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

/// Everything one media worker owns: the engine (routing), every transport, the send batch and
/// the packet counters, and one timer armed for the soonest deadline. Confined to the worker
/// thread (checked in debug builds).
///
/// Transports report, the worker decides: a transport turns each input into an outcome
/// (`ReceiveOutcome`, `TransportUpdate`, `SendOutcome`) and the worker routes packets into the
/// engine, batches the engine's output per transport, counts, and closes transports.
///
/// Timers by deadline: the engine (`MediaEngine.nextDeadline`) and each transport
/// (`WebRtcTransport.deadline`) say when they next need a timeout; the worker arms one GLib
/// source (`CallbackSource.setDeadline`) for the soonest. With nothing due the thread sleeps in
/// `poll`. The engine's deadline is O(1) to read and checked after every loop iteration; the
/// transports' are recomputed only after something that can move them (a command, a DTLS or ICE
/// event, the timer itself), and the media timeout is rechecked lazily when it fires.
public final class WorkerCore {
    let context: OpaquePointer
    let runtime: CryptoRuntime
    let ice: IceConfiguration
    /// Outbox slots: a flush is forced when half are used (`flushIfFull`), so one received
    /// packet may fan out to up to `outboxSlots / 2` consumers without drops.
    static let outboxSlots = 2048
    let engine: MediaEngine
    let batch = SendBatch(slots: WorkerCore.outboxSlots)
    let logger: Logger
    let eventSink: AsyncStream<WorkerEvent>.Continuation
    /// The connect and media timeouts of every transport made here.
    let timeouts: TransportTimeouts
    private(set) var transports: [TransportId: WebRtcTransport] = [:]
    /// Data channels (WorkerCore+Data.swift) and when usrsctp's timers next run (.max: never).
    let data: DataRouter
    var dataTickAt: Nanoseconds = .max
    /// Reads established transports' sockets outside GLib (nil: `media.ice.directReceive` off,
    /// or no epoll set).
    let direct: DirectReceiver?
    /// The GLib context libnice runs every agent's timers on (keepalives, check pacing, consent),
    /// iterated by one worker source (`agentTimerSource`) while the worker has transports. On
    /// the worker's own context those timers (one or two per agent) made every loop iteration,
    /// so every received packet, visit every agent: GLib prepares and checks each source it
    /// holds. An ICE-lite agent answers checks from its socket callbacks, so its timers are not
    /// urgent. While a transport is still connecting or restarting ICE, the source runs every
    /// `agentTimerPeriodMs` (libnice may add a timer from a socket callback on the worker's
    /// context, unseen by us); once all are connected it is armed for the soonest timer the
    /// context holds, at most `agentTimerIdleMs` ahead.
    let agentTimers: OpaquePointer
    static let agentTimerPeriodMs: Int64 = 20
    static let agentTimerIdleMs: Int64 = 1000
    var agentTimerSource: CallbackSource?
    /// Whether some transport is not connected yet or is restarting ICE (recomputed with the
    /// transport deadlines).
    var transportsSettling = true
    /// Times the agent-timer source ran.
    var agentTimerWakeups: UInt64 = 0
    /// Engine transport slot -> transport, for the send path and the direct receiver.
    private(set) var byIndex = ContiguousArray<WebRtcTransport?>()
    /// Plain RTP egress transports (WorkerCore+Plain.swift), by id and by engine slot.
    var plainTransports: [TransportId: PlainRtpTransport] = [:]
    var plainByIndex = ContiguousArray<PlainRtpTransport?>()
    private var stopping = false
    private var thread: pthread_t?

    // Counters (the engine keeps its own receive-side ones).
    var drops = ContiguousArray<UInt64>(repeating: 0, count: DropReason.allCases.count)
    var rtpPacketsSent: UInt64 = 0
    var rtpBytesSent: UInt64 = 0
    /// What crossed relays between nodes (the engine adds its NACK and resend counts in `counters`).
    var relay = RelayCounters()
    var rtcpPacketsSent: UInt64 = 0
    var timerWakeups: UInt64 = 0

    // The timer.
    var timer: CallbackSource?
    /// What the timer is armed for (`.max`: disarmed; 0: must be set again).
    var armedFor: Nanoseconds = .max
    /// The soonest transport deadline, valid while `transportDeadlinesStale` is false.
    var transportDeadline: Nanoseconds = .max
    var transportDeadlinesStale = false

    init(context: OpaquePointer, runtime: CryptoRuntime, ice: IceConfiguration,
         events: AsyncStream<WorkerEvent>.Continuation, transportTimeout: Nanoseconds, consentTimeout: Nanoseconds = 0,
         connectTimeout: Nanoseconds = 20_000_000_000, tuning: EngineTuning = EngineTuning(),
         dataLimits: DataLimits = DataLimits(), logger: Logger) {
        self.engine = MediaEngine(outboxSlots: WorkerCore.outboxSlots, tuning: tuning)
        self.data = DataRouter(limits: dataLimits)
        self.context = context
        self.runtime = runtime
        self.ice = ice
        self.direct = ice.directReceive ? DirectReceiver() : nil
        self.agentTimers = g_main_context_new()
        self.eventSink = events
        self.timeouts = TransportTimeouts(connect: connectTimeout, media: transportTimeout, consent: consentTimeout)
        self.logger = logger
    }

    func run(inbox: MediaWorker.Inbox) {
        thread = pthread_self()
        g_main_context_push_thread_default(context)
        startTimer()
        direct?.start(context: context, ready: { data in
            guard let data else { return 1 }
            Unmanaged<WorkerCore>.fromOpaque(data).takeUnretainedValue().readDirect()
            return 1
        }, owner: Unmanaged.passUnretained(self).toOpaque())
        while !stopping {
            g_main_context_iteration(context, 1)
            endOfIteration(inbox)
        }
        for t in transports.values { t.close(context: context) }
        transports.removeAll()
        for p in plainTransports.values { p.close() }
        plainTransports.removeAll()
        stopTimer()
        direct?.stop()
        runAgentTimers(false)
        g_main_context_pop_thread_default(context)
        eventSink.finish()
    }

    func stop() { stopping = true }

    /// What follows each main-loop iteration: packets received in it were routed into the
    /// outbox, so send them now (batched per subscriber), run posted commands, re-arm the timer.
    @inline(__always)
    func endOfIteration(_ inbox: MediaWorker.Inbox) {
        flush()
        inbox.runJobs(self)
        armTimer()
    }

    /// Registers a transport made outside `createTransport` (`WorkerBenchmarkRig`).
    func adopt(_ t: WebRtcTransport) {
        transports[t.id] = t
        while byIndex.count <= Int(t.index.slot) { byIndex.append(nil) }
        byIndex[Int(t.index.slot)] = t
        batch.reserve(transportSlot: Int(t.index.slot))
        transportDeadlinesStale = true
        runAgentTimers(true)
    }

    deinit {
        runAgentTimers(false)   // a core driven without `run` (tests, benchmarks) may still hold it
        g_main_context_unref(agentTimers)
    }

    @inline(__always) func assertOnThread() {
        assert(thread.map { pthread_equal($0, pthread_self()) != 0 } ?? true, "WorkerCore used off its thread")
    }

    // MARK: Commands (run through MediaWorker.perform)

    /// A transport in `role` (`TransportRole`: a client's, or either side of a relay between
    /// two nodes). Every role carries producers and consumers alike.
    public func createTransport(id: TransportId, router: RouterId, role: TransportRole = .client) throws -> TransportDescription {
        assertOnThread()
        let index = engine.addTransport(router: router, feedbackSsrc: UInt32.random(in: 1...UInt32.max), relay: role.isRelay)
        do {
            let secure = try SecureTransport(runtime: runtime, now: monotonicNow(), timeouts: timeouts)
            let transport = WebRtcTransport(id: id, index: index, worker: self, secure: secure, direct: direct,
                                            agentTimers: agentTimers, role: role)
            let description = try transport.open(runtime: runtime, context: context, configuration: ice)
            adopt(transport)
            return description
        } catch IceAgent.Failure.gather {
            engine.removeTransport(index)
            throw WorkerError.noFreePort
        } catch {
            engine.removeTransport(index)
            throw WorkerError.transport("\(error)")
        }
    }

    /// Marks two transports as one client's (its send and receive connections): where one has
    /// no round-trip time of its own, the engine uses the other's.
    public func pairTransports(_ a: TransportId, _ b: TransportId) {
        guard let ta = transports[a], let tb = transports[b] else { return }
        engine.pairTransports(ta.index, tb.index)
    }

    public func setRemote(_ id: TransportId, _ remote: RemoteTransportParameters) throws {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        apply(t.setRemote(remote), to: t)
        transportDeadlinesStale = true
    }

    /// Starts an ICE restart on a transport (`WebRtcTransport.restartIce`): its new local
    /// credentials and candidates, for the next offer or answer.
    public func restartIce(_ id: TransportId) throws -> TransportDescription {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        do {
            let d = try t.restartIce(runtime: runtime, configuration: ice, now: monotonicNow())
            transportDeadlinesStale = true
            return d
        } catch IceAgent.Failure.gather {
            throw WorkerError.noFreePort
        } catch {
            throw WorkerError.transport("\(error)")
        }
    }

    public func addRemoteCandidate(_ id: TransportId, _ candidate: String?) throws {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        t.addRemoteCandidate(candidate)
    }

    public func addProducer(on id: TransportId, _ make: (TransportIndex) -> ProducerParameters) throws -> ProducerId {
        guard let index = transports[id]?.index ?? plainTransports[id]?.index else { throw WorkerError.unknownTransport(id) }
        do { return try engine.addProducer(make(index)) } catch { throw WorkerError.media(error) }
    }

    public func addConsumer(on id: TransportId, _ make: (TransportIndex) -> ConsumerParameters) throws -> ConsumerId {
        guard let index = transports[id]?.index ?? plainTransports[id]?.index else { throw WorkerError.unknownTransport(id) }
        do {
            let c = try engine.addConsumer(make(index), now: monotonicNow())
            flush()
            return c
        } catch { throw WorkerError.media(error) }
    }

    public func removeProducer(_ p: ProducerId) { engine.removeProducer(p) }
    public func removeConsumer(_ c: ConsumerId) { engine.removeConsumer(c) }
    public func setPaused(_ p: ProducerId, _ paused: Bool) { engine.setPaused(p, paused, now: monotonicNow()); flush() }
    public func requestKeyFrame(_ p: ProducerId) { engine.requestKeyFrame(p, now: monotonicNow()); flush() }
    /// Caps a simulcast consumer at `layer` (0 = lowest; nil: no cap).
    public func setPreferredLayer(_ c: ConsumerId, _ layer: Int?) { engine.setPreferredLayer(c, layer, now: monotonicNow()); flush() }
    public func producerStats(_ p: ProducerId) -> ProducerStats? { engine.producerStats(p) }
    public func consumerStats(_ c: ConsumerId) -> ConsumerStats? { engine.consumerStats(c) }

    public func closeTransport(_ id: TransportId) {
        if closePlainTransport(id) { return }
        guard let t = transports.removeValue(forKey: id) else { return }
        dataTransportClosed(id)
        t.close(context: context)
        engine.removeTransport(t.index)
        if Int(t.index.slot) < byIndex.count, byIndex[Int(t.index.slot)] === t { byIndex[Int(t.index.slot)] = nil }
        transportDeadlinesStale = true
        if transports.isEmpty { runAgentTimers(false) }
    }

    /// RTP packets sent so far (cheap: no dictionary, unlike `counters`).
    var rtpPacketsForwarded: UInt64 { rtpPacketsSent }

    public var counters: WorkerCounters {
        var named: [String: UInt64] = [:]
        for r in DropReason.allCases { named[r.name] = engine.drops(r) &+ drops[r.rawValue] }
        var c = WorkerCounters(
            rtpPacketsReceived: engine.rtpPacketsReceived, rtpBytesReceived: engine.rtpBytesReceived,
            rtpPacketsForwarded: rtpPacketsSent, rtpBytesForwarded: rtpBytesSent,
            rtcpPacketsReceived: engine.rtcpPacketsReceived, rtcpPacketsSent: rtcpPacketsSent,
            nacksReceived: engine.nacksReceived, keyFrameRequestsSent: engine.keyFrameRequestsSent,
            timerWakeups: timerWakeups, drops: named, transports: transports.count,
            directTransports: direct?.count ?? 0, directHandBacks: direct?.handedBack ?? 0,
            consentChecksAnswered: direct?.checksAnswered ?? 0, agentTimerWakeups: agentTimerWakeups,
            nacksSent: engine.nacksSent, packetsRetransmitted: engine.packetsRetransmitted,
            retransmissionLookups: ["hit": engine.retransmissionHits, "miss": engine.retransmissionMisses,
                                    "throttled": engine.retransmissionsThrottled],
            packetsRecovered: engine.packetsRecovered, rtxRecovered: engine.rtxRecovered,
            keyFrameRequestsByCause: Dictionary(uniqueKeysWithValues: KeyFrameCause.allCases.map {
                ($0.name, engine.keyFrameRequests($0))
            }),
            transportFeedbackSent: engine.transportFeedbackSent, probesStarted: engine.probesStarted,
            paddingPacketsSent: engine.paddingPacketsSent)
        c.data = dataCounters
        c.relay = relay
        c.relay.packetsMissing = engine.relayPacketsMissing
        c.relay.packetsRetransmitted = engine.relayPacketsRetransmitted
        return c
    }

    // MARK: Packet path

    /// A datagram for `t`, from libnice (through `iceReceive`) or read directly (`readDirect`,
    /// with the kernel's receive time `kernelArrival`, 0 when unknown): the transport decrypts
    /// it, the worker routes it into the engine or counts the drop. No Swift allocation.
    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer, on t: WebRtcTransport, kernelArrival: Nanoseconds? = nil) {
        let now = monotonicNow()
        switch t.received(datagram, now: now, engine: engine) {
        case .rtp(let packet):
            if t.isRelay {
                relay.packetsReceived &+= 1
                relay.bytesReceived &+= UInt64(packet.count)
            }
            var arrival: Nanoseconds = 0
            if engine.recordsArrivals(on: t.index) {
                if let kernelArrival {
                    arrival = WebRtcTransport.plausibleArrival(kernelArrival, now: now)
                } else {
                    arrival = t.kernelArrival(now: now)
                }
            }
            engine.handleRtp(from: t.index, packet: packet, now: now, arrival: arrival)
            flushIfFull()
        case .rtcp(let packet):
            engine.handleRtcp(from: t.index, packet: packet, now: now)
            flushIfFull()
        case .dropped(let reason):
            drops[reason.rawValue] &+= 1
        case .handshake(let update):
            apply(update, to: t)
            transportDeadlinesStale = true   // the DTLS timer moved
            if !data.endpoints.isEmpty { dataReceived(on: t, now: now) }
        }
    }

    /// Chains the packets the engine left in its outbox by transport, then for each chain
    /// protects them in place and sends them in batches (`WebRtcTransport.send`). Counts what
    /// was sent and every packet that was not, by reason. No allocation (libsrtp on OpenSSL
    /// allocates only with AES-CM + HMAC-SHA1: bench/malloc-allowances.txt).
    func flush() {
        let n = engine.transmitCount
        guard n > 0 else { return }
        // Read once: the per-packet loop then makes no exclusivity check and no copy-on-write
        // check on the worker's own arrays (a fifth of the Swift runtime's share in audio-50).
        let byIndex = self.byIndex
        let batch = self.batch
        let heads = batch.heads, tails = batch.tails, next = batch.next, chains = batch.chainCapacity
        var touchedCount = 0
        for k in 0..<n {
            let tx = engine.transmit(at: k)
            let ti = Int(tx.transport.slot)
            // The generation check keeps a packet for a closed transport from reaching the one
            // that reused its slot.
            guard ti < byIndex.count, ti < chains, let t = byIndex[ti], t.index == tx.transport else {
                if ti < plainByIndex.count, let p = plainByIndex[ti], p.index == tx.transport {
                    sendPlain(p, tx)
                } else {
                    drops[DropReason.transportClosed.rawValue] &+= 1
                }
                continue
            }
            batch.bases[k] = tx.bytes
            batch.clearLengths[k] = tx.length
            batch.isRtcp[k] = tx.isRtcp
            next[k] = -1
            if tails[ti] < 0 {
                heads[ti] = Int32(k)
                batch.touched[touchedCount] = Int32(ti)
                touchedCount += 1
            } else {
                next[Int(tails[ti])] = Int32(k)
            }
            tails[ti] = Int32(k)
        }
        for j in 0..<touchedCount { sendChain(transportSlot: Int(batch.touched[j]), byIndex) }
        engine.clearTransmits()
    }

    /// Protects one transport's chain in place (its transport and SRTP session are loaded once
    /// for the chain, not per packet) and sends it, at most `SendBatch.maxPerCall` datagrams
    /// per call.
    @inline(__always)
    private func sendChain(transportSlot ti: Int, _ byIndex: ContiguousArray<WebRtcTransport?>) {
        let batch = self.batch
        var k = batch.heads[ti]
        batch.heads[ti] = -1
        batch.tails[ti] = -1
        guard let t = byIndex[ti] else { return }
        guard let srtp = t.srtp else {
            while k >= 0 { drops[DropReason.noSrtpSession.rawValue] &+= 1; k = batch.next[Int(k)] }
            return
        }
        var count = 0
        while k >= 0 {
            let slot = Int(k)
            k = batch.next[slot]
            let base = batch.bases[slot]
            let clear = batch.clearLengths[slot]
            guard let length = batch.isRtcp[slot] ? srtp.protectRtcp(base, length: clear)
                                                  : srtp.protectRtp(base, length: clear) else {
                drops[DropReason.srtpProtectFailed.rawValue] &+= 1; continue
            }
            batch.scratchBases[count] = base
            batch.scratchLengths[count] = length
            batch.scratchSlots[count] = Int32(slot)
            count += 1
            if count == SendBatch.maxPerCall {
                sendScratch(t, count)
                count = 0
            }
        }
        if count > 0 { sendScratch(t, count) }
    }

    @inline(__always)
    private func sendScratch(_ t: WebRtcTransport, _ count: Int) {
        guard t.send(batch.scratchBases, batch.scratchLengths, count: count, sent: batch.scratchSent, gso: &batch.gso) else {
            drops[DropReason.iceNotConnected.rawValue] &+= UInt64(count)
            return
        }
        let sent = account(count)
        guard t.isRelay else { return }
        relay.packetsSent &+= sent.packets
        relay.bytesSent &+= sent.bytes
    }

    /// Counts the scratch entries of one send call by what the kernel said of each: sent
    /// (RTP packets and clear bytes, or RTCP packets) or dropped (`sendFailed`). Summed in
    /// locals, stored once per call; returns the RTP packets and bytes sent (a relay's counts).
    @inline(__always)
    func account(_ count: Int) -> (packets: UInt64, bytes: UInt64) {
        let batch = self.batch
        var rtp: UInt64 = 0, bytes: UInt64 = 0, rtcp: UInt64 = 0, failed: UInt64 = 0
        for j in 0..<count {
            guard batch.scratchSent[j] != 0 else { failed &+= 1; continue }
            let k = Int(batch.scratchSlots[j])
            if batch.isRtcp[k] {
                rtcp &+= 1
            } else {
                rtp &+= 1
                bytes &+= UInt64(batch.clearLengths[k])
            }
        }
        if failed > 0 { drops[DropReason.sendFailed.rawValue] &+= failed }
        rtpPacketsSent &+= rtp
        rtpBytesSent &+= bytes
        rtcpPacketsSent &+= rtcp
        return (rtp, bytes)
    }

    /// Flushes early when half the outbox is used (a burst of input before the loop iteration ends).
    @inline(__always)
    func flushIfFull() {
        if engine.transmitCount >= WorkerCore.outboxSlots / 2 { flush() }
    }

    // MARK: From transports

    /// An ICE state change of one of `t`'s agents (through `iceStateChanged`).
    func iceChanged(_ progress: IceProgress, agent: OpaquePointer?, on t: WebRtcTransport) {
        let restarting = t.isRestartingIce
        apply(t.iceChanged(progress, agent: agent), to: t)
        if restarting, !t.isRestartingIce, transports[t.id] === t {
            engine.requestKeyFramesForConsumers(on: t.index, now: monotonicNow(), cause: .iceRestart)
            flush()
            logger.info("ICE restart completed", metadata: ["transport": "\(t.id)", "restarts": "\(t.iceRestarts)"])
            eventSink.yield(.iceRestarted(t.id))
        }
        if transports[t.id] === t { t.refreshDirect() }
        transportDeadlinesStale = true
    }

    func apply(_ update: TransportUpdate, to t: WebRtcTransport) {
        switch update {
        case .none: break
        case .connected:
            t.secure.heard(at: monotonicNow())
            let after = monotonicNow() &- t.secure.createdAt
            logger.debug("transport connected", metadata: [
                "transport": "\(t.id)", "afterMs": "\(after / 1_000_000)", "dtlsHeldForIce": "\(t.handshakeDatagramsHeld)"])
            engine.restartConsumers(on: t.index, now: monotonicNow())
            flush()
            dataConnected(t)
            t.refreshDirect()
            eventSink.yield(.transportConnected(t.id, after: duration(after)))
        case .failed(let reason):
            guard transports[t.id] === t else { return }
            logger.info("transport failed", metadata: ["transport": "\(t.id)", "reason": "\(reason)"])
            closeTransport(t.id)
            eventSink.yield(.transportClosed(t.id, reason: reason))
        }
    }
}
