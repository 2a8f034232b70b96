internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire

/// Media methods: publish / negotiate (the send connection, client offers), subscribe /
/// unsubscribe / answer (the receive connection, server offers), trickled candidates, and the
/// engine commands behind them.
extension RoomService {
    func publish(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let contentType = try p.string("contentType")
        guard contentType == "audio" || contentType == "video" else {
            throw RoomError.invalidParameter("contentType must be \"audio\" or \"video\".")
        }
        let mid = try p.string("mid")
        let sdp = try p.sessionDescription("offer", type: "offer")
        let metadata = try p.metadata("metadata") ?? ""
        let enabled = try p.optionalBool("isEnabled") ?? true
        var cap = configuration.maxSubscribersCap
        if let limit = tokenSubscriberLimit(channel: channel, room: room) { cap = min(cap, limit) }
        let maxSubscribers = try p.optionalInt("maxSubscribers") ?? min(configuration.defaultMaxSubscribers, cap)
        guard (1...max(1, cap)).contains(maxSubscribers) else {
            throw RoomError.invalidParameter("maxSubscribers must be 1...\(cap) (the server's cap and the token's sfu.maxSubscribersLimit).")
        }
        let encodings = try p.encodings("encodings", max: configuration.maxEncodings)
        let sd = try SdpNegotiation.parse(sdp)
        guard let m = sd.media.first(where: { $0.mid == mid }) else {
            throw RoomError.invalidParameter("The offer has no m-line with mid '\(mid)'.")
        }
        guard m.kind == contentType else {
            throw RoomError.invalidParameter("m-line '\(mid)' is \(m.kind), not \(contentType).")
        }
        guard m.port != 0, m.direction == .sendonly || m.direction == .sendrecv else {
            throw RoomError.invalidParameter("m-line '\(mid)' must be sendonly (or sendrecv) to publish.")
        }
        if room.publications.contains(where: { $0.publisherId == member.id && $0.stream.mid == mid }) {
            throw RoomError.invalidParameter("m-line '\(mid)' is published already; unpublish it first.")
        }
        guard room.publications.filter({ $0.publisherId == member.id }).count < configuration.maxPublicationsPerMember else {
            throw RoomError.limitExceeded("A member may have at most \(configuration.maxPublicationsPerMember) publications (rooms.maxPublicationsPerMember).")
        }
        let stream = try SdpNegotiation.publishedStream(m)
        let remote = try SdpNegotiation.remoteTransport(of: sd)
        let local = try await ensureTransport(member, room: room, direction: "send")
        try stillJoined(member, room)
        if !member.sendRemoteApplied {
            member.sendRemoteApplied = true
            try await applyRemote(remote, to: local.id, member: member, room: room, direction: "send")
        }
        member.sendVersion += 1
        let answer = try SdpNegotiation.answerPublisherOffer(sd, local: local, version: member.sendVersion, sessionId: member.sessionId)
        let tid = local.id
        var ids = ExtensionIdMap()
        for (pub, sub) in stream.extensionIds { ids[pub] = sub }
        let extensionIds = ids
        let kind: MediaKind = contentType == "audio" ? .audio : .video
        let producer = try await workers[room.worker].perform { core in
            try core.addProducer(on: tid) { index in
                ProducerParameters(transport: index, kind: kind, ssrc: stream.ssrc, rtxSsrc: stream.rtxSsrc,
                                   payloadType: stream.codec.payloadType, clockRate: UInt32(exactly: stream.codec.clockRate) ?? 90_000,
                                   codec: stream.codec.videoCodec, keyFrameRequest: stream.codec.keyFrameRequest,
                                   paused: !enabled)
            }
        }
        _ = extensionIds
        guard !member.removed else {
            workers[room.worker].post { $0.removeProducer(producer) }
            throw RoomError.memberNotFound(member.id)
        }
        let pub = RoomPublication(id: UUID().uuidString.lowercased(), publisherId: member.id, contentType: contentType,
                                  metadata: metadata, enabled: enabled, stream: stream, maxSubscribers: maxSubscribers,
                                  encodings: encodings)
        pub.producer = producer
        room.publications.append(pub)
        emit(room, "streamPublished", ["publication": pub.json])
        return ["publication": pub.json, "answer": ["type": "answer", "sdp": .string(answer)]]
    }

    func negotiate(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let sd = try SdpNegotiation.parse(try p.sessionDescription("offer", type: "offer"))
        let remote = try SdpNegotiation.remoteTransport(of: sd)
        let local = try await ensureTransport(member, room: room, direction: "send")
        try stillJoined(member, room)
        if !member.sendRemoteApplied {
            member.sendRemoteApplied = true
            try await applyRemote(remote, to: local.id, member: member, room: room, direction: "send")
        }
        member.sendVersion += 1
        let answer = try SdpNegotiation.answerPublisherOffer(sd, local: local, version: member.sendVersion, sessionId: member.sessionId)
        return ["answer": ["type": "answer", "sdp": .string(answer)]]
    }

    /// Enables (forwarding resumes with a keyframe request) or disables (forwarding stops) a publication.
    func setEnabled(_ pub: RoomPublication, _ enable: Bool, in room: Room) {
        guard pub.enabled != enable else { return }
        pub.enabled = enable
        if let p = pub.producer { workers[room.worker].post { $0.setPaused(p, !enable) } }
        emit(room, enable ? "publicationEnabled" : "publicationDisabled", ["publication": pub.json])
    }

    /// Ends a publication: subscriptions end (events), `streamUnpublished`, new offers to subscribers.
    func unpublish(_ pub: RoomPublication, in room: Room) {
        for sub in room.subscriptions where sub.publicationId == pub.id { endSubscription(sub, in: room, offerToSubscriber: true) }
        if let producer = pub.producer { workers[room.worker].post { $0.removeProducer(producer) } }
        room.publications.removeAll { $0 === pub }
        emit(room, "streamUnpublished", ["publication": pub.json])
    }

    // MARK: Subscriptions

    func subscribe(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let pid = try p.string("publicationId")
        let preferred = try p.optionalString("preferredEncodingId")
        try Params.checkPreferredEncoding(preferred, of: room.publication(pid))
        func check() throws -> RoomPublication {
            guard let pub = room.publication(pid) else { throw RoomError.publicationNotFound(pid) }
            if pub.publisherId == member.id { throw RoomError.cannotSubscribeOwnPublication() }
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
        let local = try await ensureTransport(member, room: room, direction: "recv")
        await waitForReceiveIdle(member)
        try stillJoined(member, room)
        let pub = try check()
        let mid = String(member.nextMid)
        member.nextMid += 1
        let ssrc = UInt32.random(in: 1...UInt32.max)
        let sub = RoomSubscription(id: UUID().uuidString.lowercased(), publicationId: pub.id, subscriberId: member.id,
                                   contentType: pub.contentType, mid: mid, ssrc: ssrc, preferredEncodingId: preferred)
        member.recvSlots.append(ReceiveSlot(mid: mid, kind: pub.contentType, codec: pub.stream.codec, subscriptionId: sub.id,
                                            ssrc: ssrc, streamId: pub.publisherId, trackId: pub.id, cname: "minato-\(pub.publisherId.prefix(8))"))
        room.subscriptions.append(sub)
        let offer = receiveOffer(member, local: local)
        member.recvOfferPending = true
        emit(room, "publicationSubscribed", ["subscription": sub.json])
        return ["subscription": sub.json, "mid": .string(mid), "offer": ["type": "offer", "sdp": .string(offer)]]
    }

    func unsubscribe(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMemberOfSubscription(p, channel: channel)
        let sid = try p.string("subscriptionId")
        guard let sub = room.subscription(sid), sub.subscriberId == member.id else { throw RoomError.subscriptionNotFound(sid) }
        await waitForReceiveIdle(member)
        try stillJoined(member, room)
        guard room.subscription(sid) != nil else { throw RoomError.subscriptionNotFound(sid) }
        endSubscription(sub, in: room, offerToSubscriber: false)
        guard let local = member.recvTransport else { return [:] }
        let offer = receiveOffer(member, local: local)
        member.recvOfferPending = true
        member.recvNeedsOffer = false
        return ["offer": ["type": "offer", "sdp": .string(offer)]]
    }

    func endSubscription(_ sub: RoomSubscription, in room: Room, offerToSubscriber: Bool) {
        if let c = sub.consumer { workers[room.worker].post { $0.removeConsumer(c) } }
        room.subscriptions.removeAll { $0 === sub }
        emit(room, "publicationUnsubscribed", ["subscription": sub.json])
        guard let member = room.member(sub.subscriberId) else { return }
        if let i = member.recvSlots.firstIndex(where: { $0.subscriptionId == sub.id }) { member.recvSlots[i].subscriptionId = nil }
        if offerToSubscriber && !member.removed { scheduleOffer(member) }
    }

    func answer(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let sd = try SdpNegotiation.parse(try p.sessionDescription("answer", type: "answer"))
        guard member.recvOfferPending, let local = member.recvTransport else {
            throw RoomError.invalidParameter("No server offer is waiting for an answer from this member.")
        }
        let remote = try SdpNegotiation.remoteTransport(of: sd)
        if !member.recvRemoteApplied {
            member.recvRemoteApplied = true
            try await applyRemote(remote, to: local.id, member: member, room: room, direction: "recv")
        }
        try stillJoined(member, room)
        member.recvOfferPending = false
        // Streams the client has now accepted start flowing.
        let worker = workers[room.worker]
        let tid = local.id
        for sub in room.subscriptions where sub.subscriberId == member.id && sub.consumer == nil {
            guard let pub = room.publication(sub.publicationId), let producer = pub.producer else { continue }
            var ids = ExtensionIdMap()
            for (publisherId, subscriberId) in pub.stream.extensionIds { ids[publisherId] = subscriberId }
            let map = ids
            let ssrc = sub.ssrc, pt = pub.stream.codec.payloadType
            let consumer = try await worker.perform { core in
                try core.addConsumer(on: tid) { index in
                    ConsumerParameters(producer: producer, transport: index, ssrc: ssrc, payloadType: pt, extensionIds: map)
                }
            }
            if room.subscription(sub.id) == nil { worker.post { $0.removeConsumer(consumer) } } else { sub.consumer = consumer }
        }
        if member.recvNeedsOffer {
            member.recvNeedsOffer = false
            sendOffer(member)
        }
        return [:]
    }

    func iceCandidate(_ p: Params, channel: ClientChannel) async throws -> JSONValue {
        let (room, member) = try joinedMember(p, channel: channel)
        let direction = try p.string("direction")
        guard direction == "send" || direction == "recv" else {
            throw RoomError.invalidParameter("direction must be \"send\" or \"recv\".")
        }
        guard case .object(let c)? = p.raw["candidate"], let text = c["candidate"]?.stringValue else {
            throw RoomError.invalidParams("candidate must be {candidate, sdpMid, sdpMLineIndex}.")
        }
        guard text.utf8.count <= RoomConfiguration.maxCandidateLineBytes else {
            throw RoomError.invalidParameter("The candidate is \(text.utf8.count) bytes; a candidate line may be at most \(RoomConfiguration.maxCandidateLineBytes).")
        }
        let value: String? = text.isEmpty ? nil : text
        if let value, !value.hasPrefix("candidate:") && !value.hasPrefix("a=candidate:") {
            throw RoomError.invalidParameter("'\(value.prefix(80))' is not an ICE candidate line (it must start with 'candidate:').")
        }
        let count = member.remoteCandidateCount[direction] ?? 0
        guard count < configuration.maxRemoteCandidates else {
            throw RoomError.limitExceeded("This member has trickled \(count) \(direction) candidates, the maximum (media.maxRemoteCandidates).")
        }
        let transport = direction == "send" ? member.sendTransport : member.recvTransport
        let applied = direction == "send" ? member.sendRemoteApplied : member.recvRemoteApplied
        guard let transport, applied else {
            let bytes = (member.pendingCandidateBytes[direction] ?? 0) + text.utf8.count
            guard bytes <= configuration.maxPendingCandidateBytes else {
                throw RoomError.limitExceeded("Candidates held for a \(direction) transport that does not exist yet may total \(configuration.maxPendingCandidateBytes) bytes (media.maxPendingCandidateBytes).")
            }
            member.pendingCandidates[direction, default: []].append(value)
            member.pendingCandidateBytes[direction] = bytes
            member.remoteCandidateCount[direction] = count + 1
            return [:]
        }
        member.remoteCandidateCount[direction] = count + 1
        let id = transport.id
        try await workers[room.worker].perform { core in try core.addRemoteCandidate(id, value) }
        return [:]
    }

    // MARK: Negotiation helpers

    /// The member's transport for `direction`, created on first use. A second request that
    /// needs it while it is being created waits for that creation (resumed by it, no polling).
    func ensureTransport(_ member: LocalSFURoomMember, room: Room, direction: String) async throws -> TransportDescription {
        while true {
            if let t = direction == "send" ? member.sendTransport : member.recvTransport { return t }
            let creating = direction == "send" ? member.creatingSend : member.creatingRecv
            if !creating { break }
            await withCheckedContinuation { member.transportWaiters.append($0) }
            try stillJoined(member, room)
        }
        guard transportOwners.count + transportsBeingCreated < configuration.maxTransports else {
            throw RoomError.limitExceeded("The server has its maximum of \(configuration.maxTransports) media transports (media.maxTransports).")
        }
        if direction == "send" { member.creatingSend = true } else { member.creatingRecv = true }
        transportsBeingCreated += 1
        defer {
            transportsBeingCreated -= 1
            if direction == "send" { member.creatingSend = false } else { member.creatingRecv = false }
            member.resumeTransportWaiters()
        }
        let id = TransportId(nextTransportId)
        nextTransportId &+= 1
        let router = room.router
        let description: TransportDescription
        do {
            description = try await workers[room.worker].perform { core in try core.createTransport(id: id, router: router) }
        } catch {
            logger.error("transport creation failed", metadata: ["member": "\(member.id)", "error": "\(error)"])
            throw RoomError.internalError("The server could not open a media transport (no free UDP port, or the worker failed); try again later.")
        }
        if member.removed {
            workers[room.worker].post { $0.closeTransport(id) }
            throw RoomError.memberNotFound(member.id)
        }
        transportOwners[id] = (room.id, member.id)
        if direction == "send" { member.sendTransport = description } else { member.recvTransport = description }
        return description
    }

    func applyRemote(_ remote: RemoteTransportParameters, to id: TransportId, member: LocalSFURoomMember,
                     room: Room, direction: String) async throws {
        var remote = remote
        for c in member.pendingCandidates[direction] ?? [] {
            if let c { remote.candidates.append(c) } else { remote.endOfCandidates = true }
        }
        member.pendingCandidates[direction] = []
        member.pendingCandidateBytes[direction] = 0
        let r = remote
        try await workers[room.worker].perform { core in try core.setRemote(id, r) }
    }

    /// Waits until the member's pending receive offer is answered (or the member leaves), at
    /// most `offerAnswerWait`; then the caller goes on as if it had been answered. Waiters are
    /// resumed by `answer` (or removal) and check again: only one of them may make the next offer.
    func waitForReceiveIdle(_ member: LocalSFURoomMember) async {
        let deadline = clock.now + Self.offerAnswerWait
        let memberId = member.id
        while member.recvOfferPending, !member.removed, clock.now < deadline {
            nextWaiterToken &+= 1
            let token = nextWaiterToken
            await withCheckedContinuation { continuation in
                member.idleWaiters.append((token, continuation))
                Task { [weak self] in
                    try? await Task.sleep(until: deadline, clock: .continuous)
                    await self?.stopWaiting(memberId: memberId, token: token)
                }
            }
        }
    }

    static let offerAnswerWait = Duration.seconds(10)

    func stopWaiting(memberId: String, token: UInt64) {
        guard let (_, member) = findMember(memberId),
              let i = member.idleWaiters.firstIndex(where: { $0.token == token }) else { return }
        member.idleWaiters.remove(at: i).continuation.resume()
    }

    func receiveOffer(_ member: LocalSFURoomMember, local: TransportDescription) -> String {
        member.recvVersion += 1
        let mids = member.recvSlots.map(\.mid)
        var lines = SdpNegotiation.sessionHeader(version: member.recvVersion, sessionId: member.sessionId, mids: mids,
                                                 iceLite: local.iceLite)
        for (i, slot) in member.recvSlots.enumerated() { lines += slot.lines(local: local, candidates: i == 0) }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// A server-made offer (not a reply) goes out when no other offer awaits an answer.
    func scheduleOffer(_ member: LocalSFURoomMember) {
        if member.recvOfferPending { member.recvNeedsOffer = true } else { sendOffer(member) }
    }

    func sendOffer(_ member: LocalSFURoomMember) {
        guard let local = member.recvTransport, let channel = member.channel else {
            member.recvNeedsOffer = true
            return
        }
        let offer = receiveOffer(member, local: local)
        member.recvOfferPending = true
        let note: JSONValue = ["jsonrpc": "2.0", "method": "offer",
                               "params": ["memberId": .string(member.id), "offer": ["type": "offer", "sdp": .string(offer)]]]
        outbox.append((channel, note.serialized()))
    }

}
