internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import Metrics

/// Media sites: where a room's transports, producers and consumers live. The room's own
/// (`home`) site is its worker on this node; with `cluster.cascade` a member connected through
/// another node is served there (`.node(id)`), and the room core drives that node's worker
/// with `MediaCommand`s over the node link (`op: "media"`). The other node keeps a
/// `HostedMedia` for the room (a router on one of its workers) and reports its transports'
/// ends back (`op: "mediaEvent"`). The room's state and events stay here.
extension RoomService {
    /// Gives the room core the cluster's other nodes (cluster mode only).
    public func setMediaNodes(_ nodes: (any MediaNodes)?) { mediaNodes = nodes }

    /// The node id of `site` (this node's for `.home`).
    func nodeName(_ site: MediaSite) -> String {
        switch site {
        case .home: return mediaNodes?.nodeId ?? ""
        case .node(let n): return n
        }
    }

    /// Where a member joining through `channel` is served: the node its client is connected
    /// to, when `cluster.cascade` is on, that node takes work, and the room spans fewer than
    /// `cluster.maxNodesPerRoom` nodes (or already uses it); otherwise the room's home.
    func site(forMemberOn channel: ClientChannel, in room: Room) async -> MediaSite {
        guard let nodes = mediaNodes, nodes.cascade, let node = channel.node, node != nodes.nodeId else { return .home }
        guard await nodes.takesMembers(node) else { return .home }
        let site = MediaSite.node(node)
        let sites = room.sites
        guard sites.contains(site) || sites.count < nodes.maxNodesPerRoom else { return .home }
        return site
    }

    /// Runs `command` on `site` and returns its reply; failures become `RoomError`s.
    /// `newTransport` is the id a home `createTransport` gives (a remote site picks its own).
    func onSite(_ site: MediaSite, _ room: Room, _ command: MediaCommand,
                newTransport: TransportId = TransportId(0)) async throws(RoomError) -> MediaReply {
        switch site {
        case .home:
            let router = room.router
            return try await onWorker(room) { core in try command.run(on: core, router: router, newTransport: newTransport) }
        case .node(let node):
            guard let nodes = mediaNodes else { throw RoomError.internalError("This node is not in a cluster.") }
            let params: JSONValue = ["room": .string(room.id), "cmd": .string(command.encoded())]
            switch await nodes.call(node, op: "media", params: params) {
            case .success(let v):
                guard let text = v["reply"]?.stringValue, let reply = MediaReply.decoded(text) else {
                    throw RoomError.internalError("Node \(node) answered a media command with something else.")
                }
                return reply
            case .failure(let e):
                logger.warning("a media command on another node failed", metadata: ["node": "\(node)", "room": "\(room.id)", "error": "\(e)"])
                throw e
            }
        }
    }

    /// Runs `command` on `site` without waiting (removals, pauses): on a remote site the
    /// commands of one node keep their order.
    func postSite(_ site: MediaSite, _ room: Room, _ command: MediaCommand) {
        switch site {
        case .home:
            let router = room.router
            workers[room.worker].post { core in _ = try? command.run(on: core, router: router, newTransport: TransportId(0)) }
        case .node(let node):
            postRemote(node, ["room": .string(room.id), "cmd": .string(command.encoded())])
        }
    }

    /// Queues a `media` call to `node` (params as `onSite` sends them, or `release`).
    func postRemote(_ node: String, _ params: JSONValue) {
        guard let nodes = mediaNodes else { return }
        if let queue = remotePosts[node] {
            queue.yield(params)
            return
        }
        let (stream, queue) = AsyncStream<JSONValue>.makeStream(bufferingPolicy: .unbounded)
        remotePosts[node] = queue
        queue.yield(params)
        Task.detached {
            for await p in stream { _ = await nodes.call(node, op: "media", params: p) }
        }
    }

    func remoteProducer(_ reply: MediaReply) throws(RoomError) -> ProducerId {
        guard case .producer(let p) = reply else { throw RoomError.internalError("The media site did not return a producer.") }
        return p
    }

    func remoteConsumer(_ reply: MediaReply) throws(RoomError) -> ConsumerId {
        guard case .consumer(let c) = reply else { throw RoomError.internalError("The media site did not return a consumer.") }
        return c
    }

    func remoteTransport(_ reply: MediaReply) throws(RoomError) -> TransportDescription {
        guard case .transport(let d) = reply else { throw RoomError.internalError("The media site did not return a transport.") }
        return d
    }

    /// Frees what the room holds on other nodes (they close its transports and router).
    func releaseSites(of room: Room) {
        var nodes = Set<String>()
        for m in room.members { if case .node(let n) = m.site { nodes.insert(n) } }
        for relay in room.relays.values {
            for (site, id) in relay.transports {
                if case .node(let n) = site { nodes.insert(n) } else { postSite(site, room, .closeTransport(id)) }
            }
        }
        for f in room.forwards.values { f.linger?.cancel() }
        room.relays.removeAll()
        room.forwards.removeAll()
        // A remote node closes everything it serves for the room at once.
        for n in nodes { postRemote(n, ["room": .string(room.id), "release": true]) }
    }

    // MARK: The serving side (a room homed on another node)

    /// A `media` call from `home` for one of its rooms: runs the command on this node's
    /// router for that room (made on first use), or with `release` closes all of it. Only
    /// transports made for that room may be named.
    public func hostMedia(from home: String, params: JSONValue) async -> Result<JSONValue, RoomError> {
        guard let roomId = params["room"]?.stringValue, !roomId.isEmpty, roomId.utf8.count <= 256 else {
            return .failure(.invalidParameter("A media call needs its room."))
        }
        let key = HostedMedia.key(home: home, roomId: roomId)
        if params["release"]?.boolValue == true {
            releaseHosted(key)
            return .success(["reply": .string(MediaReply.done.encoded())])
        }
        guard let text = params["cmd"]?.stringValue, let command = MediaCommand.decoded(text) else {
            Counter(label: "minato_cluster_media_commands_refused_total").increment()
            return .failure(.invalidParameter("A media call needs a command this node understands."))
        }
        let media: HostedMedia
        if let h = hosted[key] {
            media = h
        } else {
            guard case .createTransport = command else { return .failure(.invalidParameter("No media of room \(roomId) here.")) }
            var counts = [Int](repeating: 0, count: workers.count)
            for r in rooms where counts.indices.contains(r.worker) { counts[r.worker] += 1 }
            for h in hosted.values where counts.indices.contains(h.worker) { counts[h.worker] += 1 }
            let worker = counts.indices.min { counts[$0] < counts[$1] } ?? 0
            media = HostedMedia(home: home, roomId: roomId, worker: worker, router: RouterId(nextRouterId))
            nextRouterId &+= 1
            hosted[key] = media
            logger.info("serving media of a room homed elsewhere", metadata: ["home": "\(home)", "room": "\(roomId)", "worker": "\(worker)"])
        }
        if let t = command.transport, !media.transports.contains(t) {
            return .failure(.invalidParameter("Transport \(t) is not one of room \(roomId)'s here."))
        }
        if case .pairTransports(_, let other) = command, !media.transports.contains(other) {
            return .failure(.invalidParameter("Transport \(other) is not one of room \(roomId)'s here."))
        }
        guard command.names(producersIn: media.producers, consumersIn: media.consumers) else {
            return .failure(.invalidParameter("The command names a producer or consumer that is not one of room \(roomId)'s here."))
        }
        var newId = TransportId(0)
        if case .createTransport = command {
            guard transportOwners.count + hostedTransports.count + transportsBeingCreated < configuration.maxTransports else {
                return .failure(.limitExceeded("The node has its maximum of \(configuration.maxTransports) media transports (media.maxTransports)."))
            }
            newId = TransportId(nextTransportId)
            nextTransportId &+= 1
            transportsBeingCreated += 1
        }
        let id = newId
        let router = media.router
        let outcome: Result<MediaReply, any Error>
        do {
            outcome = .success(try await workers[media.worker].perform { core in try command.run(on: core, router: router, newTransport: id) })
        } catch {
            outcome = .failure(error)
        }
        if case .createTransport = command { transportsBeingCreated -= 1 }
        switch outcome {
        case .success(let reply):
            if case .createTransport = command {
                if hosted[key] === media {
                    media.transports.insert(id)
                    hostedTransports[id] = key
                } else {
                    workers[media.worker].post { $0.closeTransport(id) }  // released meanwhile
                }
            }
            switch (command, reply) {
            case (.addProducer, .producer(let p)): media.producers.insert(p)
            case (.addConsumer, .consumer(let c)): media.consumers.insert(c)
            case (.removeProducer(let p), _): media.producers.remove(p)
            case (.removeConsumer(let c), _): media.consumers.remove(c)
            case (.closeTransport(let t), _):
                media.transports.remove(t)
                hostedTransports[t] = nil
                if media.transports.isEmpty { hosted[key] = nil }
            default: break
            }
            return .success(["reply": .string(reply.encoded())])
        case .failure(WorkerError.noFreePort):
            return .failure(RoomError(code: 503, name: "limitExceeded", detail: "Every UDP port of the media port range is in use on node \(mediaNodes?.nodeId ?? "")."))
        case .failure(let e):
            logger.warning("a media command from another node failed", metadata: ["home": "\(home)", "room": "\(roomId)", "error": "\(e)"])
            return .failure(.internalError("The media worker of node \(mediaNodes?.nodeId ?? "") could not make this change."))
        }
    }

    /// Closes everything this node serves for one room of another node.
    func releaseHosted(_ key: String) {
        guard let media = hosted.removeValue(forKey: key) else { return }
        let ids = media.transports
        for t in ids { hostedTransports[t] = nil }
        workers[media.worker].post { core in for t in ids { core.closeTransport(t) } }
        logger.info("stopped serving media of a room homed elsewhere", metadata: ["home": "\(media.home)", "room": "\(media.roomId)"])
    }

    /// Every room served for `home` ends (its node left the cluster or its link failed for good).
    public func releaseHosted(home: String) {
        for (key, media) in hosted where media.home == home { releaseHosted(key) }
    }

    /// A transport made for another node's room closed here: that node hears of it.
    func hostedTransportClosed(_ id: TransportId, reason: TransportCloseReason) -> Bool {
        guard let key = hostedTransports.removeValue(forKey: id), let media = hosted[key] else { return false }
        media.transports.remove(id)
        // Nothing of the room is left here: the next transport makes a new router.
        if media.transports.isEmpty { hosted[key] = nil }
        guard let nodes = mediaNodes else { return true }
        let params: JSONValue = ["room": .string(media.roomId), "transport": .int(Int(truncatingIfNeeded: id.rawValue)),
                                 "reason": .string("\(reason)")]
        let home = media.home
        Task.detached { _ = await nodes.call(home, op: "mediaEvent", params: params) }
        return true
    }

    // MARK: The home side

    /// `node` left the cluster (its lease lapsed): the members it served leave (reason
    /// `nodeFailed`; their clients rejoin through another node), its relays close, and the
    /// rest of each room goes on.
    public func siteFailed(_ node: String) {
        let site = MediaSite.node(node)
        for room in rooms {
            for relay in room.relays.values where relay.key.a == site || relay.key.b == site {
                relayFailed(relay, in: room, reason: "node \(node) left the cluster")
            }
            for m in room.members where m.site == site {
                Counter(label: "minato_cluster_members_lost_total").increment()
                removeMember(m, from: room, reason: "nodeFailed")
            }
        }
        remotePosts.removeValue(forKey: node)?.finish()
        flushOutbox()
    }

    /// A `mediaEvent` from `node`: one of the transports it serves for a room here closed.
    public func mediaEvent(from node: String, params: JSONValue) -> Result<JSONValue, RoomError> {
        guard let roomId = params["room"]?.stringValue, let raw = params["transport"]?.intValue, raw >= 0 else {
            return .failure(.invalidParameter("A media event needs its room and transport."))
        }
        let id = TransportId(UInt64(raw)), site = MediaSite.node(node)
        guard let room = rooms.first(where: { $0.id == roomId }) else { return .success(.null) }
        let reason = params["reason"]?.stringValue ?? "closed"
        if let member = room.members.first(where: { m in
            m.site == site && (m.send.description?.id == id || m.recv.description?.id == id)
        }) {
            logger.info("transport closed", metadata: ["member": "\(member.id)", "node": "\(node)", "reason": "\(reason)"])
            Counter(label: "minato_transport_failures_total", dimensions: [("kind", "remote")]).increment()
            removeMember(member, from: room, reason: "transportClosed")
            flushOutbox()
        } else if let relay = room.relays.values.first(where: { $0.transports[site] == id }) {
            relayFailed(relay, in: room, reason: reason)
        }
        return .success(.null)
    }
}
