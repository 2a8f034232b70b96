public import MinatoTransport

/// What a member's recovery is about (`MemberConnectionEvent.recovering` / `.recovered`).
public enum RecoveryCause: Sendable, Equatable, CustomStringConvertible {
    /// The member's signaling socket closed, or went silent and did not answer a heartbeat.
    case signaling
    /// One of the member's connections was receiving and went silent (its path is gone: the
    /// network changed, a NAT binding expired).
    case media(ConnectionSide)

    public var description: String {
        switch self {
        case .signaling: return "signaling"
        case .media(let side): return "media \(side.rawValue)"
        }
    }
}

/// Notices that a connection which was receiving went silent: sampled with the connection's
/// count of received datagrams, it says `.stalled` once when nothing came for `stallAfter` after
/// at least two arrivals within the `stallAfter` before the last one, and `.resumed` when
/// something comes again. A connection that never received, or received one packet, never
/// stalls. On the send connection what arrives is the server's reports and feedback (at least
/// one receiver report a second while it receives our media); on the receive connection, the
/// media itself. A publisher that pauses on purpose looks the same as a lost path: that costs
/// one needless ICE restart, after which the watch waits for a new flow (`reset`).
/// A value type with no clock of its own: the caller gives the time.
struct StallWatch {
    enum Verdict: Equatable { case none, stalled, resumed }

    let stallAfter: Duration
    private var last: UInt64 = 0
    private var started = false
    /// When the count last grew (the newest last), at most `keep`.
    private var growths: [Duration] = []
    private static let keep = 16
    private(set) var stalled = false

    init(stallAfter: Duration) { self.stallAfter = stallAfter }

    mutating func sample(at now: Duration, received: UInt64) -> Verdict {
        defer { last = received }
        guard started else {
            started = true
            return .none
        }
        if received != last {
            growths.append(now)
            if growths.count > Self.keep { growths.removeFirst(growths.count - Self.keep) }
            if stalled {
                stalled = false
                return .resumed
            }
            return .none
        }
        guard !stalled, let lastGrowth = growths.last, now - lastGrowth >= stallAfter else { return .none }
        let flowing = growths.reduce(0) { $0 + ($1 >= lastGrowth - stallAfter ? 1 : 0) }
        guard flowing >= 2 else { return .none }
        stalled = true
        return .stalled
    }

    /// Forgets the flow seen so far (after an ICE restart, or a new connection): the watch stalls
    /// again only after a new flow.
    mutating func reset() {
        growths = []
        stalled = false
    }
}

/// Rates a member's connection from its loss, window after window (the supervisor calls it
/// every 2 s): the receive connection's loss from sequence numbers (packets received against
/// packets the numbers say were sent, fewer than `minPackets` say nothing), the send
/// connection's from the server's latest receiver report, the worse of the two; `.bad` while a
/// connection is down. Returns the new level when it changed. No clock of its own.
struct QualityRater {
    static let goodLoss = 0.03
    static let poorLoss = 0.10
    static let minPackets: UInt64 = 20

    private(set) var quality: ConnectionQuality?
    private var lastReceived: UInt64 = 0
    private var lastExpected: UInt64 = 0
    private var lastReports: UInt64 = 0

    /// `received`/`expected`: the receive connection's totals; `fractionLost`/`reports`: the
    /// latest receiver report's worst fraction (of 256) and the count of reports so far.
    mutating func rate(received: UInt64, expected: UInt64, fractionLost: UInt8, reports: UInt64,
                       mediaDown: Bool) -> ConnectionQuality? {
        let got = received &- lastReceived, sent = expected &- lastExpected
        let newReport = reports != lastReports
        (lastReceived, lastExpected, lastReports) = (received, expected, reports)
        var loss: Double?
        if sent >= Self.minPackets, sent < 1 << 40 {
            loss = max(0, 1 - Double(got) / Double(sent))
        }
        if newReport { loss = max(loss ?? 0, Double(fractionLost) / 256) }
        let level: ConnectionQuality
        if mediaDown {
            level = .bad
        } else if let loss {
            level = loss < Self.goodLoss ? .good : loss < Self.poorLoss ? .poor : .bad
        } else {
            return nil   // nothing to rate: no media this window
        }
        return set(level)
    }

    /// A connection went down: `.bad` at once (the counters' window goes on).
    mutating func down() -> ConnectionQuality? { set(.bad) }

    private mutating func set(_ level: ConnectionQuality) -> ConnectionQuality? {
        guard level != quality else { return nil }
        quality = level
        return level
    }
}

// MARK: The member's supervisor

extension LocalSFURoomMember {
    /// Every 250 ms: sample both connections for a stall, probe a silent signaling
    /// socket (a `keepalive` after `heartbeatInterval` without a frame, answered within
    /// `heartbeatTimeout`, else the socket is given up and the member taken back on a new one),
    /// and restart ICE on a connection that stalled (once the socket is back, when it was lost
    /// too). One media recovery at a time; a rejoin pauses the watch.
    func supervise() async {
        let options = room.context.options
        let started = ContinuousClock.now
        var watches: [ConnectionSide: StallWatch] = [.send: StallWatch(stallAfter: options.mediaStallTimeout),
                                                     .recv: StallWatch(stallAfter: options.mediaStallTimeout)]
        var rater = QualityRater()
        var pass = 0
        while !Task.isCancelled, !left {
            pass &+= 1
            try? await Task.sleep(for: .milliseconds(250))
            if Task.isCancelled || left { return }
            if rejoining {
                // New connections follow: their flows start afresh.
                watches[.send]?.reset()
                watches[.recv]?.reset()
                continue
            }
            // The signaling heartbeat, beside the media watch (a probe waits up to
            // `heartbeatTimeout`; a stall meanwhile is acted on at once).
            if !channel.isClosed, !resumingSignaling, !heartbeatInFlight, channel.silence >= options.heartbeatInterval {
                heartbeatInFlight = true
                Task {
                    await self.probeSignaling(timeout: options.heartbeatTimeout)
                    self.heartbeatDone()
                }
            }
            // The media watch.
            guard let counts = try? await receivedCounts() else { continue }
            let now = ContinuousClock.now - started
            var stalled: [ConnectionSide] = []
            for side in [ConnectionSide.send, .recv] {
                guard let count = counts[side] else { watches[side]?.reset(); continue }
                if watches[side]?.sample(at: now, received: count) == .stalled { stalled.append(side) }
            }
            if !stalled.isEmpty {
                setQuality(rater.down())
            } else if pass % 8 == 0, let q = try? await qualityCounters() {
                setQuality(rater.rate(received: q.received, expected: q.expected, fractionLost: q.fractionLost,
                                      reports: q.reports, mediaDown: watches.values.contains { $0.stalled }))
            }
            for side in stalled {
                // The network may have changed: the signaling socket may be dead too, and a
                // restart needs it. Probe it at once unless it spoke just now.
                if !resumingSignaling, !channel.isClosed, channel.silence >= .seconds(1) {
                    await probeSignaling(timeout: options.networkProbeTimeout)
                }
                if channel.isClosed || resumingSignaling { await waitForSignaling() }
                guard !left, !rejoining else { break }
                if await recoverMedia(side) { watches[side]?.reset() } else {
                    startRejoin(.memberLost)
                    break
                }
            }
        }
    }

    private func heartbeatDone() { heartbeatInFlight = false }

    private func setQuality(_ q: ConnectionQuality?) {
        guard let q else { return }
        connectionQuality = q
        connectionSink.yield(.qualityChanged(q))
    }

    private func qualityCounters() async throws -> (received: UInt64, expected: UInt64, fractionLost: UInt8, reports: UInt64) {
        let media = self.media
        return try await worker.perform { _ in
            let m = media.value
            return (m.recvDemux.received, m.recvDemux.expectedTotal, m.reportedFractionLost, m.reports)
        }
    }

    /// Each connection's received-datagram count (nil for a connection the member does not have).
    private func receivedCounts() async throws -> [ConnectionSide: UInt64] {
        let media = self.media
        return try await worker.perform { _ in
            var out: [ConnectionSide: UInt64] = [:]
            if let s = media.value.send, s.state == .connected { out[.send] = s.datagramsReceived }
            if let r = media.value.recv, r.state == .connected { out[.recv] = r.datagramsReceived }
            return out
        }
    }

    /// Sends a `keepalive` that must be answered within `timeout`; a socket that does not answer
    /// is given up (its member is then taken back on a new one: `channelEnded`).
    private func probeSignaling(timeout: Duration) async {
        let probed = channel
        do {
            try await probed.call("keepalive", ["memberId": .string(id)], timeout: timeout)
        } catch let e as RoomError where e.name == "memberNotFound" {
            lost(id)
        } catch let e as ClientError {
            if case .timeout = e { probed.abandon("no answer to a heartbeat in \(timeout)") }
        } catch {}
    }

    /// Waits until the socket is back or the member rejoins (at most `signalingResumeTimeout`
    /// and a bit: a resume gives up by then).
    private func waitForSignaling() async {
        let deadline = ContinuousClock.now + room.context.options.signalingResumeTimeout + .seconds(5)
        while !left, ContinuousClock.now < deadline, channel.isClosed || resumingSignaling {
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Restarts ICE on `side` until a restart gets a new pair or packets come again; false after
    /// `maxMediaRestarts` failed tries.
    private func recoverMedia(_ side: ConnectionSide) async -> Bool {
        let options = room.context.options
        let media = self.media
        connectionSink.yield(.recovering(.media(side)))
        for attempt in 1...max(1, options.maxMediaRestarts) {
            guard !left, !rejoining else { return true }
            let before = try? await worker.perform { _ -> (Int, UInt64)? in
                guard let c = side == .send ? media.value.send : media.value.recv else { return nil }
                return (c.iceRestarts, c.datagramsReceived)
            }
            guard let before = before ?? nil else { return true }   // the connection is gone: nothing to recover
            do {
                try await restartIce(side)
            } catch {
                options.logger.notice("ICE restart failed", metadata: ["side": "\(side.rawValue)", "attempt": "\(attempt)",
                                                                       "error": "\(error)"])
                if channel.isClosed || resumingSignaling { await waitForSignaling() }
            }
            let deadline = ContinuousClock.now + options.mediaRestartWait
            while ContinuousClock.now < deadline, !left {
                try? await Task.sleep(for: .milliseconds(50))
                if rejoining { return true }   // superseded: the rejoin makes new connections
                let now = try? await worker.perform { _ -> (Int, UInt64, Bool)? in
                    guard let c = side == .send ? media.value.send : media.value.recv else { return nil }
                    return (c.iceRestarts, c.datagramsReceived, c.restarting)
                }
                guard let now = now ?? nil else { return true }
                // A new pair, or packets on the old one (it was not gone after all).
                if now.0 > before.0 || (!now.2 && now.1 > before.1) {
                    mediaRecoveries += 1
                    connectionSink.yield(.recovered(.media(side)))
                    return true
                }
            }
        }
        return false
    }

    /// The signaling socket closed (or a heartbeat gave it up): take the member over on a new
    /// socket with its `reconnectSecret` (`keepalive` from the new socket; the same server first,
    /// then the next ones in turn), then replay the room events missed meanwhile. Media goes on
    /// over its own connections the whole time. When the server no longer has the member, or
    /// the socket cannot be had again within the keepalive gap, the member rejoins instead.
    func resumeSignaling() async {
        guard !left, !rejoining, !resumingSignaling else { return }
        guard let secret = reconnectSecret else { return await rejoin(.memberLost) }
        resumingSignaling = true
        connectionSink.yield(.recovering(.signaling))
        let options = room.context.options
        let deadline = ContinuousClock.now + options.signalingResumeTimeout
        var delay = options.reconnectDelay
        var index = urlIndex
        while !left {
            do {
                let fresh = try await Context.openChannel(options, at: index)
                do {
                    try await fresh.call("keepalive", ["memberId": .string(id), "reconnectSecret": .string(secret)],
                                         timeout: options.heartbeatTimeout)
                } catch {
                    fresh.close()
                    throw error
                }
                channel = fresh
                urlIndex = index
                listen()
                startKeepalive()
                let replayed = try await replayEvents()
                replayedEvents += replayed
                signalingRecoveries += 1
                resumingSignaling = false
                connectionSink.yield(.recovered(.signaling))
                return
            } catch let e as RoomError where ["memberNotFound", "insufficientPermissions", "roomNotFound"].contains(e.name) {
                options.logger.notice("the member cannot be taken back; rejoining", metadata: ["error": "\(e)"])
                break
            } catch {
                options.logger.notice("signaling resume attempt failed", metadata: ["error": "\(error)"])
                if !channel.isClosed { channel.abandon("resume failed") }
                guard ContinuousClock.now + delay < deadline else { break }
                try? await Task.sleep(for: delay)
                delay = Self.nextRejoinDelay(after: delay)
                index = (index + 1) % max(1, options.urls.count)
            }
        }
        resumingSignaling = false
        guard !left else { return }
        await rejoin(.memberLost)
    }

    /// Asks for the room's events after the last one this member applied, page by page, and
    /// delivers them; live events that arrive meanwhile wait and follow (each version once).
    private func replayEvents() async throws -> Int {
        holdingEvents = true
        defer { releaseHeldEvents() }
        var offset = directory.version
        var delivered = 0
        while true {
            let page = try await channel.call("subscribeRoomEvents", ["roomId": .string(room.id), "offset": .number(Double(offset))])
            for raw in page["events"]?.array ?? [] {
                if let e = RoomEvent(raw), deliver(e) { delivered += 1 }
            }
            guard let next = page["nextOffset"]?.int, next > offset else { break }
            offset = next
        }
        return delivered
    }
}
