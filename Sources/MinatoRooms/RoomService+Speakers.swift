internal import MinatoMedia

/// Active speakers (docs/protocol.md "Active speakers"): the media worker decides who speaks
/// (`ActiveSpeakers`, from the RFC 6464 audio levels publishers send) and reports a room's list
/// when it changes, at most every `rooms.speakerEventIntervalMs`; this turns it into the room
/// event `activeSpeakersChanged`.
extension RoomService {
    /// Sends `activeSpeakersChanged {speakers:[{memberId, publicationId, level}]}`, loudest
    /// first, to the room's members and event listeners. It describes the present only: it has
    /// no `version`, is not kept in the event log and is not replayed by `subscribeRoomEvents`.
    func speakersChanged(router: RouterId, _ list: [SpeakerLevel]) {
        guard let room = rooms.first(where: { $0.router == router }) else { return }
        var speakers: [JSONValue] = []
        for s in list {
            guard let pub = room.publications.first(where: { $0.site == .home && $0.producer == s.producer }) else { continue }
            // Three decimals: the level is a smoothed estimate, not a measurement to the last bit.
            let level = (Double(s.level) * 1000).rounded() / 1000
            speakers.append(["memberId": .string(pub.publisherId), "publicationId": .string(pub.id),
                             "level": .double(min(1, max(0, level)))])
        }
        let event: JSONValue = ["roomId": .string(room.id), "type": "activeSpeakersChanged",
                                "data": ["speakers": .array(speakers)]]
        let text = Self.notification("roomEvent", event)
        var sent = Set<UInt64>()
        for m in room.members { if let c = m.channel, sent.insert(c.id).inserted { outbox.append((c, text)) } }
        for (id, c) in room.listeners where sent.insert(id).inserted { outbox.append((c, text)) }
        flushOutbox()
    }
}
