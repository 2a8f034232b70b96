// What the engine reports about its producers and consumers, and its counters (read by the
// worker for the admin API and /metrics; may allocate).
extension MediaEngine {
    public func producerStats(_ p: ProducerId) -> ProducerStats? {
        guard isActive(p) else { return nil }
        let group = producers[Int(producers[Int(p.slot)].group)].layerSlots
        var stats = ProducerStats(packetsReceived: 0, bytesReceived: 0, keyFrameRequests: 0)
        for raw in group {
            let pr = producers[Int(raw)]
            stats.packetsReceived &+= pr.stream.packets
            stats.bytesReceived &+= pr.stream.bytes
            stats.keyFrameRequests &+= pr.keyFrameRequests
            stats.nacksSent &+= pr.nacksSent
            stats.packetsRecovered &+= pr.packetsRecovered
            stats.packetsLost &+= pr.stream.cumulativeLost
            stats.jitter = pr.stream.jitter
            if let speaker = speakerStats(producer: Int(raw)) {
                stats.audioLevel = speaker.level
                stats.speaking = speaker.speaking
                stats.audible = speaker.audible
            }
            if !pr.rid.isEmpty {
                let bound = pr.parameters.ssrc != 0 || pr.stream.packets > 0
                let tids = pr.temporalLayers
                stats.layers.append(LayerStats(rid: String(decoding: pr.rid, as: UTF8.self),
                                               ssrc: bound ? pr.parameters.ssrc : nil,
                                               packetsReceived: pr.stream.packets, bytesReceived: pr.stream.bytes,
                                               temporalLayers: tids,
                                               temporalBitrates: (0..<tids).map { pr.temporalBitrates[$0] }))
            }
        }
        return stats
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
        if co.layerSlots.count > 1 {
            stats.layer = co.currentLayer >= 0 && !co.waitingForKeyFrame ? co.currentLayer : nil
            stats.targetLayer = co.targetLayer
            stats.layerSwitches = co.layerSwitches
            stats.bandwidthLayer = co.bandwidthLayer == Int.max ? nil : co.bandwidthLayer
            stats.temporalLayer = co.temporalLayer == Int.max ? nil : co.temporalLayer
            stats.targetTemporalLayer = co.targetTemporalLayer == Int.max ? nil : co.targetTemporalLayer
            stats.temporalLayerSwitches = co.temporalSwitches
        }
        if isActive(t), transports[Int(t.slot)].estimator?.hasFeedback == true {
            stats.estimate = transports[Int(t.slot)].estimator?.estimate
        }
        return stats
    }
    public func drops(_ reason: DropReason) -> UInt64 { drops[reason.rawValue] }
    public func keyFrameRequests(_ cause: KeyFrameCause) -> UInt64 { keyFrameRequestsByCause[cause.rawValue] }
}
