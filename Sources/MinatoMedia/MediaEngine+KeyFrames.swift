internal import MinatoWire

/// Keyframe requests the control plane and the transports' lifecycle make (the engine's own,
/// from subscribers' PLI/FIR and NACK give-ups, are in MediaEngine+Feedback.swift).
extension MediaEngine {
    /// The transport (re)connected: its video consumers wait for a fresh keyframe, requested now,
    /// and their numbering continues from the last packet sent, so the packets dropped while
    /// waiting leave no gap for the subscriber to wait for (or NACK).
    public func restartConsumers(on t: TransportIndex, now: Nanoseconds) {
        guard isActive(t) else { return }
        for c in transports[Int(t.slot)].consumers {
            let p = consumers[Int(c)].parameters.producer
            guard isActive(p), producers[Int(p.slot)].parameters.kind == .video else { continue }
            consumers[Int(c)].rewriter.resync()
            consumers[Int(c)].pictureIds.resync()
            consumers[Int(c)].waitingForKeyFrame = true
            requestKeyFrame(slot: targetSlot(Int(c)), now: now, cause: .consumerStart)
        }
    }

    /// The transport's path changed (an ICE restart completed): what its subscriber lost while
    /// the old path was dying is repaired fastest by a keyframe, so one is asked of the producer
    /// of each of its video consumers (throttled as any request). Forwarding goes on meanwhile.
    public func requestKeyFramesForConsumers(on t: TransportIndex, now: Nanoseconds, cause: KeyFrameCause) {
        guard isActive(t) else { return }
        for c in transports[Int(t.slot)].consumers {
            let p = consumers[Int(c)].parameters.producer
            guard isActive(p), producers[Int(p.slot)].parameters.kind == .video else { continue }
            requestKeyFrame(slot: targetSlot(Int(c)), now: now, cause: cause)
        }
    }

    /// Asks the producer's sender for a keyframe (every layer of a simulcast producer; throttled
    /// per producer, retried until one arrives).
    public func requestKeyFrame(_ p: ProducerId, now: Nanoseconds, cause: KeyFrameCause = .control) {
        guard isActive(p) else { return }
        for layer in producers[Int(producers[Int(p.slot)].group)].layerSlots {
            requestKeyFrame(slot: Int(layer), now: now, cause: cause)
        }
    }
}
