internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire

/// WHEP sessions taking publications: a session follows one publisher by name and takes each of
/// its publications into its free m-section of that kind (a subscription with its consumer;
/// over a relay when the publication is served by another node).
extension RoomService {
    /// Starts forwarding `pub` into the egress member's m-section of its kind (a subscription
    /// with its consumer), when that m-section is free and was answered with the codec.
    func startEgress(of pub: RoomPublication, to member: LocalSFURoomMember, in room: Room) async throws {
        guard let session = member.mediaSession, let stream = pub.stream,
              let i = session.egress.firstIndex(where: { $0.kind == pub.contentType && $0.subscriptionId == nil }),
              session.egress[i].codec.codec == stream.codec.codec.codec,
              pub.producer != nil, let tid = member.recv.description?.id else { return }
        // The publication may have ended while the caller awaited the worker.
        guard room.publications.contains(where: { $0 === pub }) else { return }
        if room.subscriptions.filter({ $0.publicationId == pub.id }).count >= pub.maxSubscribers {
            throw RoomError.maxSubscribersExceeded(pub.maxSubscribers)
        }
        let line = session.egress[i]
        let sub = RoomSubscription(id: newId(), publicationId: pub.id, subscriberId: member.id,
                                   contentType: pub.contentType, mid: line.mid, ssrc: line.ssrc, preferredEncodingId: nil)
        member.mediaSession?.egress[i].subscriptionId = sub.id
        room.subscriptions.append(sub)
        emit(room, "publicationSubscribed", ["subscription": sub.json])
        // Header extensions: the publisher's ids to the player's ids for the same URI.
        var ids = ExtensionIdMap()
        for (publisherId, receiverId) in stream.extensionIds {
            guard let uri = RtpHeaderExtension.allCases.first(where: { $0.receiverId == receiverId })?.uri,
                  let theirs = line.extensions.first(where: { $0.uri == uri })?.id else { continue }
            ids[publisherId] = theirs
        }
        let map = ids, ssrc = line.ssrc, pt = line.codec.payloadType
        let rtxSsrc = line.rtxPayloadType == nil ? nil : line.rtxSsrc, rtxPt = line.rtxPayloadType
        let twcc = line.extensions.first { $0.uri == RtpHeaderExtension.transportWideCC.uri }?.id ?? 0
        // A WHEP player is served here; a publication served by another node comes over a relay
        // (`attachConsumer` sets the producer).
        var c = ConsumerParameters(producer: ProducerId(slot: 0, generation: 0), transport: TransportIndex(slot: 0, generation: 0),
                                   ssrc: ssrc, payloadType: pt, extensionIds: map, rtxSsrc: rtxSsrc, rtxPayloadType: rtxPt,
                                   redPayloadType: nil)
        c.transportSequenceExtensionId = twcc
        // A WHEP player watches one member: its audio is never left out for not being
        // among the room's loudest (rooms.audio.forwardLoudest).
        c.pinned = true
        _ = try await attachConsumer(sub, of: pub, for: member, on: tid, c, in: room)
    }

    /// A new publication: every egress session following its publisher by name takes it into
    /// its free m-section of that kind (`startEgress`).
    func followPublication(_ pub: RoomPublication, in room: Room) async {
        guard let name = room.member(pub.publisherId)?.name else { return }
        for m in room.members where m.mediaSession?.follows == name && !m.removed {
            do { try await startEgress(of: pub, to: m, in: room) } catch {
                logger.info("egress session did not take a publication", metadata: ["member": "\(m.id)", "error": "\(error)"])
            }
        }
    }
}
