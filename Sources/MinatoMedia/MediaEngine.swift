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
        /// A relay between nodes (its losses and resends are counted apart).
        var isRelay = false
        /// (ssrc, producer) for demux of incoming RTP; rtx SSRCs map to -1 - producer.
        var receiveSsrcs = ContiguousArray<(ssrc: UInt32, producer: Int32)>()
        /// Consumers sending on this transport (for incoming RTCP feedback).
        var consumers = ContiguousArray<Int32>()
        /// Smoothed round-trip time from the receiver reports of this transport's peer, or from
        /// the repairs of the packets we NACKed on it (`roundTripSample`); 0 unknown.
        var roundTripTime: Nanoseconds = 0
        /// The same client's other transport (`pairTransports`), whose RTT stands in for a missing one.
        var pairedWith: TransportIndex?
        /// Outgoing streams whose consumer ended, by SSRC (at most `endedStreamsKept`, newest
        /// last): a later consumer with the same SSRC on this transport continues their numbering.
        var endedStreams = ContiguousArray<EndedStream>()
        /// Simulcast layers (producer slots) whose SSRC (`repaired`: RTX SSRC) is not known yet:
        /// the first authenticated packet with their RID binds it (`bindByRid`).
        var unboundRids = ContiguousArray<(producer: Int32, repaired: Bool)>()
        /// A publisher transport with transport-wide sequence numbers (their header extension
        /// id, 0: none): when each arrived, reported every `feedbackInterval`.
        var transportSequenceId: UInt8 = 0
        var feedbackRecorder: TransportFeedbackRecorder?
        /// A subscriber transport: the next transport-wide sequence number to send, its
        /// bandwidth estimate (once a consumer numbers packets), and the consumer whose RTX
        /// stream carries probe padding (-1: none).
        var sendSequence: UInt16 = 0
        var estimator: SendSideEstimator?
        var probeConsumer: Int32 = -1
        /// Probe padding owed, in bytes (fractions carried to the next slice).
        var probeCredit = 0
        var probeSliceAt: Nanoseconds = 0
        /// What its peer's RTCP may still cost (`handleRtcp`); set from the tuning in `addTransport`.
        var rtcpBudget = RtcpBudget(packetsPerSecond: 1, workPerSecond: 1)
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
        /// Simulcast: this slot's layer (0 = lowest) and the slot of the group's lowest layer,
        /// which holds `layerSlots` (every layer's slot, lowest first) and whose id is the
        /// producer's public id. Without simulcast: layer 0, its own slot, `[slot]`.
        var layer = 0
        var group: Int32 = 0
        var layerSlots = ContiguousArray<Int32>()
        /// Simulcast: the layer's RID bytes (matched against the RID header extension).
        var rid = ContiguousArray<UInt8>()
        /// When the last packet arrived (0: never): a layer silent for `layerIdleTime` is not chosen.
        var lastPacketAt: Nanoseconds = 0
        /// The bitrate received over the last report interval (bits per second).
        var bitrate = 0
        var bytesAtRate: UInt64 = 0
        var rateAt: Nanoseconds = 0
        /// VP8 with temporal layers: bytes received per TID (0...3) since the last rate tick,
        /// and the bitrate of each TID over the last interval.
        var temporalBytes = SIMD4<UInt64>()
        var temporalBitrates = SIMD4<Int>()
        /// Audio with levels: its room's `speakerRooms` index and its entry there (-1: none).
        var speakerRoom: Int32 = -1
        var speakerEntry: Int32 = -1
        /// How many TIDs the last interval carried (0: the stream has no temporal index).
        var temporalLayers: Int {
            var n = 4
            while n > 0, temporalBitrates[n - 1] == 0 { n -= 1 }
            return n
        }
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
        /// The producer's layer slots, lowest first (one entry without simulcast), the layer
        /// forwarded now (-1: none yet), the one to switch to at its next keyframe, and the
        /// highest the subscriber wants (`setPreferredLayer`; `Int.max`: no cap).
        var layerSlots = ContiguousArray<Int32>()
        var currentLayer = 0
        var targetLayer = 0
        var preferredLayer = Int.max
        /// The highest layer the transport's bandwidth estimate allows (`allocate`).
        var bandwidthLayer = Int.max
        var layerSwitches: UInt64 = 0
        /// VP8 simulcast: PictureID/TL0PICIDX kept continuous across layer switches and
        /// dropped temporal layers.
        var pictureIds = PictureIdRewriter()
        var rewritesPictureIds = false
        /// VP8 simulcast: the highest temporal layer (TID) forwarded now and the one to move to
        /// (`Int.max`: all), chosen by `allocate`; up at a layer-sync frame, down at any frame.
        var temporalLayer = Int.max
        var targetTemporalLayer = Int.max
        var temporalSwitches: UInt64 = 0
        /// Audio under `forwardLoudest`: its producer's packets are being left out; the next
        /// one forwarded restarts the numbering continuously (as after a pause).
        var skipping = false
    }

    /// A simulcast layer that received nothing for this long is not chosen for a consumer
    /// (the publisher stopped sending it, e.g. its uplink estimate dropped).
    static let layerIdleTime: Nanoseconds = 1_500_000_000
    /// Keyframe requests to different layers of one simulcast producer are at least this far
    /// apart (Chromium drops a request within 300 ms of the last one it answered, any layer).
    static let simulcastKeyFrameSpacing: Nanoseconds = 350_000_000

    public static let slotSize = 1600
    public static let srtpTrailerRoom = 64
    /// The largest clear RTP packet forwarded; larger ones are dropped (`DropReason.oversize`).
    public static let maxPacketLength = slotSize - srtpTrailerRoom

    var transports = ContiguousArray<TransportEntry>()
    var producers = ContiguousArray<Producer>()
    var consumers = ContiguousArray<Consumer>()
    private var freeTransports: [Int32] = []
    private var freeProducers: [Int32] = []
    var freeConsumers: [Int32] = []

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
    /// Relays between nodes: packets found missing in streams arriving over one (before their
    /// repair), and packets resent over one.
    public internal(set) var relayPacketsMissing: UInt64 = 0
    public internal(set) var relayPacketsRetransmitted: UInt64 = 0
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
    /// Transport-wide feedback packets sent to publishers.
    public internal(set) var transportFeedbackSent: UInt64 = 0
    var keyFrameRequestsByCause = ContiguousArray<UInt64>(repeating: 0, count: KeyFrameCause.allCases.count)
    var drops = ContiguousArray<UInt64>(repeating: 0, count: DropReason.allCases.count)
    public static let reportInterval: Nanoseconds = 1_000_000_000
    /// The earliest keyframe request's deadline, throttled or retried (`.max`: none).
    var keyFrameDeadline: Nanoseconds = .max
    /// When receiver reports are next due (`.max`: no RTP arrived since the last ones).
    var reportDeadline: Nanoseconds = .max
    /// The earliest NACK retry or give-up of any producer (`.max`: nothing missing).
    var nackDeadline: Nanoseconds = .max
    /// When transport-wide feedback is next due (`.max`: nothing arrived to report).
    var feedbackDeadline: Nanoseconds = .max
    /// How often publishers get transport-wide feedback while their packets arrive.
    public static let feedbackInterval: Nanoseconds = 50_000_000
    /// One feedback report being written (`sendTransportFeedback`).
    let arrivalScratch: UnsafeMutablePointer<TransportFeedback.Arrival>
    /// While any subscriber transport probes: when its padding is next due (`.max`: none).
    var probeDeadline: Nanoseconds = .max
    static let probeSlice: Nanoseconds = 10_000_000
    /// Active speakers, one state machine per room (router) with audio levels; the map is
    /// used on the control path only.
    var speakerRooms = ContiguousArray<ActiveSpeakers>()
    var speakerRoomRouters = ContiguousArray<RouterId?>()
    var speakerRoomByRouter: [RouterId: Int32] = [:]
    /// When the speaker rooms next tick (`.max`: no audio level arrived since they went quiet).
    var speakerDeadline: Nanoseconds = .max
    /// Some room's speaker list is due as an event (`takeSpeakerEvents`).
    public internal(set) var speakerEventsDue = false
    /// Probes started, and padding packets sent for them.
    public internal(set) var probesStarted: UInt64 = 0
    public internal(set) var paddingPacketsSent: UInt64 = 0

    public init(outboxSlots: Int = 512, tuning: EngineTuning = EngineTuning()) {
        self.tuning = tuning
        self.outboxSlots = outboxSlots
        nackScratch = .allocate(capacity: Self.nackScratchCount)
        arrivalScratch = .allocate(capacity: TransportFeedbackRecorder.capacity)
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
        arrivalScratch.deallocate()
    }

    // MARK: Control (not on the packet path; may allocate)

    /// Registers a transport of `router`'s room; its producers and consumers stay in that router.
    public func addTransport(router: RouterId, feedbackSsrc: UInt32, relay: Bool = false) -> TransportIndex {
        var entry = TransportEntry()
        entry.active = true
        entry.isRelay = relay
        entry.router = router
        entry.feedbackSsrc = feedbackSsrc
        entry.rtcpBudget = RtcpBudget(packetsPerSecond: tuning.rtcpPacketsPerSecond, workPerSecond: tuning.rtcpWorkPerSecond)
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
        for p in producers.indices where producers[p].active && producers[p].parameters.transport == t
            && producers[p].group == Int32(truncatingIfNeeded: p) {
            removeProducer(producerId(p))
        }
        var entry = TransportEntry()
        entry.generation = transports[slot].generation &+ 1
        transports[slot] = entry
        freeTransports.append(Int32(truncatingIfNeeded: slot))
    }

    public func addProducer(_ parameters: ProducerParameters) throws(MediaError) -> ProducerId {
        let t = parameters.transport
        guard isActive(t) else { throw .unknownTransport(t) }
        let ts = Int(t.slot)
        if parameters.transportSequenceExtensionId != 0 {
            transports[ts].transportSequenceId = parameters.transportSequenceExtensionId
            if transports[ts].feedbackRecorder == nil { transports[ts].feedbackRecorder = TransportFeedbackRecorder() }
        }
        if !parameters.rids.isEmpty { return try addSimulcastProducer(parameters) }
        for entry in transports[ts].receiveSsrcs
        where entry.ssrc == parameters.ssrc || (parameters.rtxSsrc != nil && entry.ssrc == parameters.rtxSsrc) {
            throw .ssrcInUse(entry.ssrc)
        }
        if let rtx = parameters.rtxSsrc, rtx == parameters.ssrc { throw .ssrcInUse(rtx) }
        let id = addProducerSlot(parameters)
        transports[ts].receiveSsrcs.append((parameters.ssrc, id))
        if let rtx = parameters.rtxSsrc { transports[ts].receiveSsrcs.append((rtx, -1 - id)) }
        producers[Int(id)].group = id
        producers[Int(id)].layerSlots = [id]
        if parameters.kind == .audio, parameters.audioLevelExtensionId != 0 {
            addSpeaker(producer: Int(id), router: transports[ts].router)
        }
        return producerId(Int(id))
    }

    /// One slot per RID, SSRCs unbound until their first packet (`bindByRid`) unless declared
    /// (`layerSsrcs`, a relay); the lowest
    /// layer's id stands for the producer.
    private func addSimulcastProducer(_ parameters: ProducerParameters) throws(MediaError) -> ProducerId {
        let ts = Int(parameters.transport.slot)
        let declared = !parameters.layerSsrcs.isEmpty
        guard parameters.kind == .video, parameters.ridExtensionId != 0 || declared else { throw .simulcastUnsupported }
        if declared {
            let all = parameters.layerSsrcs + parameters.layerRtxSsrcs
            guard parameters.layerSsrcs.count == parameters.rids.count,
                  parameters.layerRtxSsrcs.isEmpty || parameters.layerRtxSsrcs.count == parameters.rids.count,
                  Set(all).count == all.count else { throw .simulcastUnsupported }
            for entry in transports[ts].receiveSsrcs where all.contains(entry.ssrc) { throw .ssrcInUse(entry.ssrc) }
        }
        var layer = parameters
        layer.ssrc = 0
        layer.rtxSsrc = nil
        var slots = ContiguousArray<Int32>()
        for _ in parameters.rids { slots.append(addProducerSlot(layer)) }
        for (i, slot) in slots.enumerated() {
            producers[Int(slot)].layer = i
            producers[Int(slot)].group = slots[0]
            producers[Int(slot)].rid = ContiguousArray(parameters.rids[i].utf8)
            if declared {
                producers[Int(slot)].parameters.ssrc = parameters.layerSsrcs[i]
                transports[ts].receiveSsrcs.append((parameters.layerSsrcs[i], slot))
                if parameters.rtxPayloadType != nil, !parameters.layerRtxSsrcs.isEmpty {
                    producers[Int(slot)].parameters.rtxSsrc = parameters.layerRtxSsrcs[i]
                    transports[ts].receiveSsrcs.append((parameters.layerRtxSsrcs[i], -1 - slot))
                }
                continue
            }
            transports[ts].unboundRids.append((slot, false))
            if parameters.rtxPayloadType != nil, parameters.repairedRidExtensionId != 0 {
                transports[ts].unboundRids.append((slot, true))
            }
        }
        producers[Int(slots[0])].layerSlots = slots
        // Binding appends on the packet path: the room is made here.
        transports[ts].receiveSsrcs.reserveCapacity(transports[ts].receiveSsrcs.count + 2 * slots.count)
        return producerId(Int(slots[0]))
    }

    private func addProducerSlot(_ parameters: ProducerParameters) -> Int32 {
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
        if let slot = freeProducers.popLast() {
            producer.generation = producers[Int(slot)].generation
            producers[Int(slot)] = producer
            return slot
        }
        producers.append(producer)
        return Int32(truncatingIfNeeded: producers.count - 1)
    }

    /// Removes a producer (every layer) and every consumer of it.
    public func removeProducer(_ p: ProducerId) {
        guard isActive(p) else { return }
        let primary = Int(producers[Int(p.slot)].group)
        let group = producers[primary].layerSlots
        for c in producers[primary].consumers { removeConsumer(consumerId(Int(c))) }
        for raw in group {
            let slot = Int(raw)
            let t = producers[slot].parameters.transport
            if isActive(t) {
                transports[Int(t.slot)].receiveSsrcs.removeAll { $0.producer == raw || $0.producer == -1 - raw }
                transports[Int(t.slot)].unboundRids.removeAll { $0.producer == raw }
            }
            removeSpeaker(producer: slot)
            producers[slot].active = false
            producers[slot].generation &+= 1
            producers[slot].consumers = []
            producers[slot].layerSlots = []
            producers[slot].retransmissions = nil
            producers[slot].nack = nil
            freeProducers.append(raw)
        }
    }

    /// Pauses (disabled publication) or resumes a producer; a resume asks for a keyframe and
    /// restarts every consumer's numbering continuously.
    public func setPaused(_ p: ProducerId, _ paused: Bool, now: Nanoseconds) {
        guard isActive(p), producers[Int(p.slot)].parameters.paused != paused else { return }
        let primary = Int(producers[Int(p.slot)].group)
        for layer in producers[primary].layerSlots { producers[Int(layer)].parameters.paused = paused }
        if !paused {
            let isVideo = producers[primary].parameters.kind == .video
            for c in producers[primary].consumers {
                consumers[Int(c)].rewriter.resync()
                consumers[Int(c)].pictureIds.resync()
                consumers[Int(c)].waitingForKeyFrame = isVideo
                if isVideo { requestKeyFrame(slot: targetSlot(Int(c)), now: now, cause: .consumerStart) }
            }
        }
    }

    /// True when RTP with `ssrc` is expected on `t` (a producer's SSRC or RTX SSRC there).
    /// For the transport to drop packets of unknown streams before `srtp_unprotect`, which
    /// would otherwise set up libsrtp state for each new SSRC. Allocation-free.
    @inline(__always)
    public func expectsSsrc(_ ssrc: UInt32, on t: TransportIndex) -> Bool {
        guard isActive(t) else { return false }
        for entry in transports[Int(t.slot)].receiveSsrcs where entry.ssrc == ssrc { return true }
        return false
    }

    /// `expectsSsrc`, or an unknown SSRC whose packet names a simulcast layer (RID) still
    /// unbound on `t` — read from the header before `srtp_unprotect` (SRTP leaves the header
    /// extensions in clear); the binding itself waits for the authenticated packet
    /// (`handleRtp`). So libsrtp sees a new SSRC at most once per announced layer, not per
    /// packet a peer makes up. Allocation-free.
    @inline(__always)
    public func expectsPacket(_ ssrc: UInt32, _ packet: UnsafeMutableRawBufferPointer, on t: TransportIndex) -> Bool {
        if expectsSsrc(ssrc, on: t) { return true }
        guard isActive(t), !transports[Int(t.slot)].unboundRids.isEmpty, let view = RtpPacketView(packet) else { return false }
        return unboundLayer(named: view, on: Int(t.slot)) != nil
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
