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
            // A home publication's own producer, or the relayed stream of one served elsewhere.
            guard let pub = room.publications.first(where: { $0.site == .home && $0.producer == s.producer })
                ?? room.forwards.values.first(where: { $0.key.site == .home && $0.producer == s.producer })
                    .flatMap({ room.publication($0.key.publication) }) else { continue }
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

    /// Audio with levels published by a member served by another node is relayed to the room's
    /// node too, whoever subscribes to it, so the room's one speaker detector (on its router)
    /// hears every member wherever it is served. The relayed stream is held (one reference)
    /// until the publication ends; when its relay fails it is made again after
    /// `relayBackoff(failures)` (`failures`: attempts that failed so far; nil: at once).
    func hearSpeaker(_ pub: RoomPublication, in room: Room, after failures: Int? = nil) {
        guard pub.site != .home, pub.contentType == "audio", pub.stream?.audioLevelExtensionId != nil,
              pub.speakerForward == nil, !pub.hearing else { return }
        pub.hearing = true
        Task {
            if let failures { try? await Task.sleep(for: Self.relayBackoff(failures)) }
            guard room.publication(pub.id) === pub, self.rooms.contains(where: { $0 === room }) else {
                pub.hearing = false
                return
            }
            do {
                let (_, key) = try await self.producer(of: pub, at: .home, in: room)
                pub.hearing = false
                guard let key else { return }
                guard room.publication(pub.id) === pub else { return self.releaseForward(key, in: room) }
                pub.speakerForward = key
            } catch {
                pub.hearing = false
                self.logger.warning("a speaker's audio could not be relayed to the room's node", metadata: [
                    "room": "\(room.id)", "publication": "\(pub.id)", "failures": "\((failures ?? 0) + 1)", "error": "\(error)"])
                self.hearSpeaker(pub, in: room, after: (failures ?? 0) + 1)
            }
        }
    }
}
