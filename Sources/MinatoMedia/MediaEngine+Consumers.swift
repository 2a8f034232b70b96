// Consumers: adding and removing them, and which simulcast layer each one forwards (control
// path; the packet path reads what these set).
extension MediaEngine {
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
        let primary = Int(producers[Int(p.slot)].group)
        consumer.layerSlots = producers[primary].layerSlots
        if consumer.layerSlots.count > 1 {
            consumer.currentLayer = -1
            consumer.rewritesPictureIds = pp.codec == .vp8
            consumer.preferredLayer = max(0, parameters.preferredLayer ?? Int.max)
        }
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
        for layer in consumers[Int(id)].layerSlots { producers[Int(layer)].consumers.append(id) }
        transports[Int(parameters.transport.slot)].consumers.append(id)
        if parameters.transportSequenceExtensionId != 0, transports[ts].estimator == nil {
            transports[ts].estimator = SendSideEstimator(initial: tuning.initialSubscriberBitrate,
                                                         minimum: tuning.minSubscriberBitrate,
                                                         maximum: tuning.maxSubscriberBitrate)
        }
        if consumers[Int(id)].layerSlots.count > 1 {
            consumers[Int(id)].targetLayer = chooseLayer(Int(id), now: now)
        }
        if pp.kind == .video { requestKeyFrame(slot: targetSlot(Int(id)), now: now, cause: .consumerStart) }
        return consumerId(Int(id))
    }

    /// Caps a simulcast consumer at `layer` (0 = lowest; nil: no cap): it switches at that
    /// layer's next keyframe (requested now) when the cap changes its choice. No-op without layers.
    public func setPreferredLayer(_ c: ConsumerId, _ layer: Int?, now: Nanoseconds) {
        guard isActive(c), consumers[Int(c.slot)].layerSlots.count > 1 else { return }
        consumers[Int(c.slot)].preferredLayer = max(0, layer ?? Int.max)
        retarget(Int(c.slot), now: now)
    }

    /// Re-chooses consumer `c`'s layer; a new target gets a keyframe request.
    func retarget(_ c: Int, now: Nanoseconds) {
        let target = chooseLayer(c, now: now)
        guard target != consumers[c].targetLayer else { return }
        consumers[c].targetLayer = target
        // Down because the link cannot carry the current layer: it stops at once (it is losing
        // most of its packets anyway), so the lower layer's keyframe gets through sooner.
        if target < consumers[c].currentLayer, consumers[c].bandwidthLayer < consumers[c].currentLayer,
           consumers[c].preferredLayer > target {
            consumers[c].waitingForKeyFrame = true
        }
        if target != consumers[c].currentLayer || consumers[c].waitingForKeyFrame {
            requestKeyFrame(slot: Int(consumers[c].layerSlots[target]), now: now, cause: .layerSwitch)
        }
    }

    /// The layer consumer `c` should take: the highest at or below its preference that is
    /// receiving (a packet within `layerIdleTime`); when none is, the lowest receiving one,
    /// else the current target (nothing to choose from yet).
    func chooseLayer(_ c: Int, now: Nanoseconds) -> Int {
        let slots = consumers[c].layerSlots
        func live(_ i: Int) -> Bool {
            let at = producers[Int(slots[i])].lastPacketAt
            return at != 0 && now &- at < Self.layerIdleTime
        }
        let cap = min(consumers[c].preferredLayer, consumers[c].bandwidthLayer, slots.count - 1)
        var i = cap
        while i >= 0 {
            if live(i) { return i }
            i -= 1
        }
        i = cap + 1
        while i < slots.count {
            if live(i) { return i }
            i += 1
        }
        return min(consumers[c].targetLayer, cap)
    }

    /// The producer slot of consumer `c`'s target layer.
    @inline(__always)
    func targetSlot(_ c: Int) -> Int {
        let layers = consumers[c].layerSlots, t = consumers[c].targetLayer
        return Int(layers[t >= 0 && t < layers.count ? t : 0])
    }

    /// The producer slot of the layer consumer `c` forwards now (its target before the first).
    @inline(__always)
    func currentSlot(_ c: Int) -> Int {
        let layers = consumers[c].layerSlots, l = consumers[c].currentLayer
        return l >= 0 && l < layers.count ? Int(layers[l]) : targetSlot(c)
    }

    public func removeConsumer(_ c: ConsumerId) {
        guard isActive(c) else { return }
        let slot = Int(c.slot)
        let raw = Int32(truncatingIfNeeded: slot)
        let params = consumers[slot].parameters
        if isActive(params.producer) {
            for layer in consumers[slot].layerSlots { producers[Int(layer)].consumers.removeAll { $0 == raw } }
        }
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
}
