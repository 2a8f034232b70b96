internal import Synchronization

// A member whose room is lost (its node failed, or the server no longer knows the member and
// recovery could not take it back) joins it again: docs/sdk-swift.md "Several servers and node
// failures".
extension LocalSFURoomMember {
    /// Runs a rejoin outside the task that noticed the loss (a cancelled keepalive task would
    /// cut its waits short).
    nonisolated func startRejoin(_ reason: RejoinReason) {
        Task { await self.rejoin(reason) }
    }

    /// The room is lost: find it again by name (creating it if nobody did yet), join it under the
    /// same name and metadata (`replace`, so that a join whose answer was lost cannot block the
    /// next attempt), publish every source again, then subscribe again to the same publishers'
    /// streams as they come back. Errors a later attempt may not meet (`serviceUnavailable`, a
    /// closed socket, a room or member gone with yet another node) are retried with backoff for
    /// `rejoinTimeout`; after that, or on any other error, the member is gone (`.failed`).
    func rejoin(_ reason: RejoinReason) async {
        guard !left, !rejoining else { return }
        let options = room.context.options
        guard options.rejoin, let name = room.name else {
            connectionSink.yield(.failed(reason: reason, error: options.rejoin ? "the room has no name to find it by" : "rejoin is off"))
            left = true
            shutdown()
            return
        }
        rejoining = true
        connectionSink.yield(.reconnecting(reason: reason))
        let republish = sources
        let wants = subscribed.values.map { s -> WantedSubscription in
            let p = directory.publications[s.publicationId]
            return WantedSubscription(publisherName: p.flatMap { directory.publisherName(of: $0) }, contentType: s.contentType,
                                      metadata: p?.metadata, sink: s.sink)
        }
        await dropMedia()
        let deadline = ContinuousClock.now + options.rejoinTimeout
        var delay = options.reconnectDelay
        var publications: [RoomPublication] = []
        while true {
            do {
                publications = try await joinAgain(name: name, republish: republish)
                break
            } catch {
                options.logger.notice("rejoin attempt failed", metadata: ["room": "\(name)", "error": "\(error)"])
                await dropMedia()
                guard !left else { rejoining = false; return }
                guard Self.worthRetrying(error), ContinuousClock.now + delay < deadline else {
                    rejoining = false
                    connectionSink.yield(.failed(reason: reason, error: "\(error)"))
                    left = true
                    shutdown()
                    return
                }
                try? await Task.sleep(for: delay)
                delay = Self.nextRejoinDelay(after: delay)
            }
        }
        rejoining = false
        let (subscriptions, missing) = await resubscribe(wants, until: ContinuousClock.now + options.resubscribeWait)
        connectionSink.yield(.reconnected(reason: reason, publications: publications, subscriptions: subscriptions,
                                          missing: missing))
    }

    /// Seconds between two keepalives for a member joined with `interval`: a third of it, at
    /// least 1.
    static func keepalivePeriodSec(interval: Int) -> Int { max(1, interval / 3) }

    /// The wait after a failed rejoin attempt that followed a wait of `delay`: doubled, up to 5 s.
    static func nextRejoinDelay(after delay: Duration) -> Duration { min(delay * 2, .seconds(5)) }

    /// Errors a rejoin tries again after: the cluster may answer otherwise in a moment.
    private static func worthRetrying(_ error: any Error) -> Bool {
        if let e = error as? RoomError {
            return ["serviceUnavailable", "roomNotFound", "memberNotFound", "publicationNotFound", "roomClosed",
                    "notJoined"].contains(e.name)
        }
        if let e = error as? ClientError {
            switch e {
            case .connectionClosed, .timeout, .transport: return true
            case .badResponse, .dataMessageTooLarge, .dataStreamNotOpen, .dataBufferFull: return false
            }
        }
        return false
    }

    /// One rejoin attempt; returns the sources' new publications.
    private func joinAgain(name: String, republish: [PublishedSource]) async throws -> [RoomPublication] {
        let options = room.context.options
        if channel.isClosed {
            // The same server first (it may be back already), then the next ones in turn.
            do {
                channel = try await Context.openChannel(options, at: urlIndex)
            } catch {
                urlIndex = (urlIndex + 1) % options.urls.count
                throw error
            }
            listen()
        }
        let found = try await channel.call("findOrCreateRoom", SFURoom.body(name: name, metadata: nil, password: room.password))
        guard let roomJSON = found["room"] else { throw ClientError.badResponse("no room in the result") }
        room.moved(to: try roomJSON.decode(RoomSnapshot.self))
        deliveredVersion = 0   // perhaps another room (its node failed): its versions start afresh
        let result = try await channel.call("join", request.params(roomId: room.id, replace: true))
        guard let m = result["member"] else { throw ClientError.badResponse("no member in the join result") }
        let joined = try m.decode(Member.self)
        current.withLock { $0 = joined }
        reconnectSecret = result["reconnectSecret"]?.string
        iceServers = IceServer.list(result["iceServers"])
        if let snapshot = try? result["room"]?.decode(RoomSnapshot.self) { directory = RoomDirectory(snapshot) }
        startKeepalive()
        var publications: [RoomPublication] = []
        for s in republish { publications.append(try await publish(s.source, options: s.options)) }
        return publications
    }

    /// Subscribes again to what `wants` names, each once its publication is in the room, until
    /// `deadline`; returns the subscriptions made and what did not come back.
    private func resubscribe(_ wants: [WantedSubscription], until deadline: ContinuousClock.Instant) async
        -> ([RoomSubscription], [MissingSubscription]) {
        var made: [RoomSubscription] = [], missing: [MissingSubscription] = [], taken = Set<String>()
        let roomId = room.id
        for want in wants {
            var subscription: RoomSubscription?
            while subscription == nil, !left, room.id == roomId {
                if let publication = directory.publications.values.first(where: { p in
                    !taken.contains(p.id) && p.publisherId != id && p.contentType == want.contentType
                        && want.publisherName != nil && directory.publisherName(of: p) == want.publisherName
                        && ((want.metadata ?? "").isEmpty || p.metadata == want.metadata)
                }) {
                    taken.insert(publication.id)
                    do {
                        subscription = try await subscribe(publicationId: publication.id, sink: want.sink)
                        continue
                    } catch {
                        room.context.options.logger.notice("subscribing again failed", metadata: ["error": "\(error)"])
                        taken.remove(publication.id)
                        if !Self.worthRetrying(error) { break }
                    }
                }
                if ContinuousClock.now >= deadline { break }
                try? await Task.sleep(for: .milliseconds(100))
            }
            if let subscription { made.append(subscription) } else {
                missing.append(MissingSubscription(publisherName: want.publisherName, contentType: want.contentType,
                                                   metadata: want.metadata))
            }
        }
        return (made, missing)
    }

    /// Lets go of the media of a room that is gone: stops sending (the sources themselves are
    /// kept to publish again), closes both connections, ends the received packet streams.
    private func dropMedia() async {
        keepaliveTask?.cancel()
        keepaliveTask = nil
        let media = self.media
        try? await worker.perform { core in
            for o in media.value.outbound.values { o.stop(on: core) }
            media.value.outbound.removeAll()
            media.value.send?.close()
            media.value.send = nil
            media.value.sendDemux = InboundDemux()
            media.value.recv?.close()
            media.value.recv = nil
            media.value.recvDemux = InboundDemux()
            for c in media.value.collectors.values { c.finish() }
            media.value.collectors.removeAll()
            media.value.finishData()
        }
        tracks = []
        publicationMids = [:]
        subscriptionSsrcs = [:]
        sources = []
        subscribed = [:]
        sendVersion = 0
        recvVersion = 0
    }
}
