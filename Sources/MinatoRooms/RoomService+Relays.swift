internal import MinatoMedia
internal import MinatoTransport
internal import Metrics

/// The two sites of a relay; `a` is the connecting side (full ICE, controlling, DTLS client):
/// the one whose node id sorts first.
struct RelayKey: Hashable, CustomStringConvertible {
    let a: MediaSite
    let b: MediaSite
    var description: String { "\(a)-\(b)" }
}

/// A publication sent to another site: its stream there is a producer of that site's relay
/// transport, fed by a consumer on the publication's site.
struct ForwardKey: Hashable {
    let publication: String
    let site: MediaSite
}

/// One relay between two sites of a room: a WebRTC transport on each (ICE, DTLS, SRTP), made
/// on first need and closed when no relayed stream uses it (`closeRelayIfIdle`). Owned by its
/// `Room`.
final class RoomRelay {
    let key: RelayKey
    var transports: [MediaSite: TransportId] = [:]
    /// Its setup (both transports made and given each other's parameters), and whether it
    /// finished.
    var ready: Task<Void, any Error>?
    var isSetUp = false
    let createdAt = ContinuousClock.now
    init(key: RelayKey) { self.key = key }
}

/// One publication sent over a relay to one site, shared by every subscription there:
/// reference-counted, and kept `cluster.relayLingerMs` after the last one ends.
final class RelayForward {
    let key: ForwardKey
    let source: MediaSite
    /// The producer on `key.site` its subscribers consume, once made.
    var ready: Task<ProducerId, any Error>?
    var producer: ProducerId?
    /// The consumers on `source`'s relay transport: one, or one per simulcast layer.
    var consumers: [ConsumerId] = []
    var users = 0
    var linger: Task<Void, Never>?
    init(key: ForwardKey, source: MediaSite) { self.key = key; self.source = source }
}

/// Relays between the sites of a room (CLUSTER.md "One room across nodes"): one per pair of
/// sites, made lazily from Minato's own transports, and one stream per (publication, site)
/// over it however many subscribers that site has. Keyframe requests travel back through each
/// hop's consumer and producer (each hop's keyframe requester coalesces them); NACK/RTX and
/// RTCP reports are per hop, as for any transport.
extension RoomService {
    func relayKey(_ x: MediaSite, _ y: MediaSite) -> RelayKey {
        nodeName(x) < nodeName(y) ? RelayKey(a: x, b: y) : RelayKey(a: y, b: x)
    }

    /// The producer `sub` on `site` consumes for `pub`: its own when it is on that site,
    /// otherwise the relayed stream's (made on first use; each call holds one reference,
    /// given back with `releaseForward`).
    func producer(of pub: RoomPublication, at site: MediaSite, in room: Room) async throws(RoomError) -> (ProducerId, ForwardKey?) {
        guard let p = pub.producer else { throw RoomError.internalError("The publication has no media stream.") }
        if pub.site == site { return (p, nil) }
        let key = ForwardKey(publication: pub.id, site: site)
        let f: RelayForward
        if let existing = room.forwards[key] {
            f = existing
        } else {
            f = RelayForward(key: key, source: pub.site)
            room.forwards[key] = f
            f.ready = Task { try await self.startForward(f, of: pub, producer: p, in: room) }
        }
        f.users += 1
        f.linger?.cancel()
        f.linger = nil
        do {
            guard let ready = f.ready else { throw RoomError.internalError("The relayed stream was stopped.") }
            return (try await ready.value, key)
        } catch {
            f.users -= 1
            if f.users <= 0, room.forwards[key] === f { stopForward(f, in: room) }
            if let e = error as? RoomError { throw e }
            throw RoomError.internalError("The stream could not be relayed to the node serving this member.")
        }
    }

    private func startForward(_ f: RelayForward, of pub: RoomPublication, producer p: ProducerId, in room: Room) async throws -> ProducerId {
        let started = clock.now
        let relay = try await relay(pub.site, f.key.site, in: room)
        guard let stream = pub.stream, let from = relay.transports[pub.site], let to = relay.transports[f.key.site] else {
            throw RoomError.internalError("The relay has no transport on one of its sites.")
        }
        // One stream per layer (a simulcast publication's every layer crosses; each node's
        // consumers choose among them), each with a media and an RTX SSRC of its own.
        let layers = max(pub.layers.count, 1)
        var ssrcs: [UInt32] = []
        for _ in 0..<layers {
            ssrcs.append(room.nextRelaySsrc)
            room.nextRelaySsrc = room.nextRelaySsrc &+ 2 == 0 ? 0x1000_0000 : room.nextRelaySsrc &+ 2
        }
        let kind: MediaKind = pub.contentType == "audio" ? .audio : .video
        let placeholder = TransportIndex(slot: 0, generation: 0)
        let rtx = stream.rtxPayloadType != nil
        var pp = ProducerParameters(transport: placeholder, kind: kind, ssrc: ssrcs[0], rtxSsrc: rtx ? ssrcs[0] &+ 1 : nil,
                                    payloadType: stream.codec.payloadType, clockRate: stream.codec.clockRate,
                                    codec: stream.codec.videoCodec, keyFrameRequest: kind == .video ? .pli : .none,
                                    paused: !pub.enabled, rtxPayloadType: stream.rtxPayloadType,
                                    redPayloadType: stream.redPayloadType, nack: stream.nack)
        if pub.layers.count > 1 {
            pp.rids = pub.layers
            pp.ridExtensionId = stream.ridExtensionId
            pp.layerSsrcs = ssrcs
            if rtx { pp.layerRtxSsrcs = ssrcs.map { $0 &+ 1 } }
        }
        // No transport-wide feedback on a relay: every layer crosses whatever an estimate of
        // the relay would say (the far node's subscribers have estimates of their own).
        pp.audioLevelExtensionId = stream.audioLevelExtensionId
        let relayed = try remoteProducer(await onSite(f.key.site, room, .addProducer(to, pp)))
        f.producer = relayed
        guard room.forwards[f.key] === f else {
            postSite(f.key.site, room, .removeProducer(relayed))
            throw RoomError.internalError("The relayed stream was stopped.")
        }
        for (layer, ssrc) in ssrcs.enumerated() {
            var cp = ConsumerParameters(producer: p, transport: placeholder, ssrc: ssrc, payloadType: stream.codec.payloadType,
                                        extensionIds: .identity, rtxSsrc: rtx ? ssrc &+ 1 : nil,
                                        rtxPayloadType: stream.rtxPayloadType, redPayloadType: stream.redPayloadType,
                                        preferredLayer: pub.layers.count > 1 ? layer : nil)
            // Every audio stream crosses (each site chooses its own loudest).
            cp.pinned = true
            let c = try remoteConsumer(await onSite(pub.site, room, .addConsumer(from, cp)))
            f.consumers.append(c)
            guard room.forwards[f.key] === f else {
                postSite(pub.site, room, .removeConsumer(c))
                throw RoomError.internalError("The relayed stream was stopped.")
            }
        }
        Counter(label: "minato_cluster_relay_forwards_total").increment()
        Timer(label: "minato_cluster_relay_forward_setup_seconds").recordNanoseconds(Self.nanoseconds(clock.now - started))
        logger.info("publication relayed", metadata: ["room": "\(room.id)", "publication": "\(pub.id)",
                                                       "from": "\(pub.site)", "to": "\(f.key.site)"])
        return relayed
    }

    static func nanoseconds(_ d: Duration) -> Int64 {
        let (s, atto) = d.components
        return s &* 1_000_000_000 &+ atto / 1_000_000_000
    }

    /// The relay between `x` and `y`, made (and connected) on first use.
    func relay(_ x: MediaSite, _ y: MediaSite, in room: Room) async throws -> RoomRelay {
        let key = relayKey(x, y)
        let relay: RoomRelay
        if let existing = room.relays[key] {
            relay = existing
        } else {
            relay = RoomRelay(key: key)
            room.relays[key] = relay
            relay.ready = Task { try await self.setUp(relay, in: room) }
        }
        guard let ready = relay.ready else { throw RoomError.internalError("The relay was closed.") }
        try await ready.value
        return relay
    }

    private func setUp(_ relay: RoomRelay, in room: Room) async throws {
        let started = clock.now
        do {
            let client = relay.key.a, server = relay.key.b
            let c = try remoteTransport(await onSite(client, room, .createTransport(role: .relayClient),
                                                     newTransport: newRelayTransportId(client)))
            relay.transports[client] = c.id
            let s = try remoteTransport(await onSite(server, room, .createTransport(role: .relayServer),
                                                     newTransport: newRelayTransportId(server)))
            relay.transports[server] = s.id
            guard room.relays[relay.key] === relay else { throw RoomError.internalError("The relay was closed.") }
            _ = try await onSite(server, room, .setRemote(s.id, c.remote(setup: "active")))
            _ = try await onSite(client, room, .setRemote(c.id, s.remote(setup: "passive")))
        } catch {
            relayFailed(relay, in: room, reason: "\(error)")
            throw error
        }
        relay.isSetUp = true
        Counter(label: "minato_cluster_relays_created_total").increment()
        Timer(label: "minato_cluster_relay_setup_seconds").recordNanoseconds(Self.nanoseconds(clock.now - started))
        logger.info("relay made", metadata: ["room": "\(room.id)", "relay": "\(relay.key)"])
    }

    private func newRelayTransportId(_ site: MediaSite) -> TransportId {
        guard site == .home else { return TransportId(0) }
        let id = TransportId(nextTransportId)
        nextTransportId &+= 1
        return id
    }

    /// Gives back one reference `producer(of:at:in:)` took; the last one stops the relayed
    /// stream after `cluster.relayLingerMs` unless a subscriber takes it again.
    func releaseForward(_ key: ForwardKey, in room: Room) {
        guard let f = room.forwards[key] else { return }
        f.users -= 1
        guard f.users <= 0, f.linger == nil else { return }
        let linger = Duration.milliseconds(mediaNodes?.relayLingerMs ?? 0)
        f.linger = Task {
            try? await Task.sleep(for: linger)
            guard !Task.isCancelled, room.forwards[key] === f, f.users <= 0 else { return }
            self.stopForward(f, in: room)
        }
    }

    /// Stops a relayed stream now (its publication ended, or nobody uses it).
    func stopForward(_ f: RelayForward, in room: Room) {
        if room.forwards[f.key] === f { room.forwards[f.key] = nil }
        f.linger?.cancel()
        f.ready = nil
        for c in f.consumers { postSite(f.source, room, .removeConsumer(c)) }
        if let p = f.producer { postSite(f.key.site, room, .removeProducer(p)) }
        f.consumers = []
        f.producer = nil
        closeRelayIfIdle(relayKey(f.source, f.key.site), in: room)
    }

    /// Closes the relay `key` when no relayed stream uses it any more (the last one stopped
    /// `cluster.relayLingerMs` after its last subscriber, or its publication ended): an empty
    /// room does not keep transports on two nodes until it closes. The next stream makes a new
    /// one. Not a failure: nothing is attached again.
    func closeRelayIfIdle(_ key: RelayKey, in room: Room) {
        guard let relay = room.relays[key], relay.isSetUp,
              !room.forwards.values.contains(where: { relayKey($0.source, $0.key.site) == key }) else { return }
        room.relays[key] = nil
        relay.ready = nil
        for (site, id) in relay.transports { postSite(site, room, .closeTransport(id)) }
        Counter(label: "minato_cluster_relays_closed_idle_total").increment()
        logger.info("idle relay closed", metadata: ["room": "\(room.id)", "relay": "\(relay.key)"])
    }

    /// Every relayed stream of `pub` stops (it was unpublished).
    func stopForwards(of pub: RoomPublication, in room: Room) {
        for f in room.forwards.values where f.key.publication == pub.id { stopForward(f, in: room) }
    }

    /// A relay's transport closed or its setup failed: its transports close and its streams
    /// stop; the subscriptions they fed are attached again over a new relay (`reattach`).
    func relayFailed(_ relay: RoomRelay, in room: Room, reason: String) {
        guard room.relays[relay.key] === relay else { return }
        room.relays[relay.key] = nil
        relay.ready = nil
        for (site, id) in relay.transports { postSite(site, room, .closeTransport(id)) }
        let sites = [relay.key.a, relay.key.b]
        let crossed = room.forwards.values.filter { sites.contains($0.source) && sites.contains($0.key.site) }
        let orphans = room.subscriptions.filter { s in s.forward.map { k in crossed.contains { $0.key == k } } ?? false }
        for f in crossed { stopForward(f, in: room) }
        // Their consumers went with the relayed producers they consumed.
        for sub in orphans {
            sub.consumer = nil
            sub.forward = nil
        }
        recordingRelayStopped(crossed.map(\.key))
        egressRelayStopped(crossed.map(\.key), in: room)
        for pub in room.publications where pub.speakerForward.map({ k in crossed.contains { $0.key == k } }) ?? false {
            pub.speakerForward = nil
            hearSpeaker(pub, in: room, after: 0)
        }
        Counter(label: "minato_cluster_relay_failures_total").increment()
        logger.warning("relay closed", metadata: ["room": "\(room.id)", "relay": "\(relay.key)", "reason": "\(reason)",
                                                  "subscriptions": "\(orphans.count)"])
        if !orphans.isEmpty { scheduleReattach(orphans.map(\.id), in: room, attempt: 0) }
    }

    /// Makes `sub`'s consumer on `member`'s site, transport `tid`, with `parameters` (their
    /// `producer` is set here: the publication's own, or its relayed stream's on that site), and
    /// records it on the subscription with how it was made. False (nothing kept) when the
    /// subscription ended or got a consumer meanwhile.
    func attachConsumer(_ sub: RoomSubscription, of pub: RoomPublication, for member: LocalSFURoomMember, on tid: TransportId,
                        _ parameters: ConsumerParameters, in room: Room) async throws -> Bool {
        let site = member.site
        let (producer, forward) = try await self.producer(of: pub, at: site, in: room)
        var parameters = parameters
        parameters.producer = producer
        let consumer: ConsumerId
        do {
            consumer = try remoteConsumer(await onSite(site, room, .addConsumer(tid, parameters)))
        } catch {
            if let forward { releaseForward(forward, in: room) }
            throw error
        }
        guard room.subscription(sub.id) != nil, sub.consumer == nil else {
            postSite(site, room, .removeConsumer(consumer))
            if let forward { releaseForward(forward, in: room) }
            return false
        }
        sub.consumer = consumer
        sub.site = site
        sub.forward = forward
        sub.consumerTransport = tid
        sub.consumerParameters = parameters
        return true
    }

    /// How long whatever a failed relay fed (subscriptions, a speaker's stream, a plain RTP
    /// egress) waits before it is attached again, after `failures` attempts that could not make
    /// a relay: 1 s, doubling with each, to at most 30 s.
    static func relayBackoff(_ failures: Int) -> Duration {
        .milliseconds(min(1000 << min(max(failures, 0), 5), 30_000))
    }

    /// Runs `reattach` after `relayBackoff(attempt)`.
    func scheduleReattach(_ ids: [String], in room: Room, attempt: Int) {
        Task {
            try? await Task.sleep(for: Self.relayBackoff(attempt))
            await self.reattach(ids, in: room, attempt: attempt)
        }
    }

    /// Makes the consumers of subscriptions whose relay failed again (over a new relay), as they
    /// were made first. Those that cannot be (no relay could be made) are tried again later;
    /// a new relay that fails afterwards starts the backoff over.
    func reattach(_ ids: [String], in room: Room, attempt: Int) async {
        guard rooms.contains(where: { $0 === room }) else { return }
        var made = 0
        var failed: [String] = []
        for id in ids {
            guard let sub = room.subscription(id), sub.consumer == nil, let pub = room.publication(sub.publicationId),
                  let member = room.member(sub.subscriberId), let tid = sub.consumerTransport,
                  let parameters = sub.consumerParameters else { continue }
            do {
                if try await attachConsumer(sub, of: pub, for: member, on: tid, parameters, in: room) { made += 1 }
            } catch {
                failed.append(id)
                logger.warning("a subscription could not be attached to a new relay", metadata: [
                    "room": "\(room.id)", "subscription": "\(id)", "attempt": "\(attempt)", "error": "\(error)"])
            }
        }
        if !failed.isEmpty { scheduleReattach(failed, in: room, attempt: attempt + 1) }
        if made > 0 {
            Counter(label: "minato_cluster_relay_reattached_total").increment(by: made)
            logger.notice("subscriptions attached to a new relay", metadata: ["room": "\(room.id)", "count": "\(made)"])
        }
    }

    /// The room's relays for the admin API: the two nodes, whether it is set up, and per
    /// direction the streams it carries with what the sending side's consumers counted (packets
    /// and bytes sent, resends, and the receiving side's reports: loss and round trip).
    func relayStats(_ room: Room) async -> [JSONValue] {
        var out: [JSONValue] = []
        for relay in room.relays.values.sorted(by: { $0.key.description < $1.key.description }) {
            var directions: [JSONValue] = []
            for (from, to) in [(relay.key.a, relay.key.b), (relay.key.b, relay.key.a)] {
                let forwards = room.forwards.values.filter { $0.source == from && $0.key.site == to }
                let consumers = forwards.flatMap(\.consumers)
                var o: [String: JSONValue] = ["from": .string(nodeName(from)), "to": .string(nodeName(to)),
                                              "streams": .int(forwards.count)]
                if !consumers.isEmpty,
                   case .stats(_, let stats)? = try? await onSite(from, room, .stats(producers: [], consumers: consumers)) {
                    let s = stats.compactMap { $0 }
                    o["packetsSent"] = .int(Int(clamping: s.reduce(UInt64(0)) { $0 &+ $1.packetsSent }))
                    o["bytesSent"] = .int(Int(clamping: s.reduce(UInt64(0)) { $0 &+ $1.bytesSent }))
                    o["packetsRetransmitted"] = .int(Int(clamping: s.reduce(UInt64(0)) { $0 &+ $1.packetsRetransmitted }))
                    o["packetsLost"] = .int(s.reduce(0) { $0 + Int($1.packetsLost) })
                    o["fractionLost"] = .double(Double(s.map(\.fractionLost).max() ?? 0) / 256)
                    if let rtt = s.compactMap(\.roundTripTime).max() { o["roundTripTimeMs"] = .double(Double(rtt) / 1_000_000) }
                }
                directions.append(.object(o))
            }
            out.append(["nodes": [.string(nodeName(relay.key.a)), .string(nodeName(relay.key.b))],
                        "state": .string(relay.isSetUp ? "open" : "settingUp"),
                        "ageMs": .int(Int(clamping: Self.nanoseconds(ContinuousClock.now - relay.createdAt) / 1_000_000)),
                        "directions": .array(directions)])
        }
        return out
    }

    /// A transport of this node's worker closed that belongs to a relay of one of its rooms.
    func homeRelayTransportClosed(_ id: TransportId, reason: TransportCloseReason) -> Bool {
        for room in rooms {
            if let relay = room.relays.values.first(where: { $0.transports[.home] == id }) {
                relayFailed(relay, in: room, reason: "\(reason)")
                return true
            }
        }
        return false
    }
}
