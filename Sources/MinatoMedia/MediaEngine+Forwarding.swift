internal import MinatoWire

// The packet path: RTP from publishers, into the retransmission store once, out to every
// consumer. No allocation, no locks, no String; every drop counted by reason.
extension MediaEngine {
    /// Whether RTP arriving on `transport` is recorded for transport-wide feedback, the only
    /// use of a packet's `arrival`: the worker asks the kernel for that timestamp (one syscall)
    /// only then.
    @inline(__always)
    public func recordsArrivals(on transport: TransportIndex) -> Bool {
        isActive(transport) && transports[Int(transport.slot)].transportSequenceId != 0
            && transports[Int(transport.slot)].feedbackRecorder != nil
    }

    /// Forwards one clear RTP packet received on `transport` to every consumer of its producer.
    /// RTX from a publisher (its `rtxSsrc`) is turned back into the original packet in place
    /// (RFC 4588: the original sequence number is the payload's first two bytes) and then
    /// handled like any other packet. `arrival`, when not 0, is when the packet reached the
    /// host (the kernel's receive time, on the `now` clock): transport-wide feedback reports
    /// it instead of `now`, which is when the worker got to the packet (later, after a stall).
    public func handleRtp(from transport: TransportIndex, packet: UnsafeMutableRawBufferPointer, now: Nanoseconds,
                          arrival: Nanoseconds = 0) {
        rtpPacketsReceived &+= 1
        rtpBytesReceived &+= UInt64(packet.count)
        guard isActive(transport) else { drops[DropReason.unknownSsrc.rawValue] &+= 1; return }
        let t = Int(transport.slot)
        // A packet larger than an outbox slot would be forwarded cut short: dropped.
        guard packet.count <= Self.maxPacketLength else { drops[DropReason.oversize.rawValue] &+= 1; return }
        guard let view = RtpPacketView(packet), let base = packet.baseAddress else {
            drops[DropReason.malformedRtp.rawValue] &+= 1; return
        }
        let ssrc = view.ssrc
        var found: Int32 = Int32.min
        for entry in transports[t].receiveSsrcs where entry.ssrc == ssrc { found = entry.producer; break }
        if found == Int32.min, !transports[t].unboundRids.isEmpty { found = bindByRid(view, on: t) }
        if found == Int32.min { drops[DropReason.unknownSsrc.rawValue] &+= 1; return }
        // Every packet of a known stream counts for the publisher's congestion control (RTX
        // and padding probes too), whatever happens to it next.
        if transports[t].transportSequenceId != 0,
           let sequence = view.transportSequenceNumber(id: transports[t].transportSequenceId) {
            transports[t].feedbackRecorder?.received(sequence, at: arrival != 0 ? arrival : now)
            if feedbackDeadline == .max { feedbackDeadline = now &+ Self.feedbackInterval }
        }
        if found >= 0 {
            receive(producer: Int(found), view, now: now, repaired: false)
            return
        }
        let p = Int(-1 - found)
        guard let rtxPayloadType = producers[p].parameters.rtxPayloadType, view.payloadType == rtxPayloadType else {
            drops[DropReason.unusableRtx.rawValue] &+= 1; return
        }
        guard view.payloadLength > 2 else { drops[DropReason.rtxPadding.rawValue] &+= 1; return }
        let payload = view.payload
        let original = UInt16(payload[0]) << 8 | UInt16(payload[1])
        // Move the header two bytes on, over the original sequence number.
        var i = view.headerLength
        while i > 0 {
            i -= 1
            base.storeBytes(of: base.load(fromByteOffset: i, as: UInt8.self), toByteOffset: i + 2, as: UInt8.self)
        }
        guard let restored = RtpPacketView(UnsafeMutableRawBufferPointer(start: base + 2, count: packet.count - 2)) else {
            drops[DropReason.malformedRtp.rawValue] &+= 1; return
        }
        restored.ssrc = producers[p].parameters.ssrc
        restored.payloadType = producers[p].parameters.payloadType
        restored.sequenceNumber = original
        receive(producer: p, restored, now: now, repaired: true)
    }

    /// The unbound simulcast layer on transport `t` whose RID (or, for RTX, repaired RID)
    /// `view` carries: the index into `unboundRids`; nil when none matches.
    @inline(__always)
    func unboundLayer(named view: RtpPacketView, on t: Int) -> Int? {
        let count = transports[t].unboundRids.count
        var i = 0
        while i < count {
            let entry = transports[t].unboundRids[i]
            let p = Int(entry.producer)
            let id = entry.repaired ? producers[p].parameters.repairedRidExtensionId : producers[p].parameters.ridExtensionId
            if id != 0, let value = view.extensionValue(id: id), value.count == producers[p].rid.count {
                var same = true
                var k = 0
                while k < value.count {
                    if value[k] != producers[p].rid[k] { same = false; break }
                    k += 1
                }
                if same { return i }
            }
            i += 1
        }
        return nil
    }

    /// Binds the SSRC of an authenticated packet on `t` to the unbound layer its RID names:
    /// the layer's SSRC, or its RTX SSRC for a repaired RID. Returns the `receiveSsrcs`
    /// value (producer slot, or -1 - slot for RTX); `Int32.min` when nothing matches. Fits
    /// in the capacity `addProducer` reserved: no allocation.
    func bindByRid(_ view: RtpPacketView, on t: Int) -> Int32 {
        guard let i = unboundLayer(named: view, on: t) else { return Int32.min }
        let entry = transports[t].unboundRids.remove(at: i)
        let p = Int(entry.producer)
        let ssrc = view.ssrc
        let value: Int32
        if entry.repaired {
            producers[p].parameters.rtxSsrc = ssrc
            value = -1 - entry.producer
        } else {
            producers[p].parameters.ssrc = ssrc
            value = entry.producer
        }
        transports[t].receiveSsrcs.append((ssrc, value))
        return value
    }

    /// One packet of producer `p` (as the publisher first sent it): duplicate check, store,
    /// receive statistics, gap detection, then a copy for each consumer.
    @inline(__always)
    func receive(producer p: Int, _ view: RtpPacketView, now: Nanoseconds, repaired: Bool) {
        let sequence = view.sequenceNumber, timestamp = view.timestamp
        if let store = producers[p].retransmissions {
            if store.contains(sequence, now: now) { drops[DropReason.duplicate.rawValue] &+= 1; return }
            store.store(sequence, packet: UnsafeRawBufferPointer(view.buffer), now: now)
        }
        producers[p].stream.received(sequence: sequence, timestamp: timestamp, length: view.buffer.count, now: now,
                                     clockRate: producers[p].parameters.clockRate, repaired: repaired)
        producers[p].lastPacketAt = now
        if reportDeadline == .max { reportDeadline = now &+ Self.reportInterval }
        if let arrival = producers[p].nack?.received(sequence, now: now) {
            switch arrival {
            case .gap:
                countRelayGap(producer: p)
                sendNack(producer: p, now: now)
            case .recovered:
                producers[p].packetsRecovered &+= 1
                packetsRecovered &+= 1
                if repaired { rtxRecovered &+= 1 }
                if let delay = producers[p].nack?.lastRepairDelay, delay > 0 {
                    roundTripSample(delay, transport: Int(producers[p].parameters.transport.slot))
                }
            case .gapTooLarge:
                countRelayGap(producer: p)
                requestKeyFrame(slot: p, now: now, cause: .nackGaveUp)
            case .inOrder, .old: break
            }
        }
        if producers[p].parameters.paused { drops[DropReason.producerPaused.rawValue] &+= 1; return }
        let isRed = view.payloadType == producers[p].parameters.redPayloadType
        if view.payloadType != producers[p].parameters.payloadType && !isRed {
            drops[DropReason.unknownPayloadType.rawValue] &+= 1; return
        }
        // Audio levels: the room's speakers, and whether this packet is among the loudest.
        let audible = producers[p].speakerRoom < 0 || speakerLevel(producer: p, view, now: now)
        let isVideo = producers[p].parameters.kind == .video
        let isKey = isVideo && isKeyframe(codec: producers[p].parameters.codec, payload: UnsafeRawBufferPointer(view.payload))
        if isKey, let due = producers[p].keyFrames.deadline {
            // The keyframe answers the requests: their timer may go (a scan, once per request).
            producers[p].keyFrames.keyFrameArrived()
            if due == keyFrameDeadline { keyFrameDeadline = soonestKeyFrameDeadline() }
        }
        // VP8 temporal layers: which one this packet belongs to (-1: no temporal index).
        var tid = -1, startsFrame = false, layerSync = false
        var pictureId: UInt16?
        if isVideo, producers[p].parameters.codec == .vp8 {
            let payload = UnsafeRawBufferPointer(view.payload)
            if let d = Vp8PayloadDescriptor(payload), let t = d.temporalLayer(in: payload) {
                tid = Int(t)
                startsFrame = d.startsFrame(in: payload)
                layerSync = d.isLayerSync(in: payload)
                pictureId = d.pictureId(in: payload)
                producers[p].temporalBytes[tid] &+= UInt64(view.buffer.count)
            }
        }
        // RED reduced to its primary block, for consumers that did not negotiate RED.
        let primary = isRed ? RedPayload.primary(in: UnsafeRawBufferPointer(view.payload)) : nil
        guard let source = UnsafeRawPointer(view.buffer.baseAddress) else { drops[DropReason.malformedRtp.rawValue] &+= 1; return }
        let layer = producers[p].layer
        let count = producers[p].consumers.count
        var i = 0
        while i < count {
            let c = Int(producers[p].consumers[i])
            i += 1
            if !audible, !consumers[c].parameters.pinned {
                // Left out while not among the loudest; numbering restarts continuously after.
                consumers[c].skipping = true
                drops[DropReason.notLoudest.rawValue] &+= 1
                continue
            }
            if consumers[c].skipping {
                consumers[c].skipping = false
                consumers[c].rewriter.resync()
            }
            if consumers[c].waitingForKeyFrame || layer != consumers[c].currentLayer {
                // Starting, resuming, or another layer: only the target layer's keyframe goes through.
                guard isKey, layer == consumers[c].targetLayer else {
                    let reason: DropReason = layer == consumers[c].currentLayer || consumers[c].currentLayer < 0
                        ? .waitingForKeyFrame : .layerNotSelected
                    drops[reason.rawValue] &+= 1
                    continue
                }
                if layer != consumers[c].currentLayer {
                    if consumers[c].currentLayer >= 0 { consumers[c].layerSwitches &+= 1 }
                    consumers[c].currentLayer = layer
                    consumers[c].rewriter.resync()
                    consumers[c].pictureIds.resync()
                }
                consumers[c].waitingForKeyFrame = false
            }
            if tid >= 0, consumers[c].rewritesPictureIds {
                // Temporal layers switch at frame starts, without a keyframe: down at any frame
                // (lower layers never refer to higher ones); up one layer at a time, at a
                // layer-sync frame of the next layer (it refers only to TID 0, and later frames
                // of its layer refer to it), or to the target at a keyframe.
                let current = consumers[c].temporalLayer, target = consumers[c].targetTemporalLayer
                if startsFrame, target != current,
                   target < current || isKey || (layerSync && tid == current &+ 1 && tid <= target) {
                    consumers[c].temporalLayer = target < current || isKey ? target : tid
                    consumers[c].temporalSwitches &+= 1
                }
                if tid > consumers[c].temporalLayer {
                    // Left out without a trace: later numbers close up over it.
                    consumers[c].rewriter.drop(sequence: sequence)
                    if let pictureId { consumers[c].pictureIds.drop(pictureId: pictureId) }
                    drops[DropReason.temporalLayerNotSelected.rawValue] &+= 1
                    continue
                }
            }
            guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; continue }
            let slot = outbox + transmitCount * Self.slotSize
            var length = view.buffer.count
            var payloadType = consumers[c].parameters.payloadType
            if isRed {
                if let red = consumers[c].parameters.redPayloadType {
                    payloadType = red
                    slot.copyMemory(from: source, byteCount: length)
                } else {
                    guard let primary else { drops[DropReason.malformedRed.rawValue] &+= 1; continue }
                    let h = view.headerLength
                    slot.copyMemory(from: source, byteCount: h)
                    (slot + h).copyMemory(from: source + h + primary.offset, byteCount: primary.length)
                    // The RED packet's padding (if any) stays behind.
                    slot.storeBytes(of: slot.load(as: UInt8.self) & ~0x20, as: UInt8.self)
                    length = h + primary.length
                }
            } else {
                slot.copyMemory(from: source, byteCount: length)
            }
            guard let out = RtpPacketView(UnsafeMutableRawBufferPointer(start: slot, count: length)) else {
                drops[DropReason.reparseFailed.rawValue] &+= 1; continue
            }
            guard let (outSeq, outTs) = consumers[c].rewriter.rewrite(sequence: sequence, timestamp: timestamp, now: now) else {
                drops[DropReason.lateAfterDrop.rawValue] &+= 1; continue
            }
            out.ssrc = consumers[c].parameters.ssrc
            out.payloadType = payloadType
            out.sequenceNumber = outSeq
            out.timestamp = outTs
            out.remapExtensionIds(consumers[c].parameters.extensionIds)
            if consumers[c].rewritesPictureIds { consumers[c].pictureIds.rewrite(out.payload) }
            stampTransportSequence(out, consumer: c, length: length, now: now)
            consumers[c].packetsSent &+= 1
            consumers[c].bytesSent &+= UInt64(length)
            consumers[c].octetsSent &+= UInt64(out.payloadLength)
            enqueue(transport: consumers[c].parameters.transport, length: length, isRtcp: false)
            rtpPacketsQueued &+= 1
            rtpBytesQueued &+= UInt64(length)
        }
    }

    /// Resends consumer `c`'s packet `sequence` (its own numbering) from the producer's store:
    /// as RTX (RFC 4588) when the subscriber negotiated it, else as first sent. At most once
    /// per round-trip time for the same consumer and packet. Each packet asked for costs one of
    /// the consumer's `resendBudget` before it is looked up, found or not; returns false when
    /// that budget is spent (the caller stops asking), true otherwise.
    @discardableResult
    func resend(consumer c: Int, sequence: UInt16, now: Nanoseconds) -> Bool {
        let transport = consumers[c].parameters.transport
        let mark = c * Self.resendSlots + Int(sequence) % Self.resendSlots
        let rtt = max(roundTripTime(transport), 5_000_000)
        if resentSequences[mark] == sequence, resentAt[mark] != 0, now &- resentAt[mark] < rtt {
            retransmissionsThrottled &+= 1; return true
        }
        if now &- consumers[c].resendWindowStart >= Self.resendWindow {
            consumers[c].resendWindowStart = now
            consumers[c].resendsInWindow = 0
        }
        guard consumers[c].resendsInWindow < Self.resendBudget else { retransmissionsThrottled &+= 1; return false }
        consumers[c].resendsInWindow += 1
        let pid = consumers[c].parameters.producer
        guard isActive(pid), let store = producers[currentSlot(c)].retransmissions,
              let original = consumers[c].rewriter.original(of: sequence),
              let stored = store.packet(original, now: now), let storedBase = stored.baseAddress
        else { retransmissionMisses &+= 1; return true }
        retransmissionHits &+= 1
        guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; return true }
        let slot = outbox + transmitCount * Self.slotSize
        let rtxSsrc = consumers[c].parameters.rtxSsrc, rtxPayloadType = consumers[c].parameters.rtxPayloadType
        var length = stored.count
        slot.copyMemory(from: storedBase, byteCount: length)
        guard let first = RtpPacketView(UnsafeMutableRawBufferPointer(start: slot, count: length)) else {
            drops[DropReason.reparseFailed.rawValue] &+= 1; return true
        }
        let timestamp = consumers[c].rewriter.translate(timestamp: first.timestamp)
        let view: RtpPacketView
        if let rtxSsrc, let rtxPayloadType {
            guard length + 2 <= Self.maxPacketLength else { drops[DropReason.oversize.rawValue] &+= 1; return true }
            let h = first.headerLength
            (slot + h + 2).copyMemory(from: storedBase + h, byteCount: length - h)
            slot.storeBytes(of: UInt8(truncatingIfNeeded: sequence >> 8), toByteOffset: h, as: UInt8.self)
            slot.storeBytes(of: UInt8(truncatingIfNeeded: sequence), toByteOffset: h + 1, as: UInt8.self)
            length += 2
            guard let rtx = RtpPacketView(UnsafeMutableRawBufferPointer(start: slot, count: length)) else {
                drops[DropReason.reparseFailed.rawValue] &+= 1; return true
            }
            view = rtx
            rtx.ssrc = rtxSsrc
            rtx.payloadType = rtxPayloadType
            rtx.sequenceNumber = consumers[c].rtxSequence
            consumers[c].rtxSequence &+= 1
        } else {
            view = first
            first.ssrc = consumers[c].parameters.ssrc
            first.payloadType = consumers[c].parameters.payloadType
            first.sequenceNumber = sequence
        }
        view.timestamp = timestamp
        view.remapExtensionIds(consumers[c].parameters.extensionIds)
        if consumers[c].rewritesPictureIds {
            // RTX carries the original sequence number before the payload.
            let payload = view.payload
            let skip = rtxSsrc != nil && rtxPayloadType != nil ? 2 : 0
            if payload.count > skip, let start = payload.baseAddress {
                consumers[c].pictureIds.translate(UnsafeMutableRawBufferPointer(start: start + skip, count: payload.count - skip))
            }
        }
        stampTransportSequence(view, consumer: c, length: length, now: now)
        resentSequences[mark] = sequence
        resentAt[mark] = now
        consumers[c].packetsRetransmitted &+= 1
        packetsRetransmitted &+= 1
        if transports[Int(transport.slot)].isRelay { relayPacketsRetransmitted &+= 1 }
        enqueue(transport: transport, length: length, isRtcp: false)
        rtpPacketsQueued &+= 1
        rtpBytesQueued &+= UInt64(length)
        return true
    }

    /// Numbers a packet for consumer `c`'s transport (transport-wide congestion control): one
    /// sequence for everything sent on it, whatever the stream.
    @inline(__always)
    func stampTransportSequence(_ out: RtpPacketView, consumer c: Int, length: Int, now: Nanoseconds) {
        let id = consumers[c].parameters.transportSequenceExtensionId
        guard id != 0 else { return }
        let t = Int(consumers[c].parameters.transport.slot)
        let sequence = transports[t].sendSequence
        if out.setTransportSequenceNumber(sequence, id: id) {
            transports[t].sendSequence &+= 1
            transports[t].estimator?.sent(sequence, bytes: length, at: now)
        }
    }

    /// The transport's measured round-trip time, else its paired transport's (the same client's
    /// other connection), else the tuning's default.
    @inline(__always)
    func roundTripTime(_ t: TransportIndex) -> Nanoseconds {
        guard isActive(t) else { return tuning.defaultRoundTripTime }
        if transports[Int(t.slot)].roundTripTime != 0 { return transports[Int(t.slot)].roundTripTime }
        if let other = transports[Int(t.slot)].pairedWith, isActive(other), transports[Int(other.slot)].roundTripTime != 0 {
            return transports[Int(other.slot)].roundTripTime
        }
        return tuning.defaultRoundTripTime
    }

    /// Counts the packets producer `p`'s stream was just found missing (`NackGenerator.lastGap`)
    /// when it comes over a relay from another node.
    @inline(__always)
    func countRelayGap(producer p: Int) {
        guard transports[Int(producers[p].parameters.transport.slot)].isRelay else { return }
        relayPacketsMissing &+= producers[p].nack?.lastGap ?? 0
    }
}
