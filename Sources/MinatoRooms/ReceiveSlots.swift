/// The m-lines of a member's receive connection, in offer order, and which subscription each
/// carries. A value driven by `RoomService` (it performs nothing itself).
///
/// Reuse: a new subscription takes an m-line of its kind whose subscription ended, once the
/// subscriber has seen it end (an offer carrying it `inactive` was answered). The m-line keeps
/// its mid, as the subscriber keeps its transceiver (JSEP: an m-section's mid never changes; its
/// direction and stream may), and the next offer makes it `sendonly` again with the new
/// stream's msid and new SSRCs. Taken first: such an m-line in the same format (codec and payload types),
/// so the receiver keeps its decoder. A new m-line is added when none is free, or when only
/// one in another format is free and fewer than `maxSubscriptions` m-lines exist; past that
/// any ended m-line of the kind is taken (in another format, and if need be one whose end the
/// subscriber has not answered yet). So the offer's size follows the live subscriptions, not
/// the churn, and never exceeds `maxSubscriptions` m-lines of each kind.
struct ReceiveSlots {
    private(set) var slots: [ReceiveSlot] = []
    /// Index of the slot that carries each live subscription.
    private var bySubscription: [String: Int] = [:]
    private var nextMid = 0
    /// The newest offer version the subscriber answered.
    private(set) var answeredVersion = 0
    /// The data-channel m-line (one per connection, made by the first data subscription and
    /// kept): its mid and its place among the slots.
    private(set) var data: (mid: String, position: Int)?

    /// The data-channel m-line's mid, made now if there is none yet.
    mutating func takeDataSection() -> String {
        if let data { return data.mid }
        let mid = String(nextMid)
        nextMid += 1
        data = (mid, slots.count)
        return mid
    }

    /// The slot for a new subscription to `stream` (an ended one taken, or a new one added),
    /// which carries it from now on.
    mutating func take(_ stream: PublishedStream, subscriptionId: String, streamId: String, trackId: String, cname: String,
                       maxSubscriptions: Int) -> ReceiveSlot {
        let answered = answeredVersion
        func free(_ s: ReceiveSlot) -> Bool { s.subscriptionId == nil && s.kind == stream.kind }
        func seenEnded(_ s: ReceiveSlot) -> Bool { free(s) && (s.inactiveSince.map { $0 <= answered } ?? false) }
        var index = slots.firstIndex { seenEnded($0) && $0.hasFormat(of: stream) }
        if index == nil, slots.count >= maxSubscriptions {
            index = slots.firstIndex(where: seenEnded) ?? slots.firstIndex(where: free)
        }
        if let i = index {
            slots[i].carry(stream, subscriptionId: subscriptionId, streamId: streamId, trackId: trackId, cname: cname)
            bySubscription[subscriptionId] = i
            return slots[i]
        }
        let slot = ReceiveSlot(mid: String(nextMid), subscribing: stream, subscriptionId: subscriptionId,
                               ssrc: UInt32.random(in: 1...UInt32.max), streamId: streamId, trackId: trackId, cname: cname)
        nextMid += 1
        bySubscription[subscriptionId] = slots.count
        slots.append(slot)
        return slot
    }

    /// The slot carrying subscription `id`, if any.
    func slot(carrying id: String) -> ReceiveSlot? { bySubscription[id].map { slots[$0] } }

    /// Subscription `id` ended: its slot is written `inactive` from the next offer on.
    mutating func end(_ id: String) {
        guard let i = bySubscription.removeValue(forKey: id) else { return }
        slots[i].subscriptionId = nil
        slots[i].inactiveSince = nil
    }

    /// An offer of `version` carries every slot as it is now: ended ones are `inactive` in it.
    mutating func offered(version: Int) {
        for i in slots.indices where slots[i].subscriptionId == nil && slots[i].inactiveSince == nil {
            slots[i].inactiveSince = version
        }
    }

    /// The subscriber answered the offer of `version`.
    mutating func answered(version: Int) { answeredVersion = max(answeredVersion, version) }
}
