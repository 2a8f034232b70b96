internal import MinatoWire

/// The forwarding core of one media worker: every Router's Producers and Consumers and the
/// transports they use, kept in flat arrays indexed by id (one owner, no references between
/// them). Sans-IO: `handleRtp`/`handleRtcp`/`handleTimeout` take packets and the time and
/// leave packets to send in the outbox (`transmitCount`, `transmit(at:)`, `clearTransmits()`).
/// Timers by deadline: `nextDeadline` says when `handleTimeout` next has work (a throttled or
/// retried keyframe request, a NACK retry, receiver reports while RTP arrives); nil means
/// never, and calling `handleTimeout` before the deadline does nothing (no scan). Reading
/// `nextDeadline` is O(1). Loss recovery (docs/architecture.md "Loss recovery"): each video
/// producer keeps its recent packets in a `RetransmissionBuffer` for subscribers' NACKs and a
/// `NackGenerator` for its own publisher's gaps. The packet path is in
/// MediaEngine+Forwarding.swift, RTCP in MediaEngine+Feedback.swift, timers in
/// MediaEngine+Timers.swift. Not thread-safe: lives on one media worker thread. The packet
/// path allocates nothing.
public final class MediaEngine {
    struct TransportEntry {
        var active = false
        /// Bumped when the slot is freed; ids carry the generation they were made with.
        var generation: UInt32 = 0
        var router = RouterId(-1)
        /// Our SSRC for RTCP feedback sent on this transport.
        var feedbackSsrc: UInt32 = 0
        /// (ssrc, producer) for demux of incoming RTP; rtx SSRCs map to -1 - producer.
        var receiveSsrcs = ContiguousArray<(ssrc: UInt32, producer: Int32)>()
        /// Consumers sending on this transport (for incoming RTCP feedback).
        var consumers = ContiguousArray<Int32>()
        /// Smoothed round-trip time from the receiver reports of this transport's peer; 0 unknown.
        var roundTripTime: Nanoseconds = 0
        /// The same client's other transport (`pairTransports`), whose RTT stands in for a missing one.
        var pairedWith: TransportIndex?
        /// Outgoing streams whose consumer ended, by SSRC (at most `endedStreamsKept`, newest
        /// last): a later consumer with the same SSRC on this transport continues their numbering.
        var endedStreams = ContiguousArray<EndedStream>()
    }

    /// Where an ended consumer's outgoing stream stopped (`TransportEntry.endedStreams`).
    struct EndedStream {
        var ssrc: UInt32
        var rewriter: SequenceRewriter
        var rtxSequence: UInt16
    }

    /// How many ended streams a transport remembers.
    static let endedStreamsKept = 16

    struct Producer {
        var active = false
        var generation: UInt32 = 0
        var parameters: ProducerParameters
        var consumers = ContiguousArray<Int32>()
        var stream = RtpStream()
        var keyFrames: KeyFrameRequester
        var keyFrameRequests: UInt64 = 0
        /// Why the throttled request waiting in `keyFrames` was made.
        var pendingKeyFrameCause = KeyFrameCause.consumerStart
        /// `stream.packets` when the last keyframe request went out (a silent producer is not asked again).
        var packetsAtKeyFrameRequest: UInt64 = 0
        /// `stream.packets` when the last receiver report for it went out.
        var reportedPackets: UInt64 = 0
        /// Video: the packets kept for subscribers' NACKs (one per producer, shared by its consumers).
        var retransmissions: RetransmissionBuffer?
        /// Video whose publisher negotiated `nack`: its gaps, NACKed to the publisher.
        var nack: NackGenerator?
        var nacksSent: UInt64 = 0
        var packetsRecovered: UInt64 = 0
    }

    struct Consumer {
        var active = false
        var generation: UInt32 = 0
        var parameters: ConsumerParameters
        var rewriter: SequenceRewriter
        /// Video waits for a keyframe before its first packet and after a resume.
        var waitingForKeyFrame: Bool
        var packetsSent: UInt64 = 0
        var bytesSent: UInt64 = 0
        var octetsSent: UInt64 = 0
        /// The next sequence number of this consumer's RTX stream.
        var rtxSequence: UInt16 = 0
        var nacksReceived: UInt64 = 0
        var packetsRetransmitted: UInt64 = 0
        /// Resends in the current `resendWindow` (at most `resendBudget`: a subscriber cannot
        /// make the server resend faster than that, whatever it NACKs).
        var resendWindowStart: Nanoseconds = 0
        var resendsInWindow = 0
        /// The middle 32 bits of the NTP time of the last sender report sent, and when (for
        /// the round-trip time from the subscriber's report, RFC 3550 6.4.1).
        var lastSenderReport: UInt32 = 0
        var lastSenderReportAt: Nanoseconds = 0
        /// The subscriber's last report block about this consumer.
        var report: ReportBlock?
    }

    public static let slotSize = 1600
    public static let srtpTrailerRoom = 64
    /// The largest clear RTP packet forwarded; larger ones are dropped (`DropReason.oversize`).
    public static let maxPacketLength = slotSize - srtpTrailerRoom

    var transports = ContiguousArray<TransportEntry>()
    var producers = ContiguousArray<Producer>()
    var consumers = ContiguousArray<Consumer>()
    private var freeTransports: [Int32] = []
    private var freeProducers: [Int32] = []
    private var freeConsumers: [Int32] = []

    // Outbox: preallocated slots; `pending` transmits in order.
    let outbox: UnsafeMutableRawPointer
    let outboxSlots: Int
    private let pendingTransports: UnsafeMutablePointer<Int32>
    private let pendingGenerations: UnsafeMutablePointer<UInt32>
    private let pendingLengths: UnsafeMutablePointer<Int32>
    private let pendingIsRtcp: UnsafeMutablePointer<Bool>
    public internal(set) var transmitCount = 0
    /// Sequence numbers of one NACK being written (`NackGenerator.poll`).
    let nackScratch: UnsafeMutablePointer<UInt16>
    static let nackScratchCount = 128
    /// Per consumer slot, `resendSlots` entries: which sequence number was last resent in that
    /// entry (indexed by sequence modulo `resendSlots`) and when, so one packet goes to one
    /// consumer at most once per round-trip time.
    var resentSequences = ContiguousArray<UInt16>()
    var resentAt = ContiguousArray<Nanoseconds>()
    static let resendSlots = 64
    /// At most `resendBudget` packets resent to one consumer per `resendWindow` (500 a second:
    /// far above what 5% loss of a 4 Mbit/s stream needs, and a bound on what NACKs can make
    /// the server send).
    static let resendWindow: Nanoseconds = 100_000_000
    static let resendBudget = 50
    public let tuning: EngineTuning

    // Counters.
    public internal(set) var rtpPacketsReceived: UInt64 = 0
    public internal(set) var rtpBytesReceived: UInt64 = 0
    /// RTP copies queued in the outbox for consumers (the worker counts what it actually sent).
    public internal(set) var rtpPacketsQueued: UInt64 = 0
    public internal(set) var rtpBytesQueued: UInt64 = 0
    public internal(set) var rtcpPacketsReceived: UInt64 = 0
    public internal(set) var keyFrameRequestsSent: UInt64 = 0
    /// Generic NACK packets received from subscribers / sent to publishers.
    public internal(set) var nacksReceived: UInt64 = 0
    public internal(set) var nacksSent: UInt64 = 0
    /// Packets resent to subscribers (RTX or plain) on their NACKs.
    public internal(set) var packetsRetransmitted: UInt64 = 0
    /// NACKed packets found in / missing from the retransmission store (too old, never received,
    /// or sent before the consumer's current run).
    public internal(set) var retransmissionHits: UInt64 = 0
    public internal(set) var retransmissionMisses: UInt64 = 0
    /// NACKed packets not resent because the same consumer got them less than an RTT ago.
    public internal(set) var retransmissionsThrottled: UInt64 = 0
    /// Packets a publisher resent as RTX that filled a gap, and missing packets that arrived later at all.
    public internal(set) var rtxRecovered: UInt64 = 0
    public internal(set) var packetsRecovered: UInt64 = 0
    var keyFrameRequestsByCause = ContiguousArray<UInt64>(repeating: 0, count: KeyFrameCause.allCases.count)
    var drops = ContiguousArray<UInt64>(repeating: 0, count: DropReason.allCases.count)
    public static let reportInterval: Nanoseconds = 1_000_000_000
    /// The earliest keyframe request's deadline, throttled or retried (`.max`: none).
    var keyFrameDeadline: Nanoseconds = .max
    /// When receiver reports are next due (`.max`: no RTP arrived since the last ones).
    var reportDeadline: Nanoseconds = .max
    /// The earliest NACK retry or give-up of any producer (`.max`: nothing missing).
    var nackDeadline: Nanoseconds = .max

    public init(outboxSlots: Int = 512, tuning: EngineTuning = EngineTuning()) {
        self.tuning = tuning
        self.outboxSlots = outboxSlots
        nackScratch = .allocate(capacity: Self.nackScratchCount)
        outbox = UnsafeMutableRawPointer.allocate(byteCount: outboxSlots * Self.slotSize, alignment: 16)
        pendingTransports = .allocate(capacity: outboxSlots)
        pendingGenerations = .allocate(capacity: outboxSlots)
        pendingLengths = .allocate(capacity: outboxSlots)
        pendingIsRtcp = .allocate(capacity: outboxSlots)
    }

    deinit {
        outbox.deallocate()
        pendingTransports.deallocate()
        pendingGenerations.deallocate()
        pendingLengths.deallocate()
        pendingIsRtcp.deallocate()
        nackScratch.deallocate()
    }

    // MARK: Control (not on the packet path; may allocate)

    /// Registers a transport of `router`'s room; its producers and consumers stay in that router.
    public func addTransport(router: RouterId, feedbackSsrc: UInt32) -> TransportIndex {
        var entry = TransportEntry()
        entry.active = true
        entry.router = router
        entry.feedbackSsrc = feedbackSsrc
        if let slot = freeTransports.popLast() {
            entry.generation = transports[Int(slot)].generation
            transports[Int(slot)] = entry
            return TransportIndex(slot: UInt32(truncatingIfNeeded: slot), generation: entry.generation)
        }
        transports.append(entry)
        return TransportIndex(slot: UInt32(truncatingIfNeeded: transports.count - 1), generation: 0)
    }

    /// Marks `a` and `b` as one client's two connections: a transport with no round-trip time of
    /// its own (a publisher's, which receives no media and so no reports) uses the other's.
    public func pairTransports(_ a: TransportIndex, _ b: TransportIndex) {
        guard isActive(a), isActive(b), a != b else { return }
        transports[Int(a.slot)].pairedWith = b
        transports[Int(b.slot)].pairedWith = a
    }

    /// Removes a transport with every producer and consumer on it.
    public func removeTransport(_ t: TransportIndex) {
        guard isActive(t) else { return }
        let slot = Int(t.slot)
        for c in transports[slot].consumers { removeConsumer(consumerId(Int(c))) }
        for (_, p) in transports[slot].receiveSsrcs where p >= 0 { removeProducer(producerId(Int(p))) }
        var entry = TransportEntry()
        entry.generation = transports[slot].generation &+ 1
        transports[slot] = entry
        freeTransports.append(Int32(truncatingIfNeeded: slot))
    }

    public func addProducer(_ parameters: ProducerParameters) throws(MediaError) -> ProducerId {
        let t = parameters.transport
        guard isActive(t) else { throw .unknownTransport(t) }
        let ts = Int(t.slot)
        for entry in transports[ts].receiveSsrcs
        where entry.ssrc == parameters.ssrc || (parameters.rtxSsrc != nil && entry.ssrc == parameters.rtxSsrc) {
            throw .ssrcInUse(entry.ssrc)
        }
        if let rtx = parameters.rtxSsrc, rtx == parameters.ssrc { throw .ssrcInUse(rtx) }
        var producer = Producer(parameters: parameters,
                                keyFrames: KeyFrameRequester(retryInterval: tuning.keyFrameRetryInterval))
        producer.active = true
        if parameters.kind == .video {
            producer.retransmissions = RetransmissionBuffer(capacity: tuning.retransmissionPackets,
                                                            maxAge: tuning.retransmissionMaxAge)
            if parameters.nack {
                producer.nack = NackGenerator(maxAge: tuning.nackMaxAge, maxRetries: tuning.nackMaxRetries)
            }
        }
        let id: Int32
        if let slot = freeProducers.popLast() {
            producer.generation = producers[Int(slot)].generation
            producers[Int(slot)] = producer
            id = slot
        } else {
            producers.append(producer)
            id = Int32(truncatingIfNeeded: producers.count - 1)
        }
        transports[ts].receiveSsrcs.append((parameters.ssrc, id))
        if let rtx = parameters.rtxSsrc { transports[ts].receiveSsrcs.append((rtx, -1 - id)) }
        return producerId(Int(id))
    }

    /// Removes a producer and every consumer of it.
    public func removeProducer(_ p: ProducerId) {
        guard isActive(p) else { return }
        let slot = Int(p.slot)
        for c in producers[slot].consumers { removeConsumer(consumerId(Int(c))) }
        let t = producers[slot].parameters.transport
        let raw = Int32(truncatingIfNeeded: slot)
        if isActive(t) { transports[Int(t.slot)].receiveSsrcs.removeAll { $0.producer == raw || $0.producer == -1 - raw } }
        producers[slot].active = false
        producers[slot].generation &+= 1
        producers[slot].consumers = []
        producers[slot].retransmissions = nil
        producers[slot].nack = nil
        freeProducers.append(raw)
    }

    public func addConsumer(_ parameters: ConsumerParameters, now: Nanoseconds) throws(MediaError) -> ConsumerId {
        let p = parameters.producer
        guard isActive(p) else { throw .unknownProducer(p) }
        guard isActive(parameters.transport) else { throw .unknownTransport(parameters.transport) }
        let pp = producers[Int(p.slot)].parameters
        guard isActive(pp.transport),
              transports[Int(pp.transport.slot)].router == transports[Int(parameters.transport.slot)].router
        else { throw .routerMismatch }
        var rng = SystemRandomNumberGenerator()
        var consumer = Consumer(
            active: true, parameters: parameters,
            rewriter: SequenceRewriter(clockRate: pp.clockRate,
                                       initialSequence: UInt16.random(in: 0...0x7FFF, using: &rng),
                                       initialTimestamp: UInt32.random(in: 0...UInt32.max, using: &rng)),
            waitingForKeyFrame: pp.kind == .video)
        consumer.rtxSequence = UInt16.random(in: 0...0x7FFF, using: &rng)
        // The same SSRC on the same transport again (a WHEP m-section taking its publisher's next
        // publication): the subscriber sees one stream, so its numbering goes on without a jump.
        let ts = Int(parameters.transport.slot)
        if let i = transports[ts].endedStreams.firstIndex(where: { $0.ssrc == parameters.ssrc }) {
            let ended = transports[ts].endedStreams.remove(at: i)
            consumer.rewriter = ended.rewriter
            consumer.rewriter.resync()
            consumer.rtxSequence = ended.rtxSequence
        }
        let id: Int32
        if let slot = freeConsumers.popLast() {
            consumer.generation = consumers[Int(slot)].generation
            consumers[Int(slot)] = consumer
            id = slot
            let base = Int(slot) * Self.resendSlots
            for i in base..<(base + Self.resendSlots) { resentAt[i] = 0 }
        } else {
            consumers.append(consumer)
            id = Int32(truncatingIfNeeded: consumers.count - 1)
            resentSequences.append(contentsOf: repeatElement(0, count: Self.resendSlots))
            resentAt.append(contentsOf: repeatElement(0, count: Self.resendSlots))
        }
        producers[Int(p.slot)].consumers.append(id)
        transports[Int(parameters.transport.slot)].consumers.append(id)
        if pp.kind == .video { requestKeyFrame(slot: Int(p.slot), now: now, cause: .consumerStart) }
        return consumerId(Int(id))
    }

    public func removeConsumer(_ c: ConsumerId) {
        guard isActive(c) else { return }
        let slot = Int(c.slot)
        let raw = Int32(truncatingIfNeeded: slot)
        let params = consumers[slot].parameters
        if isActive(params.producer) { producers[Int(params.producer.slot)].consumers.removeAll { $0 == raw } }
        if isActive(params.transport) {
            let ts = Int(params.transport.slot)
            transports[ts].consumers.removeAll { $0 == raw }
            transports[ts].endedStreams.removeAll { $0.ssrc == params.ssrc }
            if transports[ts].endedStreams.count >= Self.endedStreamsKept { transports[ts].endedStreams.removeFirst() }
            transports[ts].endedStreams.append(EndedStream(ssrc: params.ssrc, rewriter: consumers[slot].rewriter,
                                                           rtxSequence: consumers[slot].rtxSequence))
        }
        consumers[slot].active = false
        consumers[slot].generation &+= 1
        freeConsumers.append(raw)
    }

    /// Pauses (disabled publication) or resumes a producer; a resume asks for a keyframe and
    /// restarts every consumer's numbering continuously.
    public func setPaused(_ p: ProducerId, _ paused: Bool, now: Nanoseconds) {
        guard isActive(p), producers[Int(p.slot)].parameters.paused != paused else { return }
        producers[Int(p.slot)].parameters.paused = paused
        if !paused {
            let isVideo = producers[Int(p.slot)].parameters.kind == .video
            for c in producers[Int(p.slot)].consumers {
                consumers[Int(c)].rewriter.resync()
                consumers[Int(c)].waitingForKeyFrame = isVideo
            }
            if isVideo { requestKeyFrame(slot: Int(p.slot), now: now, cause: .consumerStart) }
        }
    }

    /// The transport (re)connected: its video consumers wait for a fresh keyframe, requested now,
    /// and their numbering continues from the last packet sent, so the packets dropped while
    /// waiting leave no gap for the subscriber to wait for (or NACK).
    public func restartConsumers(on t: TransportIndex, now: Nanoseconds) {
        guard isActive(t) else { return }
        for c in transports[Int(t.slot)].consumers {
            let p = consumers[Int(c)].parameters.producer
            guard isActive(p), producers[Int(p.slot)].parameters.kind == .video else { continue }
            consumers[Int(c)].rewriter.resync()
            consumers[Int(c)].waitingForKeyFrame = true
            requestKeyFrame(slot: Int(p.slot), now: now, cause: .consumerStart)
        }
    }

    /// Asks the producer's sender for a keyframe (throttled per producer, retried until one arrives).
    public func requestKeyFrame(_ p: ProducerId, now: Nanoseconds, cause: KeyFrameCause = .control) {
        guard isActive(p) else { return }
        requestKeyFrame(slot: Int(p.slot), now: now, cause: cause)
    }

    public func producerStats(_ p: ProducerId) -> ProducerStats? {
        guard isActive(p) else { return nil }
        let pr = producers[Int(p.slot)]
        return ProducerStats(packetsReceived: pr.stream.packets, bytesReceived: pr.stream.bytes,
                             keyFrameRequests: pr.keyFrameRequests, nacksSent: pr.nacksSent,
                             packetsRecovered: pr.packetsRecovered, packetsLost: pr.stream.cumulativeLost,
                             jitter: pr.stream.jitter)
    }
    public func consumerStats(_ c: ConsumerId) -> ConsumerStats? {
        guard isActive(c) else { return nil }
        let co = consumers[Int(c.slot)]
        var stats = ConsumerStats(packetsSent: co.packetsSent, bytesSent: co.bytesSent, nacksReceived: co.nacksReceived,
                                  packetsRetransmitted: co.packetsRetransmitted)
        if let r = co.report {
            stats.fractionLost = r.fractionLost
            stats.packetsLost = r.cumulativeLost
            stats.jitter = r.jitter
        }
        let t = co.parameters.transport
        if isActive(t), transports[Int(t.slot)].roundTripTime != 0 { stats.roundTripTime = transports[Int(t.slot)].roundTripTime }
        return stats
    }
    public func drops(_ reason: DropReason) -> UInt64 { drops[reason.rawValue] }
    public func keyFrameRequests(_ cause: KeyFrameCause) -> UInt64 { keyFrameRequestsByCause[cause.rawValue] }
    /// True when RTP with `ssrc` is expected on `t` (a producer's SSRC or RTX SSRC there).
    /// For the transport to drop packets of unknown streams before `srtp_unprotect`, which
    /// would otherwise set up libsrtp state for each new SSRC. Allocation-free.
    @inline(__always)
    public func expectsSsrc(_ ssrc: UInt32, on t: TransportIndex) -> Bool {
        guard isActive(t) else { return false }
        for entry in transports[Int(t.slot)].receiveSsrcs where entry.ssrc == ssrc { return true }
        return false
    }
    public var activeProducerCount: Int { producers.reduce(0) { $0 + ($1.active ? 1 : 0) } }
    public var activeConsumerCount: Int { consumers.reduce(0) { $0 + ($1.active ? 1 : 0) } }

    // MARK: Outbox

    public func transmit(at i: Int) -> Transmit {
        Transmit(transport: TransportIndex(slot: UInt32(truncatingIfNeeded: pendingTransports[i]),
                                           generation: pendingGenerations[i]),
                 isRtcp: pendingIsRtcp[i],
                 bytes: outbox + i * Self.slotSize, length: Int(pendingLengths[i]))
    }
    public func clearTransmits() { transmitCount = 0 }

    // MARK: Private

    // An id is live when its slot exists, is in use, and still has the id's generation.
    @inline(__always) func isActive(_ t: TransportIndex) -> Bool {
        Int(t.slot) < transports.count && transports[Int(t.slot)].active && transports[Int(t.slot)].generation == t.generation
    }
    @inline(__always) func isActive(_ p: ProducerId) -> Bool {
        Int(p.slot) < producers.count && producers[Int(p.slot)].active && producers[Int(p.slot)].generation == p.generation
    }
    @inline(__always) func isActive(_ c: ConsumerId) -> Bool {
        Int(c.slot) < consumers.count && consumers[Int(c.slot)].active && consumers[Int(c.slot)].generation == c.generation
    }
    func transportIndex(_ slot: Int) -> TransportIndex {
        TransportIndex(slot: UInt32(truncatingIfNeeded: slot), generation: transports[slot].generation)
    }
    func producerId(_ slot: Int) -> ProducerId {
        ProducerId(slot: UInt32(truncatingIfNeeded: slot), generation: producers[slot].generation)
    }
    func consumerId(_ slot: Int) -> ConsumerId {
        ConsumerId(slot: UInt32(truncatingIfNeeded: slot), generation: consumers[slot].generation)
    }

    @inline(__always)
    func enqueue(transport: TransportIndex, length: Int, isRtcp: Bool) {
        pendingTransports[transmitCount] = Int32(truncatingIfNeeded: transport.slot)
        pendingGenerations[transmitCount] = transport.generation
        pendingLengths[transmitCount] = Int32(length)
        pendingIsRtcp[transmitCount] = isRtcp
        transmitCount += 1
    }
}
