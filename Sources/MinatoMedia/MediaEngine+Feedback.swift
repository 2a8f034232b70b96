internal import MinatoWire

// RTCP: what subscribers and publishers tell the engine (reports, NACK, PLI/FIR) and the
// feedback it sends to publishers (NACK, PLI/FIR). Allocation-free like the packet path.
extension MediaEngine {
    /// Handles one clear (compound) RTCP packet received on `transport`, within the transport's
    /// `RtcpBudget`: the compound is admitted first, and each packet in it is priced from its
    /// header (`rtcpWork`) before it is read; what does not fit is dropped and counted
    /// (`rtcpOverBudget`), with the rest of the compound.
    public func handleRtcp(from transport: TransportIndex, packet: UnsafeRawBufferPointer, now: Nanoseconds) {
        rtcpPacketsReceived &+= 1
        guard isActive(transport) else { drops[DropReason.unknownSsrc.rawValue] &+= 1; return }
        let t = Int(transport.slot)
        guard transports[t].rtcpBudget.admitPacket(now: now) else { drops[DropReason.rtcpOverBudget.rawValue] &+= 1; return }
        var it = RtcpIterator(packet)
        while let p = it.next() {
            guard transports[t].rtcpBudget.spend(rtcpWork(p, transport: t)) else {
                drops[DropReason.rtcpOverBudget.rawValue] &+= 1
                return
            }
            if let sr = SenderReport(p) {
                handleSenderReport(sr, transport: t, now: now)
                for i in 0..<sr.reportCount {
                    if let block = sr.reportBlock(at: i) { receivedReport(block, transport: t, now: now) }
                }
            } else if let rr = ReceiverReport(p) {
                for i in 0..<rr.reportCount {
                    if let block = rr.reportBlock(at: i) { receivedReport(block, transport: t, now: now) }
                }
            } else if let pli = PictureLossIndication(p) {
                keyFrameRequested(mediaSsrc: pli.mediaSsrc, transport: t, now: now)
            } else if let fir = FullIntraRequest(p) {
                for i in 0..<fir.entryCount {
                    if let entry = fir.entry(at: i) { keyFrameRequested(mediaSsrc: entry.ssrc, transport: t, now: now) }
                }
            } else if TransportFeedback.claimedStatusCount(p) != nil {
                // Only a transport the engine sends numbered packets on has anything to learn.
                guard transports[t].estimator != nil else { continue }
                guard let feedback = TransportFeedback(p, maxStatusCount: SendSideEstimator.historySize) else {
                    drops[DropReason.invalidFeedback.rawValue] &+= 1
                    continue
                }
                // The first feedback, and any that moves the estimate, re-divides it.
                let first = transports[t].estimator?.hasFeedback == false
                if let changed = transports[t].estimator?.received(feedback, now: now), changed || first {
                    allocate(transport: t, now: now)
                }
            } else if let nack = GenericNack(p) {
                nacksReceived &+= 1
                answer(nack, transport: t, now: now)
            } else if let xr = ExtendedReport(p), let ntp = xr.receiverReferenceTime {
                answerReferenceTime(ntp, receiver: xr.senderSsrc, transport: t)
            }
        }
        if it.malformed { drops[DropReason.malformedRtcp.rawValue] &+= 1 }
    }

    /// What reading RTCP packet `p` may cost, in `RtcpBudget` work units, from its header
    /// alone: 1, plus one per item the engine would look at (report blocks, FIR entries, NACK
    /// pairs, and the packet statuses a transport-wide feedback claims when this transport has
    /// an estimator to walk them and the claim is one it would walk).
    @inline(__always)
    func rtcpWork(_ p: RtcpPacket, transport t: Int) -> Int {
        let items: Int
        switch (p.packetType, p.countOrFormat) {
        case (RtcpPacketType.senderReport, _), (RtcpPacketType.receiverReport, _):
            items = Int(p.countOrFormat)
        case (RtcpPacketType.payloadFeedback, 4):  // FIR: 8 bytes an entry
            items = max(p.bytes.count - 12, 0) / 8
        case (RtcpPacketType.transportFeedback, 1):  // generic NACK: 4 bytes a pair
            items = max(p.bytes.count - 12, 0) / 4
        case (RtcpPacketType.transportFeedback, 15):
            // A claim beyond the estimator's history is refused unwalked: it costs nothing more.
            let claimed = transports[t].estimator == nil ? 0 : (TransportFeedback.claimedStatusCount(p) ?? 0)
            items = claimed <= SendSideEstimator.historySize ? claimed : 0
        default:
            items = 0
        }
        return 1 + items
    }

    /// A subscriber's NACK: each listed packet of the consumer it names is resent (`resend`),
    /// until the consumer's resend budget runs out; the rest of the NACK is not looked up.
    private func answer(_ nack: GenericNack, transport t: Int, now: Nanoseconds) {
        let ssrc = nack.mediaSsrc
        var found = -1
        for c in transports[t].consumers where consumers[Int(c)].parameters.ssrc == ssrc { found = Int(c); break }
        guard found >= 0 else { return }
        consumers[found].nacksReceived &+= 1
        for i in 0..<nack.pairCount {
            guard let (pid, blp) = nack.pair(at: i) else { break }
            guard resend(consumer: found, sequence: pid, now: now) else { return }
            var bit: UInt16 = 0
            while bit < 16 {
                if blp & (1 << bit) != 0 {
                    guard resend(consumer: found, sequence: pid &+ bit &+ 1, now: now) else { return }
                }
                bit += 1
            }
        }
    }

    /// A receive-only peer's reference time (RTCP XR RRTR, negotiated with `rrtr`): answered at
    /// once with a DLRR (delay 0), so the peer learns its round-trip time to us and paces its
    /// NACK retries by it instead of a default (Chromium assumes 100 ms).
    private func answerReferenceTime(_ ntp: UInt64, receiver: UInt32, transport t: Int) {
        guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; return }
        // The peer knows our streams by their SSRCs: answer as the first consumer on this transport.
        var sender = transports[t].feedbackSsrc
        if let c = transports[t].consumers.first { sender = consumers[Int(c)].parameters.ssrc }
        let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize, count: Self.maxPacketLength)
        let n = RtcpWriter.dlrr(into: slot, senderSsrc: sender, receiverSsrc: receiver,
                                lastReference: UInt32(truncatingIfNeeded: ntp >> 16), delay: 0)
        if n > 0 { enqueue(transport: transportIndex(t), length: n, isRtcp: true) }
    }

    /// A report block from the peer of transport `t` about one of our streams: kept for the
    /// consumer's stats, and the round-trip time when it echoes our last sender report
    /// (RFC 3550 6.4.1: now - time the SR was sent - DLSR).
    private func receivedReport(_ block: ReportBlock, transport t: Int, now: Nanoseconds) {
        for c in transports[t].consumers where consumers[Int(c)].parameters.ssrc == block.ssrc {
            let co = Int(c)
            consumers[co].report = block
            guard block.lastSR != 0, block.lastSR == consumers[co].lastSenderReport,
                  consumers[co].lastSenderReportAt != 0 else { return }
            // DLSR is in 1/65536 s: below 2^32 * 10^9 / 2^16, no overflow.
            let delay = (UInt64(block.delaySinceLastSR) &* 1_000_000_000) >> 16
            let elapsed = now &- consumers[co].lastSenderReportAt
            guard elapsed > delay else { return }
            roundTripSample(max(elapsed - delay, 1), transport: t)
            return
        }
    }

    /// One round-trip time measured on transport `t`: from a receiver report echoing our sender
    /// report (a subscriber's transport), or from a NACKed packet's repair (a publisher's, which
    /// gets no sender report from us: without it, its NACK retries were paced by the 40 ms
    /// default, and a lost retransmission cost a frame 60 ms). Smoothed 7/8 old + 1/8 new.
    func roundTripSample(_ sample: Nanoseconds, transport t: Int) {
        let old = transports[t].roundTripTime
        transports[t].roundTripTime = old == 0 ? sample : (old / 8) &* 7 &+ sample / 8
    }

    private func keyFrameRequested(mediaSsrc: UInt32, transport t: Int, now: Nanoseconds) {
        for c in transports[t].consumers where consumers[Int(c)].parameters.ssrc == mediaSsrc {
            let p = consumers[Int(c)].parameters.producer
            // A simulcast consumer needs a keyframe of the layer it takes (or is switching to).
            if isActive(p) { requestKeyFrame(slot: targetSlot(Int(c)), now: now, cause: .subscriber) }
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
        let layer = producers[found].layer
        for c in producers[found].consumers
        where consumers[Int(c)].rewriter.hasStarted && consumers[Int(c)].currentLayer == layer {
            guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; return }
            let consumer = consumers[Int(c)]
            let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize,
                                                     count: Self.maxPacketLength)
            let n = RtcpWriter.senderReport(
                into: slot, ssrc: consumer.parameters.ssrc, ntpTimestamp: sr.ntpTimestamp,
                rtpTimestamp: consumer.rewriter.translate(timestamp: sr.rtpTimestamp),
                packetCount: UInt32(truncatingIfNeeded: consumer.packetsSent),
                octetCount: UInt32(truncatingIfNeeded: consumer.octetsSent))
            guard n > 0 else { continue }
            consumers[Int(c)].lastSenderReport = sr.compactNtp
            consumers[Int(c)].lastSenderReportAt = now
            enqueue(transport: consumer.parameters.transport, length: n, isRtcp: true)
        }
    }

    // MARK: Feedback to publishers

    /// Asks producer `p`'s sender for a keyframe: at once, or when the throttle interval ends;
    /// retried while none arrives (`KeyFrameRequester`).
    func requestKeyFrame(slot p: Int, now: Nanoseconds, cause: KeyFrameCause) {
        guard producers[p].parameters.keyFrameRequest != .none else { return }
        let wasPending = producers[p].keyFrames.pending
        if producers[p].keyFrames.request(now: now) {
            emitKeyFrameRequest(p, cause: cause, now: now)
        } else if !wasPending {
            producers[p].pendingKeyFrameCause = cause
        }
        if let due = producers[p].keyFrames.deadline { keyFrameDeadline = min(keyFrameDeadline, due) }
    }

    func emitKeyFrameRequest(_ p: Int, cause: KeyFrameCause, now: Nanoseconds) {
        let params = producers[p].parameters
        producers[p].packetsAtKeyFrameRequest = producers[p].stream.packets
        // A simulcast layer whose SSRC is not known yet cannot be named.
        guard params.keyFrameRequest != .none, isActive(params.transport),
              producers[p].rid.isEmpty || params.ssrc != 0 else { return }
        guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; return }
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
        // The sender's other simulcast layers wait: it would ignore a request this close.
        if !producers[p].rid.isEmpty {
            for layer in producers[Int(producers[p].group)].layerSlots where Int(layer) != p {
                producers[Int(layer)].keyFrames.hold(until: now &+ Self.simulcastKeyFrameSpacing)
            }
        }
        producers[p].keyFrameRequests &+= 1
        keyFrameRequestsSent &+= 1
        keyFrameRequestsByCause[cause.rawValue] &+= 1
    }

    /// Reports to transport `t`'s publisher when each transport-wide sequence number since the
    /// last report arrived (or that it did not), in as many feedback packets as it takes.
    /// Reference times and deltas come from the engine's clock (only differences matter).
    func sendTransportFeedback(transport t: Int, now: Nanoseconds) {
        // `recorder` shares the arrival buffer; nothing writes it until this returns.
        guard let recorder = transports[t].feedbackRecorder, let first = recorder.next, recorder.highest >= first else { return }
        let last = recorder.highest
        let total = Int(min(last - first + 1, UInt64(TransportFeedbackRecorder.capacity)))
        let mediaSsrc = transports[t].receiveSsrcs.first?.ssrc ?? 0
        var start = 0
        var packets = 0
        while start < total {
            guard transmitCount < outboxSlots else { drops[DropReason.outboxFull.rawValue] &+= 1; break }
            // This packet's reference time: its first received packet's arrival, in 64 ms units.
            var k = start
            while k < total, recorder.arrival(first &+ UInt64(k)) == 0 { k += 1 }
            let anchor = k < total ? recorder.arrival(first &+ UInt64(k)) : now
            let reference = anchor / 64_000_000
            var previousTicks = reference &* 256  // 250 µs ticks
            var i = start
            while i < total {
                let at = recorder.arrival(first &+ UInt64(i))
                if at == 0 {
                    arrivalScratch[i - start] = .notReceived
                } else {
                    let ticks = at / 250_000
                    arrivalScratch[i - start] = TransportFeedback.Arrival(delta: Int32(clamping: Int64(bitPattern: ticks &- previousTicks)))
                    previousTicks = ticks
                }
                i += 1
            }
            let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize, count: Self.maxPacketLength)
            let (n, covered) = RtcpWriter.transportFeedback(
                into: slot, senderSsrc: transports[t].feedbackSsrc, mediaSsrc: mediaSsrc,
                baseSequence: UInt16(truncatingIfNeeded: first &+ UInt64(start)),
                referenceTime: Int32(truncatingIfNeeded: reference & 0xFF_FFFF), feedbackCount: recorder.feedbackCount &+ UInt8(truncatingIfNeeded: packets),
                arrivals: UnsafeBufferPointer(start: arrivalScratch, count: total - start))
            guard n > 0, covered > 0 else { break }
            enqueue(transport: transportIndex(t), length: n, isRtcp: true)
            transportFeedbackSent &+= 1
            packets += 1
            start += covered
        }
        transports[t].feedbackRecorder?.reported(upTo: last, packets: packets)
    }

    /// NACKs what producer `p`'s `NackGenerator` says is due (new gaps, retries); asks for a
    /// keyframe when it gave packets up. Keeps `nackDeadline` at or before its next work.
    func sendNack(producer p: Int, now: Nanoseconds) {
        let transport = producers[p].parameters.transport
        let rtt = roundTripTime(transport)
        let retry = max(rtt &+ rtt / 2, 20_000_000)
        guard let (count, gaveUp) = producers[p].nack?.poll(now: now, retryInterval: retry, into: nackScratch,
                                                            limit: Self.nackScratchCount) else { return }
        if count > 0, isActive(transport), transmitCount < outboxSlots {
            let slot = UnsafeMutableRawBufferPointer(start: outbox + transmitCount * Self.slotSize,
                                                     count: Self.maxPacketLength)
            let n = RtcpWriter.nack(into: slot, senderSsrc: transports[Int(transport.slot)].feedbackSsrc,
                                    mediaSsrc: producers[p].parameters.ssrc, sequences: nackScratch, count: count)
            if n > 0 {
                enqueue(transport: transport, length: n, isRtcp: true)
                producers[p].nacksSent &+= 1
                nacksSent &+= 1
            }
        } else if count > 0 {
            drops[DropReason.outboxFull.rawValue] &+= 1
        }
        if gaveUp { requestKeyFrame(slot: p, now: now, cause: .nackGaveUp) }
        if let due = producers[p].nack?.deadline(retryInterval: retry) { nackDeadline = min(nackDeadline, due) }
    }
}
