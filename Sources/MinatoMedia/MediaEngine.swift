internal import MinatoWire

/// The forwarding core of one media worker: every Router's Producers and Consumers and the
/// transports they use, kept in flat arrays indexed by id (one owner, no references between
/// them). Sans-IO: `handleRtp`/`handleRtcp`/`handleTimeout` take packets and the time and
/// leave packets to send in the outbox (`transmitCount`, `transmit(at:)`, `clearTransmits()`).
/// Timers by deadline: `nextDeadline` says when `handleTimeout` next has work (a throttled
/// keyframe request, receiver reports while RTP arrives); nil means never, and calling
/// `handleTimeout` before the deadline does nothing (no scan). Reading `nextDeadline` is O(1).
/// Not thread-safe: lives on one media worker thread. The packet path allocates nothing.
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
    }

    struct Producer {
        var active = false
        var generation: UInt32 = 0
        var parameters: ProducerParameters
        var consumers = ContiguousArray<Int32>()
        var stream = RtpStream()
        var keyFrames = KeyFrameRequester()
        var keyFrameRequests: UInt64 = 0
        /// `stream.packets` when the last receiver report for it went out.
        var reportedPackets: UInt64 = 0
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
    }

    public static let slotSize = 1600
    public static let srtpTrailerRoom = 64
    /// The largest clear RTP packet forwarded; larger ones are dropped (`DropReason.oversize`).
    public static let maxPacketLength = slotSize - srtpTrailerRoom

    private var transports = ContiguousArray<TransportEntry>()
    private var producers = ContiguousArray<Producer>()
    private var consumers = ContiguousArray<Consumer>()
    private var freeTransports: [Int32] = []
    private var freeProducers: [Int32] = []
    private var freeConsumers: [Int32] = []

    // Outbox: preallocated slots; `pending` transmits in order.
    private let outbox: UnsafeMutableRawPointer
    private let outboxSlots: Int
    private let pendingTransports: UnsafeMutablePointer<Int32>
    private let pendingGenerations: UnsafeMutablePointer<UInt32>
    private let pendingLengths: UnsafeMutablePointer<Int32>
    private let pendingIsRtcp: UnsafeMutablePointer<Bool>
    public private(set) var transmitCount = 0

    // Counters.
    public private(set) var rtpPacketsReceived: UInt64 = 0
    public private(set) var rtpBytesReceived: UInt64 = 0
    /// RTP copies queued in the outbox for consumers (the worker counts what it actually sent).
    public private(set) var rtpPacketsQueued: UInt64 = 0
    public private(set) var rtpBytesQueued: UInt64 = 0
    public private(set) var rtcpPacketsReceived: UInt64 = 0
    public private(set) var keyFrameRequestsSent: UInt64 = 0
    public private(set) var nacksReceived: UInt64 = 0
    private var drops = ContiguousArray<UInt64>(repeating: 0, count: DropReason.allCases.count)
    public static let reportInterval: Nanoseconds = 1_000_000_000
    /// The earliest throttled keyframe request's deadline (`.max`: none pending).
    private var keyFrameDeadline: Nanoseconds = .max
    /// When receiver reports are next due (`.max`: no RTP arrived since the last ones).
    private var reportDeadline: Nanoseconds = .max

    public init(outboxSlots: Int = 512) {
        self.outboxSlots = outboxSlots
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
        var producer = Producer(parameters: parameters)
        producer.active = true
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
        let id: Int32
        if let slot = freeConsumers.popLast() {
            consumer.generation = consumers[Int(slot)].generation
            consumers[Int(slot)] = consumer
            id = slot
        } else {
            consumers.append(consumer)
            id = Int32(truncatingIfNeeded: consumers.count - 1)
        }
        producers[Int(p.slot)].consumers.append(id)
        transports[Int(parameters.transport.slot)].consumers.append(id)
        if pp.kind == .video { requestKeyFrame(p, now: now) }
        return consumerId(Int(id))
    }

    public func removeConsumer(_ c: ConsumerId) {
        guard isActive(c) else { return }
        let slot = Int(c.slot)
        let raw = Int32(truncatingIfNeeded: slot)
        let params = consumers[slot].parameters
        if isActive(params.producer) { producers[Int(params.producer.slot)].consumers.removeAll { $0 == raw } }
        if isActive(params.transport) { transports[Int(params.transport.slot)].consumers.removeAll { $0 == raw } }
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
            if isVideo { requestKeyFrame(p, now: now) }
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
            requestKeyFrame(p, now: now)
        }
    }

    /// Asks the producer's sender for a keyframe, throttled per producer.
    public func requestKeyFrame(_ p: ProducerId, now: Nanoseconds) {
        guard isActive(p) else { return }
        if producers[Int(p.slot)].keyFrames.request(now: now) {
            emitKeyFrameRequest(Int(p.slot))
        } else if let due = producers[Int(p.slot)].keyFrames.deadline {
            keyFrameDeadline = min(keyFrameDeadline, due)
        }
    }

    public func producerStats(_ p: ProducerId) -> ProducerStats? {
        guard isActive(p) else { return nil }
        let pr = producers[Int(p.slot)]
        return ProducerStats(packetsReceived: pr.stream.packets, bytesReceived: pr.stream.bytes, keyFrameRequests: pr.keyFrameRequests)
    }
    public func consumerStats(_ c: ConsumerId) -> ConsumerStats? {
        guard isActive(c) else { return nil }
        return ConsumerStats(packetsSent: consumers[Int(c.slot)].packetsSent, bytesSent: consumers[Int(c.slot)].bytesSent)
    }
    public func drops(_ reason: DropReason) -> UInt64 { drops[reason.rawValue] }
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

    // MARK: Packet path (no allocation, no locks, no String)

    /// Forwards one clear RTP packet received on `transport` to every consumer of its producer.
    public func handleRtp(from transport: TransportIndex, packet: UnsafeMutableRawBufferPointer, now: Nanoseconds) {
        rtpPacketsReceived &+= 1
        rtpBytesReceived &+= UInt64(packet.count)
        guard isActive(transport) else { drops[DropReason.unknownSsrc.rawValue] &+= 1; return }
        let t = Int(transport.slot)
        // A packet larger than an outbox slot would be forwarded cut short: dropped.
        guard packet.count <= Self.maxPacketLength else { drops[DropReason.oversize.rawValue] &+= 1; return }
        guard let view = RtpPacketView(packet), let source = packet.baseAddress else {
            drops[DropReason.malformedRtp.rawValue] &+= 1; return
        }
        let ssrc = view.ssrc
        var found: Int32 = Int32.min
        for entry in transports[t].receiveSsrcs where entry.ssrc == ssrc { found = entry.producer; break }
        if found == Int32.min { drops[DropReason.unknownSsrc.rawValue] &+= 1; return }
        if found < 0 { drops[DropReason.retransmission.rawValue] &+= 1; return }
        let p = Int(found)
        let sequence = view.sequenceNumber, timestamp = view.timestamp
        producers[p].stream.received(sequence: sequence, timestamp: timestamp, length: packet.count, now: now,
                                     clockRate: producers[p].parameters.clockRate)
        if reportDeadline == .max { reportDeadline = now &+ Self.reportInterval }
        if producers[p].parameters.paused { drops[DropReason.producerPaused.rawValue] &+= 1; return }
        if view.payloadType != producers[p].parameters.payloadType {
            drops[DropReason.unknownPayloadType.rawValue] &+= 1; return
        }
        let isVideo = producers[p].parameters.kind == .video
        let isKey = isVideo && isKeyframe(codec: producers[p].parameters.codec, payload: UnsafeRawBufferPointer(view.payload))
        let count = producers[p].consumers.count
        var i = 0
        while i < count {
            let c = Int(producers[p].consumers[i])
            i += 1
            if consumers[c].waitingForKeyFrame {
                if !isKey { drops[DropReason.waitingForKeyFrame.rawValue] &+= 1; continue }
                consumers[c].waitingForKeyFrame = false
            }
            guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; continue }
            let slot = outbox + transmitCount * Self.slotSize
            let length = packet.count
            slot.copyMemory(from: source, byteCount: length)
            guard let out = RtpPacketView(UnsafeMutableRawBufferPointer(start: slot, count: length)) else {
                drops[DropReason.reparseFailed.rawValue] &+= 1; continue
            }
            let (outSeq, outTs) = consumers[c].rewriter.rewrite(sequence: sequence, timestamp: timestamp, now: now)
            let o = out
            o.ssrc = consumers[c].parameters.ssrc
            o.payloadType = consumers[c].parameters.payloadType
            o.sequenceNumber = outSeq
            o.timestamp = outTs
            o.remapExtensionIds(consumers[c].parameters.extensionIds)
            consumers[c].packetsSent &+= 1
            consumers[c].bytesSent &+= UInt64(length)
            consumers[c].octetsSent &+= UInt64(o.payloadLength)
            pendingTransports[transmitCount] = Int32(truncatingIfNeeded: consumers[c].parameters.transport.slot)
            pendingGenerations[transmitCount] = consumers[c].parameters.transport.generation
            pendingLengths[transmitCount] = Int32(length)
            pendingIsRtcp[transmitCount] = false
            transmitCount += 1
            rtpPacketsQueued &+= 1
            rtpBytesQueued &+= UInt64(length)
        }
    }

    /// Handles one clear (compound) RTCP packet received on `transport`.
    public func handleRtcp(from transport: TransportIndex, packet: UnsafeRawBufferPointer, now: Nanoseconds) {
        rtcpPacketsReceived &+= 1
        guard isActive(transport) else { drops[DropReason.unknownSsrc.rawValue] &+= 1; return }
        let t = Int(transport.slot)
        var it = RtcpIterator(packet)
        while let p = it.next() {
            if let sr = SenderReport(p) {
                handleSenderReport(sr, transport: t, now: now)
            } else if let pli = PictureLossIndication(p) {
                keyFrameRequested(mediaSsrc: pli.mediaSsrc, transport: t, now: now)
            } else if let fir = FullIntraRequest(p) {
                for i in 0..<fir.entryCount {
                    if let entry = fir.entry(at: i) { keyFrameRequested(mediaSsrc: entry.ssrc, transport: t, now: now) }
                }
            } else if GenericNack(p) != nil {
                nacksReceived &+= 1
            }
        }
        if it.malformed { drops[DropReason.malformedRtcp.rawValue] &+= 1 }
    }

    /// When `handleTimeout` next has work; nil when nothing is pending (an idle engine, or
    /// producers that are silent and owe no keyframe request). O(1).
    public var nextDeadline: Nanoseconds? {
        let soonest = min(keyFrameDeadline, reportDeadline)
        return soonest == .max ? nil : soonest
    }

    /// Sends the keyframe requests and receiver reports due at `now`. Before `nextDeadline`
    /// it returns at once: no scan of producers.
    public func handleTimeout(now: Nanoseconds) {
        if now >= keyFrameDeadline {
            var soonest: Nanoseconds = .max
            for p in producers.indices where producers[p].active && producers[p].keyFrames.pending {
                if producers[p].keyFrames.poll(now: now) { emitKeyFrameRequest(p) }
                if let due = producers[p].keyFrames.deadline { soonest = min(soonest, due) }
            }
            keyFrameDeadline = soonest
        }
        if now >= reportDeadline {
            // Report the streams heard from since the last reports (RFC 3550 6.4.2); while any
            // was, report again in an interval, else wait for the next RTP packet.
            var reported = false
            for p in producers.indices where producers[p].active && producers[p].stream.packets != producers[p].reportedPackets {
                let transport = producers[p].parameters.transport
                guard isActive(transport) else { continue }
                let t = Int(transport.slot)
                guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; break }
                producers[p].reportedPackets = producers[p].stream.packets
                reported = true
                let block = producers[p].stream.reportBlock(ssrc: producers[p].parameters.ssrc, now: now)
                let slot = outbox + transmitCount * Self.slotSize
                let n = RtcpWriter.receiverReport(
                    into: UnsafeMutableRawBufferPointer(start: slot, count: Self.maxPacketLength),
                    senderSsrc: transports[t].feedbackSsrc, block: block)
                if n > 0 { enqueue(transport: transport, length: n, isRtcp: true) }
            }
            reportDeadline = reported ? now &+ Self.reportInterval : .max
        }
    }

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
    @inline(__always) private func isActive(_ t: TransportIndex) -> Bool {
        Int(t.slot) < transports.count && transports[Int(t.slot)].active && transports[Int(t.slot)].generation == t.generation
    }
    @inline(__always) private func isActive(_ p: ProducerId) -> Bool {
        Int(p.slot) < producers.count && producers[Int(p.slot)].active && producers[Int(p.slot)].generation == p.generation
    }
    @inline(__always) private func isActive(_ c: ConsumerId) -> Bool {
        Int(c.slot) < consumers.count && consumers[Int(c.slot)].active && consumers[Int(c.slot)].generation == c.generation
    }
    private func producerId(_ slot: Int) -> ProducerId {
        ProducerId(slot: UInt32(truncatingIfNeeded: slot), generation: producers[slot].generation)
    }
    private func consumerId(_ slot: Int) -> ConsumerId {
        ConsumerId(slot: UInt32(truncatingIfNeeded: slot), generation: consumers[slot].generation)
    }

    private func enqueue(transport: TransportIndex, length: Int, isRtcp: Bool) {
        pendingTransports[transmitCount] = Int32(truncatingIfNeeded: transport.slot)
        pendingGenerations[transmitCount] = transport.generation
        pendingLengths[transmitCount] = Int32(length)
        pendingIsRtcp[transmitCount] = isRtcp
        transmitCount += 1
    }

    private func emitKeyFrameRequest(_ p: Int) {
        let params = producers[p].parameters
        guard params.keyFrameRequest != .none, transmitCount < outboxSlots, isActive(params.transport) else { return }
        let t = Int(params.transport.slot)
        let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize,
                                                 count: Self.maxPacketLength)
        let n: Int
        if params.keyFrameRequest == .fir {
            n = RtcpWriter.fir(into: slot, senderSsrc: transports[t].feedbackSsrc, mediaSsrc: params.ssrc,
                               sequence: producers[p].keyFrames.firSequence)
        } else {
            n = RtcpWriter.pli(into: slot, senderSsrc: transports[t].feedbackSsrc, mediaSsrc: params.ssrc)
        }
        guard n > 0 else { return }
        enqueue(transport: params.transport, length: n, isRtcp: true)
        producers[p].keyFrameRequests &+= 1
        keyFrameRequestsSent &+= 1
    }

    private func keyFrameRequested(mediaSsrc: UInt32, transport t: Int, now: Nanoseconds) {
        for c in transports[t].consumers where consumers[Int(c)].parameters.ssrc == mediaSsrc {
            requestKeyFrame(consumers[Int(c)].parameters.producer, now: now)
            return
        }
    }

    /// Translates a publisher's sender report for each started consumer (lip sync needs the
    /// NTP <-> RTP mapping in each subscriber's own timestamp space).
    private func handleSenderReport(_ sr: SenderReport, transport t: Int, now: Nanoseconds) {
        let ssrc = sr.ssrc
        var found = -1
        for entry in transports[t].receiveSsrcs where entry.ssrc == ssrc && entry.producer >= 0 {
            found = Int(entry.producer); break
        }
        guard found >= 0 else { return }
        producers[found].stream.receivedSenderReport(ntp: sr.ntpTimestamp, rtpTimestamp: sr.rtpTimestamp, now: now)
        for c in producers[found].consumers where consumers[Int(c)].rewriter.hasStarted {
            guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; return }
            let consumer = consumers[Int(c)]
            let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize,
                                                     count: Self.maxPacketLength)
            let n = RtcpWriter.senderReport(
                into: slot, ssrc: consumer.parameters.ssrc, ntpTimestamp: sr.ntpTimestamp,
                rtpTimestamp: consumer.rewriter.translate(timestamp: sr.rtpTimestamp),
                packetCount: UInt32(truncatingIfNeeded: consumer.packetsSent),
                octetCount: UInt32(truncatingIfNeeded: consumer.octetsSent))
            if n > 0 { enqueue(transport: consumer.parameters.transport, length: n, isRtcp: true) }
        }
    }
}
