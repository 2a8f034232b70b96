internal import MinatoWire

// Work by deadline: throttled and retried keyframe requests, NACK retries, receiver reports.
extension MediaEngine {
    /// When `handleTimeout` next has work; nil when nothing is pending (an idle engine, or
    /// producers that are silent, owe no keyframe request and miss no packet). O(1).
    public var nextDeadline: Nanoseconds? {
        let soonest = min(keyFrameDeadline, reportDeadline, nackDeadline, feedbackDeadline, probeDeadline, speakerDeadline)
        return soonest == .max ? nil : soonest
    }

    /// The soonest keyframe request or retry of any producer (`.max`: none).
    func soonestKeyFrameDeadline() -> Nanoseconds {
        var soonest: Nanoseconds = .max
        for p in producers.indices where producers[p].active {
            if let due = producers[p].keyFrames.deadline { soonest = min(soonest, due) }
        }
        return soonest
    }

    /// Sends the keyframe requests, NACKs and receiver reports due at `now`. Before
    /// `nextDeadline` it returns at once: no scan of producers.
    public func handleTimeout(now: Nanoseconds) {
        if now >= keyFrameDeadline {
            var soonest: Nanoseconds = .max
            for p in producers.indices where producers[p].active && producers[p].keyFrames.deadline != nil {
                let keyFrames = producers[p].keyFrames
                if !keyFrames.pending, keyFrames.awaiting, let due = keyFrames.deadline, now >= due,
                   producers[p].stream.packets == producers[p].packetsAtKeyFrameRequest {
                    // Nothing arrived since the request: the publisher is silent, not losing keyframes.
                    producers[p].keyFrames.stopAwaiting()
                } else if let due = producers[p].keyFrames.poll(now: now) {
                    emitKeyFrameRequest(p, cause: due == .retry ? .retry : producers[p].pendingKeyFrameCause, now: now)
                }
                if let due = producers[p].keyFrames.deadline { soonest = min(soonest, due) }
            }
            keyFrameDeadline = soonest
        }
        if now >= nackDeadline {
            nackDeadline = .max
            for p in producers.indices where producers[p].active && (producers[p].nack?.missingCount ?? 0) > 0 {
                sendNack(producer: p, now: now)
            }
        }
        if now >= probeDeadline { sendProbePadding(now: now) }
        if now >= speakerDeadline { tickSpeakers(now: now) }
        if now >= feedbackDeadline {
            var pending = false
            for t in transports.indices where transports[t].active && transports[t].feedbackRecorder?.hasPending == true {
                sendTransportFeedback(transport: t, now: now)
                pending = true
            }
            feedbackDeadline = pending ? now &+ Self.feedbackInterval : .max
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
            // Simulcast consumers follow the layers the publisher sends (one that went silent is
            // left, one that appeared is taken when the preference allows).
            for p in producers.indices where producers[p].active {
                let elapsed = now &- producers[p].rateAt
                if producers[p].rateAt != 0, elapsed > 0 {
                    let bits = (producers[p].stream.bytes &- producers[p].bytesAtRate) &* 8
                    producers[p].bitrate = Int(clamping: bits &* 1_000_000_000 / elapsed)
                    for tid in 0..<4 {
                        // At least 1 bit/s for a TID that sent anything (so it counts as present).
                        let bits = producers[p].temporalBytes[tid] &* 8 &* 1_000_000_000 / elapsed
                        producers[p].temporalBitrates[tid] = producers[p].temporalBytes[tid] > 0 ? max(Int(clamping: bits), 1) : 0
                    }
                }
                producers[p].temporalBytes = SIMD4()
                producers[p].rateAt = now
                producers[p].bytesAtRate = producers[p].stream.bytes
            }
            for t in transports.indices where transports[t].active && transports[t].estimator?.hasFeedback == true {
                transports[t].estimator?.expireProbe(now: now)
                allocate(transport: t, now: now)
            }
            for c in consumers.indices where consumers[c].active && consumers[c].layerSlots.count > 1 {
                retarget(c, now: now)
            }
        }
    }
}
