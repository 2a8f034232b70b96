internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire

/// The receive connection (the server offers, the client answers): subscribe, unsubscribe,
/// answer, and the offers the server sends on its own, all through the member's
/// `ReceiveNegotiation` (Negotiation.swift), which serialises offers and says what to do.
extension RoomService {
    public func subscribe(_ r: SubscribeRequest, from channel: ClientChannel) async throws -> SubscribeResult {
        let (room, member) = try joinedMember(r.memberId, channel: channel)
        let pid = r.publicationId
        try Validate.preferredEncoding(r.preferredEncodingId, of: room.publication(pid))
        let decodable = try Validate.codecCapabilities(r.codecCapabilities, key: "codecCapabilities")
        func check() throws -> RoomPublication {
            guard let pub = room.publication(pid) else { throw RoomError.publicationNotFound(pid) }
            if pub.publisherId == member.id { throw RoomError.cannotSubscribeOwnPublication() }
            if let mimeType = pub.stream?.codec.mimeType, let decodable,
               !decodable.contains(where: { $0.lowercased() == mimeType.lowercased() }) {
                throw RoomError.codecNotSupported(mimeType, publicationId: pid)
            }
            if room.subscriptions.contains(where: { $0.publicationId == pid && $0.subscriberId == member.id }) {
                throw RoomError.subscriptionAlreadyExists(pid)
            }
            let count = room.subscriptions.filter { $0.publicationId == pid }.count
            if count >= pub.maxSubscribers { throw RoomError.maxSubscribersExceeded(pub.maxSubscribers) }
            if room.subscriptions.filter({ $0.subscriberId == member.id }).count >= configuration.maxSubscriptionsPerMember {
                throw RoomError.limitExceeded("A member may have at most \(configuration.maxSubscriptionsPerMember) subscriptions (rooms.maxSubscriptionsPerMember).")
            }
            return pub
        }
        _ = try check()
        let local = try await transport(.recv, of: member, in: room)
        let token = try await takeReceiveTurn(member, room)
        do {
            try stillJoined(member, room)
            let pub = try check()
            // An ended m-line of this kind is taken again when there is one (`ReceiveSlots`); data
            // subscriptions share the connection's one data-channel m-line.
            let id = newId()
            let mid: String, ssrc: UInt32
            if let stream = pub.stream {
                let slot = member.recvSlots.take(stream, subscriptionId: id, streamId: pub.publisherId, trackId: pub.id,
                                                 cname: "minato-\(pub.publisherId.prefix(8))",
                                                 maxSubscriptions: configuration.maxSubscriptionsPerMember)
                (mid, ssrc) = (slot.mid, slot.ssrc)
            } else {
                (mid, ssrc) = (member.recvSlots.takeDataSection(), 0)
            }
            let sub = RoomSubscription(id: id, publicationId: pub.id, subscriberId: member.id, contentType: pub.contentType,
                                       mid: mid, ssrc: ssrc, preferredEncodingId: r.preferredEncodingId)
            sub.pinned = r.pinned
            room.subscriptions.append(sub)
            let offer = makeReceiveOffer(member, local: local, by: token)
            emit(room, "publicationSubscribed", ["subscription": sub.json])
            return SubscribeResult(subscription: sub.json, mid: mid, offer: offer)
        } catch {
            perform(member.receive.release(token, connected: member.channel != nil), for: member)
            throw error
        }
    }

    /// Ends the subscription and returns the receive connection's new offer without it.
    public func unsubscribe(subscriptionId sid: String, from channel: ClientChannel) async throws -> SessionDescriptionText? {
        let (room, member, sub) = try ownSubscription(sid, channel: channel)
        let token = try await takeReceiveTurn(member, room)
        do {
            try stillJoined(member, room)
            guard room.subscription(sid) != nil else { throw RoomError.subscriptionNotFound(sid) }
            endSubscription(sub, in: room, offerToSubscriber: false)
            guard let local = member.recv.description else {
                perform(member.receive.release(token, connected: member.channel != nil), for: member)
                return nil
            }
            return makeReceiveOffer(member, local: local, by: token)
        } catch {
            perform(member.receive.release(token, connected: member.channel != nil), for: member)
            throw error
        }
    }

    /// `restartIce {memberId, direction:"recv"}`: an ICE restart of the receive connection. The
    /// transport gets new ICE credentials and candidates (media goes on over the old pair until
    /// the new one is up), and the result is the server's next offer carrying them, made in turn
    /// with the connection's other offers; the client answers it with `answer`. The send
    /// connection restarts from the client's side: its next offer with new credentials
    /// (`negotiate`), so `direction:"send"` is refused.
    public func restartIce(memberId: String, direction: ConnectionDirection, from channel: ClientChannel) async throws -> SessionDescriptionText {
        let (room, member) = try joinedMember(memberId, channel: channel)
        guard direction == .recv else {
            throw RoomError.invalidParameter("The send connection restarts ICE with an offer that has new ICE credentials (createOffer({iceRestart: true})) sent with negotiate.")
        }
        guard member.mediaSession == nil else {
            throw RoomError.invalidParameter("A WHIP or WHEP session restarts ICE with PATCH (RFC 9725).")
        }
        guard member.recv.description != nil else {
            throw RoomError.invalidParameter("This member has no receive connection to restart (it has not subscribed).")
        }
        let token = try await takeReceiveTurn(member, room)
        do {
            try stillJoined(member, room)
            guard let id = member.recv.description?.id else {
                throw RoomError.invalidParameter("This member has no receive connection to restart.")
            }
            let local = try await restartIce(.recv, of: member, in: room, transport: id)
            return makeReceiveOffer(member, local: local, by: token)
        } catch {
            perform(member.receive.release(token, connected: member.channel != nil), for: member)
            throw error
        }
    }

    public func changePreferredEncoding(subscriptionId sid: String, preferredEncodingId: String, from channel: ClientChannel) throws {
        let (room, _, sub) = try ownSubscription(sid, channel: channel)
        let pub = room.publication(sub.publicationId)
        try Validate.preferredEncoding(preferredEncodingId, of: pub)
        sub.preferredEncodingId = preferredEncodingId
        if let pub, let consumer = sub.consumer, pub.layers.count > 1 {
            let cap = pub.layerCap(preferredEncodingId: preferredEncodingId)
            postSite(sub.site, room, .setPreferredLayer(consumer, cap))
        }
    }

    /// The client's answer to the outstanding server offer: the streams it accepted start
    /// flowing (each with the RTX and RED formats its m-section accepted,
    /// `ReceiveSlot.acceptedFormats`), and the next waiting request (or an owed offer) goes on.
    public func answer(memberId: String, answer sdp: String, from channel: ClientChannel) async throws {
        let (room, member) = try joinedMember(memberId, channel: channel)
        guard member.receive.offerOutstanding else {
            throw RoomError.invalidParameter("No server offer is waiting for an answer from this member.")
        }
        let sd = try await parseClientSdp(sdp, answer: true)
        try stillJoined(member, room)
        guard member.receive.offerOutstanding, let local = member.recv.description else {
            throw RoomError.invalidParameter("No server offer is waiting for an answer from this member.")
        }
        let remote = try SdpNegotiation.remoteTransport(of: sd, maxCandidates: configuration.maxRemoteCandidates)
        // The offer that was answered carried exactly these subscriptions (later ones wait for their own answer).
        let accepted = room.subscriptions.filter { $0.subscriberId == member.id && $0.consumer == nil && !$0.dataStarted }
        // The m-lines this answer saw ended may carry new subscriptions from now on.
        member.recvSlots.answered(version: member.recvVersion)
        perform(try member.receive.answered(connected: member.channel != nil), for: member)
        try await applyRemoteOnce(remote, .recv, of: member, in: room, transport: local.id)
        try stillJoined(member, room)
        let tid = local.id
        let sections = sd.mediaIndicesByMid
        try await startDataSubscriptions(accepted.filter { $0.contentType == "data" }, answer: sd, of: member, in: room, transport: tid)
        for sub in accepted where room.subscription(sub.id) != nil && sub.consumer == nil && sub.contentType != "data" {
            guard let pub = room.publication(sub.publicationId), let stream = pub.stream, pub.producer != nil else { continue }
            let slot = member.recvSlots.slot(carrying: sub.id)
            let section = slot.flatMap { sections[$0.mid] }.map { sd.media[$0] }
            guard let slot, SfuSdp.acceptance(of: slot.stream, section: section).codec else {
                // The subscriber refused the stream (rejected m-section, or its codec is not one
                // it decodes): no consumer; the subscription ends and the next offer drops it.
                endSubscription(sub, in: room, offerToSubscriber: true, reason: "codecNotSupported")
                continue
            }
            var ids = ExtensionIdMap()
            for (publisherId, subscriberId) in stream.extensionIds { ids[publisherId] = subscriberId }
            let map = ids
            let ssrc = sub.ssrc, pt = stream.codec.payloadType
            let formats = slot.acceptedFormats(in: section)
            let rtxSsrc = formats.rtxSsrc, rtxPt = formats.rtxPayloadType, redPt = formats.redPayloadType
            let cap = pub.layerCap(preferredEncodingId: sub.preferredEncodingId)
            // `attachConsumer` sets the producer (the publication's, or its relayed stream's).
            var c = ConsumerParameters(producer: ProducerId(slot: 0, generation: 0), transport: TransportIndex(slot: 0, generation: 0), ssrc: ssrc,
                                       payloadType: pt, extensionIds: map, rtxSsrc: rtxSsrc, rtxPayloadType: rtxPt,
                                       redPayloadType: redPt, preferredLayer: cap)
            c.transportSequenceExtensionId = RtpHeaderExtension.transportWideCC.receiverId ?? 0
            c.pinned = sub.pinned
            _ = try await attachConsumer(sub, of: pub, for: member, on: tid, c, in: room)
        }
    }

    func endSubscription(_ sub: RoomSubscription, in room: Room, offerToSubscriber: Bool, reason: String? = nil) {
        if let c = sub.consumer { postSite(sub.site, room, .removeConsumer(c)) }
        sub.consumer = nil
        if let f = sub.forward { releaseForward(f, in: room) }
        sub.forward = nil
        if sub.contentType == "data" {
            let sid = sub.id
            workers[room.worker].post { $0.removeDataSubscription(sid) }
        }
        room.subscriptions.removeAll { $0 === sub }
        emit(room, "publicationUnsubscribed", ["subscription": sub.json], reason: reason)
        guard let member = room.member(sub.subscriberId) else { return }
        member.recvSlots.end(sub.id)
        if let i = member.mediaSession?.egress.firstIndex(where: { $0.subscriptionId == sub.id }) {
            // A WHEP m-section is kept for the publisher's next publication; no offer (the player cannot take one).
            member.mediaSession?.egress[i].subscriptionId = nil
            return
        }
        if offerToSubscriber && !member.removed { perform(member.receive.serverChanged(connected: member.channel != nil), for: member) }
    }

    // MARK: Offers

    /// How long the client has to answer a server offer before the next one may go out anyway.
    static let offerAnswerWait = Duration.seconds(10)

    /// Waits until this request may make the receive connection's next offer.
    func takeReceiveTurn(_ member: LocalSFURoomMember, _ room: Room) async throws -> WaiterToken {
        let token = newWaiterToken()
        switch member.receive.acquire(token) {
        case .proceed: return token
        case .closed: throw RoomError.memberNotFound(member.id)
        case .wait:
            guard await wait(token, on: member) else { throw RoomError.memberNotFound(member.id) }
            return token
        }
    }

    /// Builds the receive connection's current offer and records it as sent (by `holder`, or by
    /// the service itself for a notification), with its answer deadline armed.
    func makeReceiveOffer(_ member: LocalSFURoomMember, local: TransportDescription, by holder: WaiterToken?) -> SessionDescriptionText {
        member.recvVersion += 1
        member.recvSlots.offered(version: member.recvVersion)
        let data = member.recvSlots.data.map { ($0.mid, $0.position, configuration.data.maxMessageBytes) }
        let sdp = SdpNegotiation.receiveOffer(slots: member.recvSlots.slots, local: local, version: member.recvVersion,
                                              sessionId: member.sessionId, data: data)
        let deadline = clock.now + Self.offerAnswerWait
        member.receive.offerSent(by: holder, deadline: deadline)
        let memberId = member.id
        Task { [weak self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            await self?.offerDeadlinePassed(memberId: memberId)
        }
        return .init(type: "offer", sdp: sdp)
    }

    func offerDeadlinePassed(memberId: String) {
        guard let (_, member) = findMember(memberId) else { return }
        perform(member.receive.timedOut(now: clock.now, connected: member.channel != nil), for: member)
        flushOutbox()
    }

    /// Carries out what the receive negotiation asked for.
    func perform(_ actions: [ReceiveNegotiation<ContinuousClock.Instant>.Action], for member: LocalSFURoomMember) {
        for action in actions {
            switch action {
            case .proceed(let token): member.resume(token, true)
            case .fail(let token): member.resume(token, false)
            case .sendOffer: sendServerOffer(member)
            }
        }
    }

    /// An offer the server makes on its own, sent as the notification `offer`.
    private func sendServerOffer(_ member: LocalSFURoomMember) {
        guard member.mediaSession == nil, let local = member.recv.description else { return }
        guard let channel = member.channel else {
            perform(member.receive.serverChanged(connected: false), for: member)
            return
        }
        let offer = makeReceiveOffer(member, local: local, by: nil)
        outbox.append((channel, Self.notification("offer", ["memberId": .string(member.id), "offer": offer.json])))
    }
}
