internal import MinatoTransport
internal import MinatoMedia

/// The operator's view and levers (the REST admin API under /v1). Every call returns the JSON
/// body of its response or throws a `RoomError` (mapped to the HTTP status of its code).
/// Changes emit the same room events as the signaling methods do.
extension RoomService {
    public func adminListRooms() -> JSONValue {
        ["rooms": .array(rooms.map { room in
            var o = room.summaryJSON.objectValue ?? [:]
            o["publicationCount"] = .int(room.publications.count)
            o["subscriptionCount"] = .int(room.subscriptions.count)
            o["version"] = .int(room.version)
            return .object(o)
        })]
    }

    /// A room made by the admin API; with `keepWhenEmpty` it stays when it has no member for
    /// `rooms.emptyTimeoutSec` (other rooms close then).
    public func adminCreateRoom(name: String?, metadata: String?, password: String?,
                                keepWhenEmpty: Bool = false) async throws(RoomError) -> JSONValue {
        _ = try Validate.name(name, key: "name")
        _ = try Validate.metadata(metadata, key: "metadata")
        _ = try Validate.password(password, key: "password")
        func check() throws(RoomError) {
            if let name, rooms.contains(where: { $0.name == name }) { throw RoomError.roomNameDuplicated(name) }
            try checkRoomLimits(channel: nil)
        }
        try check()
        let hash = await hashPassword(password)
        try check()
        let room = makeRoom(name: name, metadata: metadata ?? "", password: hash, keepWhenEmpty: keepWhenEmpty)
        return ["room": room.json]
    }

    public func adminGetRoom(_ roomId: String) throws(RoomError) -> JSONValue {
        ["room": try adminRoom(roomId).json]
    }

    public func adminUpdateRoomMetadata(_ roomId: String, metadata: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        _ = try Validate.metadata(metadata, key: "metadata")
        room.metadata = metadata
        emit(room, "metadataUpdated", ["room": room.summaryJSON])
        flushOutbox()
        return ["room": room.json]
    }

    /// Closes the room: members leave with `roomClosed`, everyone sees `closed`, transports
    /// close (their UDP ports are released by the worker).
    public func adminCloseRoom(_ roomId: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        close(room)
        flushOutbox()
        return [:]
    }

    public func adminMembers(_ roomId: String) throws(RoomError) -> JSONValue {
        ["members": .array(try adminRoom(roomId).members.map(adminMemberJSON))]
    }

    public func adminMember(_ roomId: String, _ memberId: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let m = room.member(memberId) else { throw RoomError.memberNotFound(memberId) }
        return ["member": adminMemberJSON(m)]
    }

    /// Removes the member with reason `kicked`; its socket is told (the `memberLeft` event) and
    /// closed with code 4000.
    public func adminKick(_ roomId: String, _ memberId: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let m = room.member(memberId) else { throw RoomError.memberNotFound(memberId) }
        kick(m, from: room)
        return [:]
    }

    /// Removes the member holding `name` (a ghost after a crash, say) with reason `kicked`, so
    /// the name is free at once.
    public func adminEvict(_ roomId: String, name: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let m = room.members.first(where: { $0.name == name }) else {
            throw RoomError(code: 404, name: "memberNotFound", detail: "No member named '\(name)' is in the room.")
        }
        kick(m, from: room)
        return ["member": m.json]
    }

    func kick(_ m: LocalSFURoomMember, from room: Room) {
        let channel = m.channel
        removeMember(m, from: room, reason: "kicked")
        flushOutbox()
        if let channel, !rooms.contains(where: { $0.members.contains { $0.channel?.id == channel.id } }) {
            channel.close(4000, "kicked: an operator removed this member")
        }
    }

    public func adminPublications(_ roomId: String) throws(RoomError) -> JSONValue {
        ["publications": .array(try adminRoom(roomId).publications.map(\.json))]
    }

    public func adminUnpublish(_ roomId: String, _ publicationId: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let pub = room.publication(publicationId) else { throw RoomError.publicationNotFound(publicationId) }
        unpublish(pub, in: room)
        flushOutbox()
        return [:]
    }

    public func adminSetPublicationEnabled(_ roomId: String, _ publicationId: String, enabled: Bool) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let pub = room.publication(publicationId) else { throw RoomError.publicationNotFound(publicationId) }
        setEnabled(pub, enabled, in: room)
        flushOutbox()
        return ["publication": pub.json]
    }

    public func adminSubscriptions(_ roomId: String) throws(RoomError) -> JSONValue {
        ["subscriptions": .array(try adminRoom(roomId).subscriptions.map(\.json))]
    }

    /// Ends a subscription; the subscriber gets `publicationUnsubscribed` and a new offer.
    public func adminCancelSubscription(_ roomId: String, _ subscriptionId: String) throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        guard let sub = room.subscription(subscriptionId) else { throw RoomError.subscriptionNotFound(subscriptionId) }
        endSubscription(sub, in: room, offerToSubscriber: true)
        flushOutbox()
        return [:]
    }

    /// Packets and bytes in (from publishers) and out (to subscribers) of the room's streams,
    /// and per stream what loss recovery did: each publication's loss, jitter, NACKs sent and
    /// packets recovered; each subscription's NACKs, resent packets and the subscriber's own
    /// report (fraction lost, cumulative loss, jitter) with the round-trip time; simulcast:
    /// each publication's layers and each subscription's current and target layer.
    public func adminRoomStats(_ roomId: String) async throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        // Each stream's statistics come from the site that serves it (cluster.cascade).
        var ps: [(String, ProducerStats)] = [], cs: [(String, ConsumerStats)] = []
        let sites = Set(room.publications.map(\.site)).union(room.subscriptions.map(\.site))
        for site in sites.sorted(by: { nodeName($0) < nodeName($1) }) {
            let pubs = room.publications.filter { $0.site == site && $0.producer != nil }
            let subs = room.subscriptions.filter { $0.site == site && $0.consumer != nil }
            guard !pubs.isEmpty || !subs.isEmpty,
                  case .stats(let p, let c)? = try? await onSite(site, room, .stats(producers: pubs.compactMap(\.producer),
                                                                                     consumers: subs.compactMap(\.consumer)))
            else { continue }
            for (pub, s) in zip(pubs, p) { if let s { ps.append((pub.id, s)) } }
            for (sub, s) in zip(subs, c) { if let s { cs.append((sub.id, s)) } }
        }
        var t: [UInt64] = [0, 0, 0, 0]
        for (_, s) in ps { t[0] &+= s.packetsReceived; t[1] &+= s.bytesReceived }
        for (_, s) in cs { t[2] &+= s.packetsSent; t[3] &+= s.bytesSent }
        let publications: [JSONValue] = ps.map { id, s in
            var o: [String: JSONValue] = ["publicationId": .string(id), "packetsReceived": .int(Int(clamping: s.packetsReceived)),
             "packetsLost": .int(Int(clamping: s.packetsLost)), "jitter": .int(Int(s.jitter)),
             "nacksSent": .int(Int(clamping: s.nacksSent)), "packetsRecovered": .int(Int(clamping: s.packetsRecovered)),
             "keyFrameRequests": .int(Int(clamping: s.keyFrameRequests)),
             "layers": .array(s.layers.map { l in
                 var o: [String: JSONValue] = ["rid": .string(l.rid), "packetsReceived": .int(Int(clamping: l.packetsReceived)),
                                               "bytesReceived": .int(Int(clamping: l.bytesReceived))]
                 if let ssrc = l.ssrc { o["ssrc"] = .int(Int(ssrc)) }
                o["temporalLayers"] = .int(l.temporalLayers)
                o["temporalBitrates"] = .array(l.temporalBitrates.map { .int($0) })
                 return .object(o)
             })]
            // Audio with RFC 6464 levels: the smoothed level (0...1 of full scale), whether the
            // publisher is a speaker now, and whether it is forwarded under rooms.audio.forwardLoudest.
            if let level = s.audioLevel {
                o["audioLevel"] = .double((Double(level) * 1000).rounded() / 1000)
                o["speaking"] = .bool(s.speaking)
                o["forwarded"] = .bool(s.audible)
            }
            return .object(o)
        }
        let subscriptions: [JSONValue] = cs.map { id, s in
            var o: [String: JSONValue] = [
                "subscriptionId": .string(id), "packetsSent": .int(Int(clamping: s.packetsSent)),
                "nacksReceived": .int(Int(clamping: s.nacksReceived)),
                "packetsRetransmitted": .int(Int(clamping: s.packetsRetransmitted)),
                "fractionLost": .double(Double(s.fractionLost) / 256), "packetsLost": .int(Int(s.packetsLost)),
                "jitter": .int(Int(s.jitter))]
            if let rtt = s.roundTripTime { o["roundTripTimeMs"] = .double(Double(rtt) / 1_000_000) }
            // The subscriber connection's bandwidth estimate, once its browser sent transport-wide feedback.
            if let estimate = s.estimate { o["estimateBps"] = .int(estimate) }
            // Simulcast: the layer forwarded (null before its first keyframe) and the one chosen.
            if let target = s.targetLayer {
                o["layer"] = s.layer.map { .int($0) } ?? .null
                o["targetLayer"] = .int(target)
                o["layerSwitches"] = .int(Int(clamping: s.layerSwitches))
                o["bandwidthLayer"] = s.bandwidthLayer.map { .int($0) } ?? .null
                // VP8 temporal layers: the highest forwarded and the one chosen (null: all).
                o["temporalLayer"] = s.temporalLayer.map { .int($0) } ?? .null
                o["targetTemporalLayer"] = s.targetTemporalLayer.map { .int($0) } ?? .null
                o["temporalLayerSwitches"] = .int(Int(clamping: s.temporalLayerSwitches))
            }
            return .object(o)
        }
        var out: [String: JSONValue] = [
            "roomId": .string(room.id), "members": .int(room.members.count),
            "publications": .int(room.publications.count), "subscriptions": .int(room.subscriptions.count),
            "packetsIn": .int(Int(clamping: t[0])), "bytesIn": .int(Int(clamping: t[1])),
            "packetsOut": .int(Int(clamping: t[2])), "bytesOut": .int(Int(clamping: t[3])),
            "publicationStats": .array(publications), "subscriptionStats": .array(subscriptions)]
        if mediaNodes != nil {
            // Rooms across nodes: the nodes serving the room, which one serves each member, and
            // the relays between them.
            out["nodes"] = .array(room.sites.map { nodeName($0) }.sorted().map { .string($0) })
            out["memberNodes"] = .array(room.members.map { ["memberId": .string($0.id), "nodeId": .string(nodeName($0.site))] })
            out["relays"] = .array(await relayStats(room))
        }
        return .object(out)
    }

    func adminRoom(_ id: String) throws(RoomError) -> Room {
        guard let r = rooms.first(where: { $0.id == id }) else { throw RoomError.roomNotFound("with id '\(id)'") }
        return r
    }

    func adminMemberJSON(_ m: LocalSFURoomMember) -> JSONValue {
        var o = m.json.objectValue ?? [:]
        o["connected"] = .bool(m.channel != nil)
        o["keepaliveIntervalSec"] = .int(m.keepaliveIntervalSec)
        o["keepaliveIntervalGapSec"] = .int(m.keepaliveIntervalGapSec)
        return .object(o)
    }
}
