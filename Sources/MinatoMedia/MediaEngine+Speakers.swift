internal import MinatoWire

/// One entry of a room's speaker list (`MediaEngine.takeSpeakerEvents`): a producer and its
/// smoothed level (linear amplitude, 0...1 of full scale).
public struct SpeakerLevel: Sendable, Equatable {
    public var producer: ProducerId
    public var level: Float
    public init(producer: ProducerId, level: Float) { self.producer = producer; self.level = level }
}

// Active speakers and forward-loudest-N: one `ActiveSpeakers` per room (router) that has audio
// with levels. The packet path reads the level (`speakerLevel`); the timer ticks the rooms.
extension MediaEngine {
    /// Registers audio producer `p` (with the audio-level extension) in `router`'s speaker room.
    func addSpeaker(producer p: Int, router: RouterId) {
        let room: Int
        if let r = speakerRoomByRouter[router] {
            room = Int(r)
        } else if let free = speakerRoomRouters.firstIndex(where: { $0 == nil }) {
            room = free
            speakerRooms[room] = ActiveSpeakers(settings: tuning.speakers)
            speakerRoomRouters[room] = router
        } else {
            room = speakerRooms.count
            speakerRooms.append(ActiveSpeakers(settings: tuning.speakers))
            speakerRoomRouters.append(router)
        }
        speakerRoomByRouter[router] = Int32(truncatingIfNeeded: room)
        let entry = speakerRooms[room].add(owner: Int32(truncatingIfNeeded: p))
        producers[p].speakerRoom = Int32(truncatingIfNeeded: room)
        producers[p].speakerEntry = Int32(truncatingIfNeeded: entry)
    }

    /// Takes producer slot `p` out of its speaker room (the room goes when it is empty).
    func removeSpeaker(producer p: Int) {
        let room = Int(producers[p].speakerRoom)
        guard room >= 0, room < speakerRooms.count else { return }
        speakerRooms[room].remove(Int(producers[p].speakerEntry))
        producers[p].speakerRoom = -1
        producers[p].speakerEntry = -1
        if speakerRooms[room].isEmpty, let router = speakerRoomRouters[room] {
            speakerRoomByRouter[router] = nil
            speakerRoomRouters[room] = nil
            speakerRooms[room] = ActiveSpeakers(settings: tuning.speakers)
        }
    }

    /// The packet path: producer `p`'s level from `view` into its room. Returns whether the
    /// packet is forwarded (false: not among the loudest). Allocation-free.
    @inline(__always)
    func speakerLevel(producer p: Int, _ view: RtpPacketView, now: Nanoseconds) -> Bool {
        let room = Int(producers[p].speakerRoom), entry = Int(producers[p].speakerEntry)
        if speakerDeadline == .max { speakerDeadline = now &+ tuning.speakers.tick }
        guard let value = view.extensionValue(id: producers[p].parameters.audioLevelExtensionId), value.count > 0 else {
            return speakerRooms[room].isAudible(entry)
        }
        return speakerRooms[room].observe(entry, level: value[0] & 0x7F, now: now)
    }

    /// Ticks every speaker room; they keep ticking while any has packets, speakers or audible members.
    func tickSpeakers(now: Nanoseconds) {
        var busy = false
        for room in speakerRooms.indices where speakerRoomRouters[room] != nil {
            if speakerRooms[room].tick(now: now) { busy = true }
            if speakerRooms[room].eventDue { speakerEventsDue = true }
        }
        speakerDeadline = busy ? now &+ tuning.speakers.tick : .max
    }

    /// The speaker lists due as events (each room at most every `eventInterval`), loudest first.
    /// Allocates: called from the timer, only when `speakerEventsDue`.
    public func takeSpeakerEvents(now: Nanoseconds) -> [(router: RouterId, speakers: [SpeakerLevel])] {
        guard speakerEventsDue else { return [] }
        speakerEventsDue = false
        var out: [(router: RouterId, speakers: [SpeakerLevel])] = []
        for room in speakerRooms.indices where speakerRooms[room].eventDue {
            guard let router = speakerRoomRouters[room] else { continue }
            let list = speakerRooms[room].speakers.map { SpeakerLevel(producer: producerId(Int($0.owner)), level: $0.level) }
            out.append((router, list))
            speakerRooms[room].eventSent(now: now)
        }
        return out
    }

    /// Audio-level statistics of producer slot `p` (level, speaking, audible), nil without levels.
    func speakerStats(producer p: Int) -> (level: Float, speaking: Bool, audible: Bool)? {
        let room = Int(producers[p].speakerRoom), entry = Int(producers[p].speakerEntry)
        guard room >= 0, room < speakerRooms.count else { return nil }
        return (speakerRooms[room].level(entry), speakerRooms[room].isSpeaking(entry), speakerRooms[room].isAudible(entry))
    }
}
