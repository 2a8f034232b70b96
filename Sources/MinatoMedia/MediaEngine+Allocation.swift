internal import MinatoWire

// Bandwidth allocation per subscriber transport: its estimate (`SendSideEstimator`) shared
// by its consumers, simulcast layers chosen to fit, and probes to find room for a higher one.
extension MediaEngine {
    /// Upgrading to a layer needs 15% more estimate than the layer's bitrate (so a consumer
    /// does not flap between two layers at the edge).
    /// `rate` with the upgrade headroom, in integer arithmetic that cannot overflow.
    @inline(__always)
    static func withHeadroom(_ rate: Int) -> Int { rate > Int.max / 2 ? rate : rate + rate / 20 * 3 }
    /// Temporal layers need 30%: their rates are per-TID measurements over one rate interval
    /// that move by ±15% from one to the next (TID 0+1 of a 160-wide layer: 35 to 44 kbit/s
    /// within seconds), and their small packets carry about 12% more on the wire (IP, UDP,
    /// the SRTP tag) than the RTP bytes counted here. With 15%, a subscriber behind a
    /// 48 kbit/s policer went up to TID 1 whenever the loss-based estimate touched 49-51
    /// kbit/s, lost packets at once and froze for up to a second
    /// (`test_simulcast_bwe_small_camera_probes_cost_the_policed_subscriber_nothing`).
    @inline(__always)
    static func withTemporalHeadroom(_ rate: Int) -> Int { rate > Int.max / 2 ? rate : rate + rate / 10 * 3 }
    /// A probe goes 20% above the rate it is meant to prove: what a probe that fits measures
    /// (`SendSideEstimator` takes the rate delivered, a few percent under the rate sent) must
    /// still clear the upgrade's headroom after the layer's bitrate has moved a little.
    /// Probing at the bare need left the estimate just short of it (170 against ~172 kbit/s)
    /// and the upgrade waited for the next probe.
    @inline(__always)
    static func probeTarget(_ need: Int) -> Int { need > Int.max / 2 ? need : need + need / 5 }
    /// The length of a probe packet (RTP header to the end of its padding). A token-bucket
    /// policer meters bytes and passes a packet only when its bucket holds the packet's whole
    /// length: once a probe has emptied the bucket, whichever packets are smaller take the
    /// tokens as they trickle in. With padding packets of 224 bytes that was the padding, and
    /// the media (160-wide frames of 500-700 bytes) got nothing at all for 250 ms of every
    /// probe. Probe packets as long as the longest media packets lose first instead, the
    /// probe fails on its own packets, and the media keeps what it was getting.
    static let probePacketLength = 1200
    /// Of which RTP padding (the last byte counts it): the rest is zero bytes in the header
    /// extension block, which RFC 8285 allows between elements as padding, so the packet
    /// still has no payload (receivers drop it after counting it for their feedback).
    static let paddingLength = 4

    /// Divides transport `t`'s estimate among its consumers: audio and single-stream video
    /// first (they cannot go lower), then each simulcast consumer in turn gets the highest
    /// receiving layer within its preference that fits what is left (the lowest when none
    /// does); a paused producer costs nothing. When a consumer could take a higher layer than
    /// the estimate allows, a probe at the rate that layer needs is started with padding on
    /// that consumer's RTX stream, no sooner than `SendSideEstimator.nextProbeAllowed` (1 s
    /// after the last probe ended when it succeeded, 6 s after a failure, 8 s after more).
    func allocate(transport t: Int, now: Nanoseconds) {
        // Fields read one by one: a copy of the estimator would share its history buffers, and
        // the next packet recorded in them would then copy them (an allocation).
        guard transports[t].estimator?.hasFeedback == true, let estimate = transports[t].estimator?.estimate else { return }
        var budget = estimate
        var used = 0
        for c in transports[t].consumers where consumers[Int(c)].layerSlots.count <= 1 {
            let p = currentSlot(Int(c))
            guard producers[p].active, !producers[p].parameters.paused else { continue }
            budget &-= producers[p].bitrate
            used &+= producers[p].bitrate
        }
        var probeFor = -1, probeRate = 0
        for raw in transports[t].consumers where consumers[Int(raw)].layerSlots.count > 1 {
            let c = Int(raw)
            let slots = consumers[c].layerSlots
            guard producers[Int(slots[0])].active, !producers[Int(slots[0])].parameters.paused else { continue }
            let cap = min(consumers[c].preferredLayer, slots.count - 1)
            var choice = -1, lowestLive = -1
            let temporalCut = consumers[c].targetTemporalLayer != Int.max
            for i in 0...cap {
                let slot = Int(slots[i])
                let at = producers[slot].lastPacketAt
                guard at != 0, now &- at < Self.layerIdleTime else { continue }
                if lowestLive < 0 { lowestLive = i }
                let rate = producers[slot].bitrate
                // Up a layer, or to the whole of a layer whose temporal layers were cut.
                let upgrade = i > consumers[c].targetLayer || (temporalCut && i == consumers[c].targetLayer)
                let need = upgrade ? Self.withHeadroom(rate) : rate
                if need <= budget { choice = i }
            }
            var temporal = Int.max
            if choice < 0 {
                // Not even the lowest layer fits whole: fewer of its temporal layers (a lower
                // frame rate) rather than losses, when it has them.
                choice = max(lowestLive, 0)
                temporal = temporalLayerFitting(c, slot: Int(slots[choice]), budget: budget)
            }
            consumers[c].bandwidthLayer = choice
            consumers[c].targetTemporalLayer = temporal
            let rate = forwardedRate(slot: Int(slots[choice]), temporalLayer: temporal)
            budget &-= rate
            used &+= rate
            // A higher receiving layer within the preference: worth a probe, at the rate the
            // highest one needs. (A policer lets a short burst through: a probe for the next
            // layer up would pass inside that burst and the upgrade then fail; one for the top
            // layer drains it.) With this layer's temporal layers cut, the probe is for the whole
            // of it first: the estimate cannot grow past what the cut stream delivers (it is
            // capped by the acknowledged rate), and a top-layer probe fails on any link that
            // needed the cut, so without this step the cut would outlast its cause.
            // Going from a cut to the whole layer costs no keyframe, so a probe fooled by a
            // burst costs little.
            if probeFor < 0, consumers[c].parameters.rtxSsrc != nil, consumers[c].parameters.rtxPayloadType != nil,
               Self.canCarryProbe(extensionId: consumers[c].parameters.transportSequenceExtensionId) {
                var top = cap
                while top > choice {
                    let at = producers[Int(slots[top])].lastPacketAt
                    if at != 0, now &- at < Self.layerIdleTime { break }
                    top -= 1
                }
                if top > choice || temporal != Int.max {
                    probeFor = c
                    let goal = temporal != Int.max ? choice : top
                    probeRate = Self.probeTarget(used &- rate &+ Self.withHeadroom(producers[Int(slots[goal])].bitrate))
                }
            }
            retarget(c, now: now)
        }
        if probeFor >= 0, probeRate > estimate, transports[t].estimator?.probeRate == 0,
           now >= transports[t].estimator?.nextProbeAllowed ?? .max {
            transports[t].estimator?.startProbe(rate: probeRate, now: now)
            transports[t].probeConsumer = Int32(truncatingIfNeeded: probeFor)
            transports[t].probeCredit = 0
            transports[t].probeSliceAt = now
            probesStarted &+= 1
            probeDeadline = min(probeDeadline, now)
        }
    }

    /// Probe padding carries its transport-wide sequence number in a one-byte header
    /// extension (RFC 8285), whose ids are 1...14: with any other id (0: not negotiated; 15 is
    /// reserved; two-byte ids) the header would be malformed, so that consumer never probes.
    @inline(__always)
    static func canCarryProbe(extensionId id: UInt8) -> Bool { (1...14).contains(id) }

    /// Sends each probing transport's padding for the time since its last slice: the probe
    /// rate less what media went out meanwhile is spent as padding-only RTX packets carrying
    /// transport-wide sequence numbers. Keeps `probeDeadline` while any probe runs.
    func sendProbePadding(now: Nanoseconds) {
        var next: Nanoseconds = .max
        for t in transports.indices where transports[t].active && transports[t].probeConsumer >= 0 {
            guard transports[t].estimator?.probing(at: now) == true, let probeRate = transports[t].estimator?.probeRate else {
                transports[t].probeConsumer = -1
                continue
            }
            let c = Int(transports[t].probeConsumer)
            guard c < consumers.count, consumers[c].active, let rtxSsrc = consumers[c].parameters.rtxSsrc,
                  let rtxPt = consumers[c].parameters.rtxPayloadType,
                  Self.canCarryProbe(extensionId: consumers[c].parameters.transportSequenceExtensionId) else {
                transports[t].probeConsumer = -1
                continue
            }
            let elapsed = now &- transports[t].probeSliceAt
            transports[t].probeSliceAt = now
            // Media already sends about the allocated rate; padding fills the rest.
            let media = mediaRate(transport: t)
            let extra = max(probeRate &- media, 0)
            transports[t].probeCredit &+= Int(clamping: UInt64(extra) &* elapsed / 8 / 1_000_000_000)
            let id = consumers[c].parameters.transportSequenceExtensionId
            let packetLength = Self.probePacketLength
            // The extension block: the sequence number element, then zero (padding) bytes.
            let extensionWords = (packetLength - 12 - 4 - Self.paddingLength) / 4
            while transports[t].probeCredit >= packetLength, transmitCount < outboxSlots {
                let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize, count: packetLength)
                _ = RtpPacketView.writeHeader(into: slot, payloadType: rtxPt, sequenceNumber: consumers[c].rtxSequence,
                                              timestamp: consumers[c].rewriter.lastTimestamp, ssrc: rtxSsrc)
                consumers[c].rtxSequence &+= 1
                let sequence = transports[t].sendSequence
                transports[t].sendSequence &+= 1
                slot[0] |= 0x30                          // padding and extension bits
                slot[12] = 0xBE; slot[13] = 0xDE
                slot[14] = UInt8(truncatingIfNeeded: extensionWords >> 8); slot[15] = UInt8(truncatingIfNeeded: extensionWords)
                slot[16] = id << 4 | 1
                slot[17] = UInt8(truncatingIfNeeded: sequence >> 8); slot[18] = UInt8(truncatingIfNeeded: sequence)
                for k in 19..<(packetLength - 1) { slot[k] = 0 }
                slot[packetLength - 1] = UInt8(Self.paddingLength)
                transports[t].estimator?.sent(sequence, bytes: packetLength, at: now)
                enqueue(transport: transportIndex(t), length: packetLength, isRtcp: false)
                transports[t].probeCredit &-= packetLength
                paddingPacketsSent &+= 1
            }
            next = min(next, now &+ Self.probeSlice)
        }
        probeDeadline = next
    }

    /// What transport `t`'s consumers send now: the bitrate of each one's current layer (and
    /// temporal layers).
    func mediaRate(transport t: Int) -> Int {
        var rate = 0
        for c in transports[t].consumers {
            let p = currentSlot(Int(c))
            if producers[p].active, !producers[p].parameters.paused {
                rate &+= forwardedRate(slot: p, temporalLayer: consumers[Int(c)].temporalLayer)
            }
        }
        return rate
    }

    /// The bitrate of producer slot `slot` up to and including TID `temporalLayer` (`Int.max`,
    /// or a stream without temporal layers: all of it).
    func forwardedRate(slot: Int, temporalLayer: Int) -> Int {
        let layers = producers[slot].temporalLayers
        guard temporalLayer < layers - 1 else { return producers[slot].bitrate }
        var rate = 0
        for tid in 0...max(temporalLayer, 0) { rate &+= producers[slot].temporalBitrates[tid] }
        return rate
    }

    /// The highest temporal layer of slot `slot` whose rate (with those below it) fits
    /// `budget`, with the temporal headroom (`withTemporalHeadroom`) above consumer `c`'s
    /// current cut; TID 0 when none does; `Int.max` (all) for a stream without temporal
    /// layers. A consumer that had the whole layer (no cut yet) needs the headroom for every
    /// TID: the whole layer just failed to fit, and a cut that fits only at the bare rate went
    /// on losing behind a policer (the rates here are RTP bytes; the policer also counts IP,
    /// UDP and SRTP overhead and the retransmissions the losses cause).
    func temporalLayerFitting(_ c: Int, slot: Int, budget: Int) -> Int {
        let layers = producers[slot].temporalLayers
        guard layers > 1 else { return Int.max }
        let current = consumers[c].targetTemporalLayer
        var rate = 0, fit = 0
        for tid in 0..<layers {
            rate &+= producers[slot].temporalBitrates[tid]
            let need = current == Int.max || tid > current ? Self.withTemporalHeadroom(rate) : rate
            guard need <= budget else { break }
            fit = tid
        }
        return fit == layers - 1 ? Int.max : fit
    }
}
