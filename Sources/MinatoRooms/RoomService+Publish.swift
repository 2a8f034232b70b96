internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire
internal import Metrics

/// The send connection (the client offers, the server answers): publish, negotiate, the
/// publication methods, and what both connections share (their transports, trickled
/// candidates, worker calls).
extension RoomService {
    public func publish(_ r: PublishRequest, from channel: ClientChannel) async throws -> PublishResult {
        try await publish(r, parsed: nil, from: channel)
    }

    /// `publish` with `r.offer` read already when `parsed` is given (WHIP ingest publishes every
    /// m-section of one offer); else it is parsed here, off the actor (`parseClientSdp`).
    func publish(_ r: PublishRequest, parsed: ParsedSendOffer?, from channel: ClientChannel) async throws -> PublishResult {
        let (room, member) = try joinedMember(r.memberId, channel: channel)
        let contentType = r.contentType, mid = r.mid
        if contentType == "data" { return try await publishData(r, from: channel) }
        guard contentType == "audio" || contentType == "video" else {
            throw RoomError.invalidParameter("contentType must be \"audio\", \"video\" or \"data\".")
        }
        let metadata = try Validate.metadata(r.metadata, key: "metadata") ?? ""
        var cap = configuration.maxSubscribersCap
        if let limit = tokenSubscriberLimit(channel: channel, room: room) { cap = min(cap, limit) }
        let maxSubscribers = r.maxSubscribers ?? min(configuration.defaultMaxSubscribers, cap)
        guard (1...max(1, cap)).contains(maxSubscribers) else {
            throw RoomError.invalidParameter("maxSubscribers must be 1...\(cap) (the server's cap and the token's sfu.maxSubscribersLimit).")
        }
        let encodings = try Validate.encodings(r.encodings, key: "encodings", max: configuration.maxEncodings)
        let sd: SessionDescription
        if let parsed { sd = parsed.description } else { sd = try await parseClientSdp(r.offer) }
        guard let m = parsed?.section ?? sd.media.first(where: { $0.mid == mid }), m.mid == mid else {
            throw RoomError.invalidParameter("The offer has no m-line with mid '\(mid.prefix(64))'.")
        }
        guard m.kind == contentType else {
            throw RoomError.invalidParameter("m-line '\(mid)' is \(m.kind.prefix(32)), not \(contentType).")
        }
        guard m.port != 0, m.direction == .sendonly || m.direction == .sendrecv else {
            throw RoomError.invalidParameter("m-line '\(mid)' must be sendonly (or sendrecv) to publish.")
        }
        /// The member's publications may change while this request waits (for its transport and
        /// its producer): checked here, and again where the publication is committed.
        func check() throws(RoomError) {
            if room.publications.contains(where: { $0.publisherId == member.id && $0.stream?.mid == mid }) {
                throw .invalidParameter("m-line '\(mid)' is published already; unpublish it first.")
            }
            guard room.publications.filter({ $0.publisherId == member.id }).count < configuration.maxPublicationsPerMember else {
                throw .limitExceeded("A member may have at most \(configuration.maxPublicationsPerMember) publications (rooms.maxPublicationsPerMember).")
            }
        }
        try check()
        let stream = try SdpNegotiation.publishedStream(m)
        let layers = try Self.simulcastLayers(rids: stream.rids, encodings: encodings, max: configuration.maxEncodings)
        let (local, answer) = try await answerSendOffer(sd, remote: parsed?.remote, answers: parsed?.answers ?? true, of: member, in: room)
        let tid = local.id
        let kind: MediaKind = contentType == "audio" ? .audio : .video
        var parameters = ProducerParameters(transport: TransportIndex(slot: 0, generation: 0), kind: kind, ssrc: stream.ssrc,
                                            rtxSsrc: stream.rtxSsrc, payloadType: stream.codec.payloadType,
                                            clockRate: stream.codec.clockRate, codec: stream.codec.videoCodec,
                                            keyFrameRequest: stream.codec.keyFrameRequest, paused: !r.isEnabled,
                                            rtxPayloadType: stream.rtxPayloadType, redPayloadType: stream.redPayloadType,
                                            nack: stream.nack, rids: layers, ridExtensionId: stream.ridExtensionId,
                                            repairedRidExtensionId: stream.repairedRidExtensionId)
        parameters.transportSequenceExtensionId = stream.transportSequenceExtensionId
        parameters.audioLevelExtensionId = stream.audioLevelExtensionId
        let site = member.site
        let producer = try remoteProducer(await onSite(site, room, .addProducer(tid, parameters)))
        guard !member.removed, rooms.contains(where: { $0 === room }) else {
            postSite(site, room, .removeProducer(producer))
            throw RoomError.memberNotFound(member.id)
        }
        // Committed from here on, with no suspension: a request refused now leaves no producer.
        do { try check() } catch {
            postSite(site, room, .removeProducer(producer))
            throw error
        }
        // Simulcast without `encodings`: the layers are the publication's encodings, so
        // subscribers can name them (`preferredEncodingId`).
        let listed = encodings.isEmpty ? layers.map { Encoding(id: $0) } : encodings
        let pub = RoomPublication(id: newId(), publisherId: member.id, contentType: contentType,
                                  metadata: metadata, enabled: r.isEnabled, stream: stream, maxSubscribers: maxSubscribers,
                                  encodings: listed.map(\.json))
        pub.layers = layers
        pub.producer = producer
        pub.site = site
        room.publications.append(pub)
        emit(room, "streamPublished", ["publication": pub.json])
        await followPublication(pub, in: room)
        hearSpeaker(pub, in: room)
        return PublishResult(publication: pub.json, answer: .init(type: "answer", sdp: answer))
    }

    /// An offer `ingest` has read already: `publish` takes the m-line `section` of it and applies
    /// `remote`; it answers only when `answers` (a WHIP session is answered once, for the whole
    /// offer, after its last m-line is published), so publishing every m-line stays linear.
    struct ParsedSendOffer {
        let description: SessionDescription
        let section: MediaDescription
        let remote: RemoteTransportParameters
        let answers: Bool
    }

    /// A simulcast publication's layers, lowest first: the offer's RIDs in the order of the
    /// request's `encodings` (SkyWay lists them low to high), or in the offer's order without
    /// `encodings`. Every RID must be an encoding id then; at most `rooms.maxEncodings` layers.
    static func simulcastLayers(rids: [String], encodings: [Encoding], max: Int) throws(RoomError) -> [String] {
        guard !rids.isEmpty else { return [] }
        guard rids.count <= max else {
            throw .limitExceeded("The offer sends \(rids.count) simulcast layers; at most \(max) are allowed (rooms.maxEncodings).")
        }
        guard !encodings.isEmpty else { return rids }
        let ids = encodings.map(\.id)
        for rid in rids where !ids.contains(rid) {
            throw .invalidParameter("The offer's simulcast RID '\(rid)' is not one of \"encodings\" ids (\(ids.joined(separator: ", "))).")
        }
        return ids.filter { rids.contains($0) }
    }

    /// Renegotiates the send connection without publishing (after an unpublish, say).
    public func negotiate(memberId: String, offer: String, from channel: ClientChannel) async throws -> SessionDescriptionText {
        let (room, member) = try joinedMember(memberId, channel: channel)
        let (_, answer) = try await answerSendOffer(try await parseClientSdp(offer), of: member, in: room)
        return .init(type: "answer", sdp: answer)
    }

    /// Answers the client's offer on the send connection: its transport (made on first use),
    /// the client's parameters (`remote`, read from `sd` when not given) applied once, and the
    /// next answer version (none made, "" returned, unless `answers`).
    func answerSendOffer(_ sd: SessionDescription, remote given: RemoteTransportParameters? = nil, answers: Bool = true,
                                 of member: LocalSFURoomMember, in room: Room) async throws -> (TransportDescription, String) {
        let remote = try given ?? SdpNegotiation.remoteTransport(of: sd, maxCandidates: configuration.maxRemoteCandidates)
        var local = try await transport(.send, of: member, in: room)
        // An offer with new ICE credentials restarts ICE on the send connection (JSEP's
        // `iceRestart`): the answer carries the server's new credentials and candidates.
        if try member.send.restarts(ufrag: remote.iceUfrag, fingerprint: "\(remote.fingerprintAlgorithm) \(remote.fingerprint)") {
            local = try await restartIce(.send, of: member, in: room, transport: local.id)
        }
        try await applyRemoteOnce(remote, .send, of: member, in: room, transport: local.id)
        try stillJoined(member, room)
        guard answers else { return (local, "") }
        member.sendVersion += 1
        let answer = try SdpNegotiation.answerPublisherOffer(sd, local: local, version: member.sendVersion, sessionId: member.sessionId,
                                                             maxMessageSize: member.mediaSession == nil ? configuration.data.maxMessageBytes : nil)
        // A data-channel section taken in the answer: the transport's SCTP association.
        // (Not on another node's transport: data publications there are refused.)
        if member.mediaSession == nil, member.site == .home, let m = sd.media.first(where: SdpData.isDataChannelSection) {
            let port = SdpData.sctpPort(m), tid = local.id
            try await onWorker(room) { core in try core.enableData(on: tid, remotePort: port) }
        }
        return (local, answer)
    }

    public func unpublish(publicationId: String, from channel: ClientChannel) throws {
        let (room, pub) = try ownPublication(publicationId, channel: channel)
        unpublish(pub, in: room)
    }

    public func setPublicationEnabled(publicationId: String, _ enabled: Bool, from channel: ClientChannel) throws {
        let (room, pub) = try ownPublication(publicationId, channel: channel)
        setEnabled(pub, enabled, in: room)
    }

    public func updatePublicationMetadata(publicationId: String, metadata: String, from channel: ClientChannel) throws {
        let (room, pub) = try ownPublication(publicationId, channel: channel)
        pub.metadata = try Validate.metadata(metadata, key: "metadata") ?? ""
        emit(room, "publicationMetadataUpdated", ["publication": pub.json])
    }

    /// Enables (forwarding resumes with a keyframe request) or disables (forwarding stops) a publication.
    func setEnabled(_ pub: RoomPublication, _ enable: Bool, in room: Room) {
        guard pub.enabled != enable else { return }
        pub.enabled = enable
        if let p = pub.producer { postSite(pub.site, room, .setPaused(p, !enable)) }
        for f in room.forwards.values where f.key.publication == pub.id {
            if let p = f.producer { postSite(f.key.site, room, .setPaused(p, !enable)) }
        }
        if pub.data != nil { let pid = pub.id; workers[room.worker].post { $0.setDataPublicationEnabled(pid, enable) } }
        emit(room, enable ? "publicationEnabled" : "publicationDisabled", ["publication": pub.json])
    }

    /// Ends a publication: subscriptions end (events), `streamUnpublished`, new offers to subscribers.
    func unpublish(_ pub: RoomPublication, in room: Room) {
        for sub in room.subscriptions where sub.publicationId == pub.id { endSubscription(sub, in: room, offerToSubscriber: true) }
        recordedPublicationEnded(pub.id, reason: "publicationEnded")
        plainEgressPublicationEnded(pub.id)
        plainIngressPublicationEnded(pub.id)
        playbackPublicationEnded(pub.id)
        stopForwards(of: pub, in: room)
        if let producer = pub.producer { postSite(pub.site, room, .removeProducer(producer)) }
        if pub.data != nil { let pid = pub.id; workers[room.worker].post { $0.removeDataPublication(pid) } }
        room.publications.removeAll { $0 === pub }
        emit(room, "streamUnpublished", ["publication": pub.json])
    }

    // MARK: Trickled candidates

    /// A candidate the client trickled for one of its connections (nil = end of candidates):
    /// held until the client's description has been applied, then handed to the transport.
    public func addIceCandidate(memberId: String, direction: ConnectionDirection, candidate: String?,
                                from channel: ClientChannel) async throws {
        let (room, member) = try joinedMember(memberId, channel: channel)
        let candidate = try Validate.candidate(candidate)
        let max = configuration.maxRemoteCandidates, held = configuration.maxPendingCandidateBytes
        let action = try member.mutateTransport(direction) { t throws(RoomError) in try t.trickle(candidate, maxCount: max, maxHeldBytes: held) }
        guard case .apply(let d, let c) = action else { return }
        _ = try await onSite(member.site, room, .addRemoteCandidate(d.id, c))
    }

    // MARK: Transports

    /// The member's transport for `direction`, created on first use. A request that needs it
    /// while another creates it waits to be resumed by that creation.
    func transport(_ direction: ConnectionDirection, of member: LocalSFURoomMember, in room: Room) async throws -> TransportDescription {
        while true {
            let token = newWaiterToken()
            switch member.mutateTransport(direction, { $0.need(token) }) {
            case .ready(let d):
                return d
            case .wait:
                guard await wait(token, on: member) else { throw RoomError.memberNotFound(member.id) }
                try stillJoined(member, room)
            case .create:
                do {
                    let d = try await createTransport(for: member, in: room)
                    for t in member.mutateTransport(direction, { $0.created(d) }) { member.resume(t, true) }
                    // The member's other connection runs over the same path: its measured round
                    // trip paces NACKs on this one too (a publisher's transport measures none).
                    if let other = (direction == .send ? member.recv : member.send).description?.id {
                        postSite(member.site, room, .pairTransports(d.id, other))
                    }
                    return d
                } catch {
                    for t in member.mutateTransport(direction, { $0.failed() }) { member.resume(t, true) }
                    throw error
                }
            }
        }
    }

    private func createTransport(for member: LocalSFURoomMember, in room: Room) async throws -> TransportDescription {
        guard transportOwners.count + transportsBeingCreated < configuration.maxTransports else {
            throw RoomError.limitExceeded("The server has its maximum of \(configuration.maxTransports) media transports (media.maxTransports).")
        }
        if member.site != .home {
            // Made on the node the member is served by; that node counts it against its limit.
            let d = try remoteTransport(await onSite(member.site, room, .createTransport(role: .client)))
            if member.removed || !rooms.contains(where: { $0 === room }) {
                postSite(member.site, room, .closeTransport(d.id))
                throw RoomError.memberNotFound(member.id)
            }
            return d
        }
        transportsBeingCreated += 1
        defer { transportsBeingCreated -= 1 }
        let id = TransportId(nextTransportId)
        nextTransportId &+= 1
        let description = try remoteTransport(await onSite(.home, room, .createTransport(role: .client), newTransport: id))
        if member.removed || !rooms.contains(where: { $0 === room }) {
            workers[room.worker].post { $0.closeTransport(id) }
            throw RoomError.memberNotFound(member.id)
        }
        transportOwners[id] = (room.id, member.id)
        return description
    }

    /// Applies the client's ICE/DTLS parameters, with the candidates held so far, the first time
    /// only; the description's candidates count with the trickled ones (`media.maxRemoteCandidates`).
    func applyRemoteOnce(_ remote: RemoteTransportParameters, _ direction: ConnectionDirection,
                         of member: LocalSFURoomMember, in room: Room, transport id: TransportId) async throws {
        let count = remote.candidates.count, max = configuration.maxRemoteCandidates
        let ufrag = remote.iceUfrag, fingerprint = "\(remote.fingerprintAlgorithm) \(remote.fingerprint)"
        guard let held = try member.mutateTransport(direction, { t throws(RoomError) in
            try t.applyRemote(candidates: count, maxCount: max, ufrag: ufrag, fingerprint: fingerprint)
        }) else { return }
        var remote = remote
        for c in held {
            if let c { remote.candidates.append(c) } else { remote.endOfCandidates = true }
        }
        _ = try await onSite(member.site, room, .setRemote(id, remote))
    }

    /// Restarts ICE on the member's transport for `direction` (`WorkerCore.restartIce`) and
    /// returns its new description; the client's next description is applied to it.
    func restartIce(_ direction: ConnectionDirection, of member: LocalSFURoomMember, in room: Room,
                    transport id: TransportId) async throws -> TransportDescription {
        let d = try remoteTransport(await onSite(member.site, room, .restartIce(id)))
        try stillJoined(member, room)
        guard member.mutateTransport(direction, { $0.description?.id }) == id else {
            throw RoomError.internalError("The connection changed during the ICE restart; try again.")
        }
        member.mutateTransport(direction) { $0.restarted(d) }
        Counter(label: "minato_ice_restarts_requested_total", dimensions: [("direction", direction.rawValue)]).increment()
        logger.info("ICE restart", metadata: ["member": "\(member.id)", "direction": "\(direction.rawValue)", "transport": "\(id)"])
        return d
    }

    /// Data channels run on the room's home node only (for now): a member served by another
    /// node (`cluster.cascade`) gets a clear error.
    func dataServedHere(_ member: LocalSFURoomMember) throws(RoomError) {
        guard member.site == .home else {
            throw RoomError.invalidParameter("Data channels are not available to a member served by another node of the cluster (cluster.cascade) yet.")
        }
    }

    /// Runs `body` on the room's media worker; its failures become `RoomError`s with sentences
    /// (the details go to the log).
    func onWorker<T: Sendable>(_ room: Room, _ body: @escaping @Sendable (WorkerCore) throws -> T) async throws(RoomError) -> T {
        do {
            return try await workers[room.worker].perform(body)
        } catch let e as RoomError {
            throw e
        } catch WorkerError.noFreePort {
            throw RoomError(code: 503, name: "limitExceeded",
                            detail: "Every UDP port of media.ice.portMin...media.ice.portMax is in use; try again later.")
        } catch WorkerError.media(.ssrcInUse(let ssrc)) {
            throw RoomError.invalidParameter("SSRC \(ssrc) is already published on this connection; each stream needs its own.")
        } catch {
            logger.error("media worker refused a change", metadata: ["room": "\(room.id)", "error": "\(error)"])
            throw RoomError.internalError("The media worker could not make this change (no free UDP port, or a bad transport state); try again.")
        }
    }

    /// Suspends the calling request until `member.resume(token, …)`; true = go on, false = the member is gone.
    func wait(_ token: WaiterToken, on member: LocalSFURoomMember) async -> Bool {
        if member.removed { return false }
        return await withCheckedContinuation { member.waiters[token] = $0 }
    }

    func newWaiterToken() -> WaiterToken {
        nextWaiterToken &+= 1
        return nextWaiterToken
    }
}

extension LocalSFURoomMember {
    func mutateTransport<R, E: Error>(_ direction: ConnectionDirection, _ body: (inout PeerTransport) throws(E) -> R) throws(E) -> R {
        switch direction {
        case .send: return try body(&send)
        case .recv: return try body(&recv)
        }
    }
}
