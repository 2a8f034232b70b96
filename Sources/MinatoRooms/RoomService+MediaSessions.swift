internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire

/// HTTP media sessions: one offer in, one answer out, no signaling connection (the WHIP and
/// WHEP front door in `MinatoServer` turns HTTP into these). Each session is an ordinary member
/// of type `bot`, so it shows in room events, the admin API can kick it, and other members
/// subscribe to it; it has no keepalive (it ends with `endMediaSession`, a kick, or its
/// transport's timeout) and never gets a server offer.
///
/// - Ingest (WHIP): the client's offer publishes each audio/video m-section that sends, on the
///   member's send connection, exactly as `publish` would.
/// - Egress (WHEP): the client offers `recvonly` m-sections; the member subscribes on them to
///   one publisher's audio and video (the first publication of each kind), and follows that
///   publisher by name: when it publishes again, the new publication goes into the same
///   m-section, provided it is in the codec that m-section was answered with.
extension RoomService {
    public func ingest(_ r: MediaSessionRequest, from channel: ClientChannel) async throws -> MediaSessionResult {
        // No `run` wraps these calls: what they emit (joins, publications, subscriptions) goes
        // out here, after the work, as `run` would send it after the response.
        defer { forgetConnection(channel); flushOutbox() }
        try admitSession(from: r.clientAddress)
        try await bindToken(r.token, channel)
        let sd = try await parseClientSdp(r.offer)
        let sending = sd.media.filter {
            ($0.kind == "audio" || $0.kind == "video") && $0.port != 0 && ($0.direction == .sendonly || $0.direction == .sendrecv)
        }
        guard !sending.isEmpty else {
            throw RoomError.invalidParameter("The offer has no audio or video m-section that sends (sendonly or sendrecv).")
        }
        // What `publish` would refuse is refused before the member exists (no join/leave events).
        for m in sending { _ = try SdpNegotiation.publishedStream(m) }
        let remote = try SdpNegotiation.remoteTransport(of: sd, maxCandidates: configuration.maxRemoteCandidates)
        let name = r.memberName ?? Self.sessionName("whip")
        try permitSession(.ingest, roomName: r.roomName, memberName: name, channel: channel)
        // What `join` would refuse is refused before a room is made for it.
        try checkMemberLimits(joiningRoomNamed: r.roomName)
        let existed = rooms.contains { $0.name == r.roomName }
        let made = try await findOrCreateRoom(CreateRoomRequest(name: r.roomName), from: channel)
        let room: Room, member: LocalSFURoomMember
        do {
            (room, member) = try await joinSession(r, name: name, from: channel)
        } catch {
            // A request that fails changes nothing: the room it made goes again.
            if !existed, let id = made.objectValue?["id"]?.stringValue { discardUnusedRoom(id) }
            throw error
        }
        do {
            var answer: SessionDescriptionText?
            for (i, m) in sending.enumerated() {
                guard let mid = m.mid else { throw RoomError.invalidSdp("Every m-section needs an a=mid line.") }
                let offer = ParsedSendOffer(description: sd, section: m, remote: remote, answers: i == sending.count - 1)
                let result = try await publish(PublishRequest(memberId: member.id, contentType: m.kind, mid: mid, offer: r.offer),
                                               parsed: offer, from: channel)
                answer = result.answer
            }
            guard let answer else { throw RoomError.internalError("The session's answer could not be made.") }
            member.mediaSession?.remoteUfrag = remote.iceUfrag
            member.mediaSession?.sections = sending.compactMap { m in m.mid.map { ($0, m.kind) } }
            return MediaSessionResult(sessionId: member.mediaSession?.secret ?? "", memberId: member.id, roomId: room.id,
                                      answer: answer.sdp, etag: member.mediaSession?.etag ?? "")
        } catch {
            removeMember(member, from: room, reason: "left")
            if !existed { discardUnusedRoom(room.id) }
            flushOutbox()
            throw error
        }
    }

    public func egress(_ r: MediaSessionRequest, from channel: ClientChannel) async throws -> MediaSessionResult {
        // No `run` wraps these calls: what they emit (joins, publications, subscriptions) goes
        // out here, after the work, as `run` would send it after the response.
        defer { forgetConnection(channel); flushOutbox() }
        try admitSession(from: r.clientAddress)
        try await bindToken(r.token, channel)
        let name = Self.sessionName("whep")
        try permitSession(.egress, roomName: r.roomName, memberName: name, channel: channel)
        // The room and the publisher are looked up before the offer is read (their 404s come
        // first) and again after it (it is read off the actor: they may have gone meanwhile).
        func target() throws(RoomError) -> (Room, String, LocalSFURoomMember) {
            guard let room = rooms.first(where: { $0.name == r.roomName }) else { throw .roomNotFound("named '\(r.roomName)'") }
            guard let publisherName = r.memberName, let publisher = room.members.first(where: { $0.name == publisherName }) else {
                throw .memberNotFound(r.memberName ?? "")
            }
            return (room, publisherName, publisher)
        }
        _ = try target()
        let sd = try await parseClientSdp(r.offer)
        let (room, publisherName, publisher) = try target()
        var wanted: [(MediaDescription, RoomPublication?)] = []
        for m in sd.media where (m.kind == "audio" || m.kind == "video") && m.port != 0 && m.mid != nil
            && (m.direction == .recvonly || m.direction == .sendrecv) && !wanted.contains(where: { $0.0.kind == m.kind }) {
            wanted.append((m, room.publications.first { $0.publisherId == publisher.id && $0.contentType == m.kind && $0.stream != nil }))
        }
        guard !wanted.isEmpty else {
            throw RoomError.invalidParameter("The offer has no audio or video m-section that receives (recvonly).")
        }
        for (m, pub) in wanted {
            if let pub, let stream = pub.stream, SfuSdp.receiverCodec(in: m, for: stream.codec.codec) == nil {
                throw RoomError.codecNotSupported(stream.codec.mimeType, publicationId: pub.id)
            }
            if let pub, room.subscriptions.filter({ $0.publicationId == pub.id }).count >= pub.maxSubscribers {
                throw RoomError.maxSubscribersExceeded(pub.maxSubscribers)
            }
            if m.forwardableCodecs.isEmpty {
                throw RoomError.invalidParameter("m-section '\(m.mid ?? "")' offers no codec Minato forwards (audio: opus; video: VP8, VP9, H264 packetization-mode=1, AV1).")
            }
        }
        let remote = try SdpNegotiation.remoteTransport(of: sd, maxCandidates: configuration.maxRemoteCandidates)
        let (_, member) = try await joinSession(r, name: name, from: channel)
        do {
            let local = try await transport(.recv, of: member, in: room)
            try await applyRemoteOnce(remote, .recv, of: member, in: room, transport: local.id)
            try stillJoined(member, room)
            var lines: [EgressLine] = []
            for (m, pub) in wanted {
                guard let mid = m.mid,
                      let codec = pub.flatMap({ p in p.stream.flatMap { SfuSdp.receiverCodec(in: m, for: $0.codec.codec) } }) ?? m.forwardableCodecs.first
                else { continue }
                let ssrc = UInt32.random(in: 1...UInt32.max)
                let rtxPt = m.kind == "video" ? m.rtxPayloadType(associatedWith: codec.payloadType) : nil
                lines.append(EgressLine(mid: mid, kind: m.kind, codec: codec, rtxPayloadType: rtxPt, ssrc: ssrc,
                                        rtxSsrc: rtxPt == nil ? nil : ReceiveSlot.randomSsrc(besides: ssrc),
                                        extensions: SfuSdp.receiverExtensions(in: m)))
            }
            member.mediaSession?.follows = publisherName
            member.mediaSession?.egress = lines
            member.mediaSession?.remoteUfrag = remote.iceUfrag
            member.mediaSession?.sections = lines.map { ($0.mid, $0.kind) }
            member.recvVersion += 1
            let answer = SfuSdp.answer(toReceiverOffer: sd, streams: lines.map { $0.stream(cname: "minato-\(publisher.id.prefix(8))") },
                                       local: SdpNegotiation.localTransport(local), sessionId: member.sessionId,
                                       version: member.recvVersion).serialize()
            for (_, pub) in wanted { if let pub { try await startEgress(of: pub, to: member, in: room) } }
            return MediaSessionResult(sessionId: member.mediaSession?.secret ?? "", memberId: member.id, roomId: room.id,
                                      answer: answer, etag: member.mediaSession?.etag ?? "")
        } catch {
            removeMember(member, from: room, reason: "left")
            flushOutbox()
            throw error
        }
    }

    /// A trickle-ice-sdpfrag (RFC 8840) for a session: its candidates (and end-of-candidates)
    /// go to the session's transport. `ifMatch` must be the session's ETag (or `*`) when given.
    /// A fragment whose ICE credentials differ from the session's is an ICE restart (RFC 9725
    /// 4.4): the transport restarts ICE with the fragment's credentials and candidates, and the
    /// result is the server's new fragment (its credentials and candidates) and the session's
    /// new ETag; nil for plain trickle.
    public func trickle(session secret: String, ifMatch: String?, fragment: String) async throws -> IceRestartFragment? {
        guard let (room, member) = mediaSessionMember(secret), let session = member.mediaSession else {
            throw RoomError.sessionNotFound()
        }
        let frag = try TrickleFragment(parsing: fragment)
        // RFC 9725 4.3.1: a PATCH names the session's entity tag (or `*` for an ICE restart).
        guard let ifMatch else { throw MediaSessionError.etagMissing }
        if ifMatch != "*", ifMatch != session.etag { throw MediaSessionError.etagMismatch }
        let direction: ConnectionDirection = session.egress.isEmpty ? .send : .recv
        if let ufrag = frag.iceUfrag, ufrag != session.remoteUfrag {
            return try await restartIce(session: secret, fragment: frag, ufrag: ufrag, direction: direction, room: room, member: member)
        }
        let max = configuration.maxRemoteCandidates, held = configuration.maxPendingCandidateBytes
        for candidate in frag.candidates + (frag.endOfCandidates ? [nil] : []) {
            let c = try Validate.candidate(candidate)
            let action = try member.mutateTransport(direction) { t throws(RoomError) in try t.trickle(c, maxCount: max, maxHeldBytes: held) }
            guard case .apply(let d, let line) = action else { continue }
            let id = d.id
            try await onWorker(room) { core in try core.addRemoteCandidate(id, line) }
        }
        return nil
    }

    /// The ICE restart of a session's PATCH: new local credentials and candidates, the client's
    /// new ones applied to them, a new ETag.
    private func restartIce(session secret: String, fragment frag: TrickleFragment, ufrag: String, direction: ConnectionDirection,
                            room: Room, member: LocalSFURoomMember) async throws -> IceRestartFragment {
        guard let pwd = frag.icePwd, !pwd.isEmpty else {
            throw RoomError.invalidParameter("An ICE restart fragment needs a=ice-pwd beside its new a=ice-ufrag.")
        }
        guard frag.candidates.count <= configuration.maxRemoteCandidates else {
            throw RoomError.limitExceeded("A fragment may carry at most \(configuration.maxRemoteCandidates) candidates (media.maxRemoteCandidates).")
        }
        guard let id = member.mutateTransport(direction, { $0.description?.id }), let fingerprint = member.mutateTransport(direction, { $0.remoteFingerprint }) else {
            throw RoomError.invalidParameter("This session has no transport to restart.")
        }
        for c in frag.candidates { _ = try Validate.candidate(c) }
        let local = try await restartIce(direction, of: member, in: room, transport: id)
        guard var session = member.mediaSession, mediaSessionMember(secret) != nil else { throw RoomError.sessionNotFound() }
        // The fingerprint is the one already applied: DTLS carries on as it is.
        let parts = fingerprint.split(separator: " ", maxSplits: 1).map(String.init)
        let remote = RemoteTransportParameters(iceUfrag: ufrag, icePwd: pwd, fingerprintAlgorithm: parts.first ?? "",
                                               fingerprint: parts.count > 1 ? parts[1] : "", setup: "active",
                                               candidates: frag.candidates, endOfCandidates: frag.endOfCandidates)
        try await applyRemoteOnce(remote, direction, of: member, in: room, transport: id)
        session.remoteUfrag = ufrag
        session.etag = "\"" + Self.randomHex(16) + "\""
        member.mediaSession = session
        var lines: [String] = []
        if local.iceLite { lines.append("a=ice-lite") }
        lines.append("a=ice-ufrag:\(local.iceUfrag)")
        lines.append("a=ice-pwd:\(local.icePwd)")
        if !session.sections.isEmpty { lines.append("a=group:BUNDLE " + session.sections.map(\.mid).joined(separator: " ")) }
        // RFC 8840: candidates belong to an m-section; with BUNDLE, the first one's.
        let first = session.sections.first ?? ("0", "audio")
        lines.append("m=\(first.kind) 9 UDP/TLS/RTP/SAVPF 0")
        lines.append("a=mid:\(first.mid)")
        for c in local.candidates { lines.append("a=" + c) }
        lines.append("a=end-of-candidates")
        return IceRestartFragment(fragment: lines.joined(separator: "\r\n") + "\r\n", etag: session.etag)
    }

    /// Ends a session (WHIP/WHEP DELETE): its member leaves (reason `left`).
    public func endMediaSession(_ secret: String) throws {
        guard let (room, member) = mediaSessionMember(secret) else {
            // Ended a moment ago by its transport closing (the client's own DTLS close can
            // arrive before its DELETE): the DELETE's wish is done.
            if let ended = recentlyEndedSessions.removeValue(forKey: secret), clock.now - ended < Self.recentlyEndedFor { return }
            throw RoomError.sessionNotFound()
        }
        removeMember(member, from: room, reason: "left")
        flushOutbox()
    }

    /// Whether `secret` names a live session (for the front door's 404s).
    public func mediaSessionExists(_ secret: String) -> Bool { mediaSessionMember(secret) != nil }

    /// Whether `secret` names a session whose transport closed a moment ago
    /// (`recentlyEndedSessions`): a trickle PATCH that raced that end is answered as done, as a
    /// DELETE is (simple-whip-client, closing, sends its last candidates after its DTLS close).
    public func mediaSessionEndedRecently(_ secret: String) -> Bool {
        guard let ended = recentlyEndedSessions[secret] else { return false }
        return clock.now - ended < Self.recentlyEndedFor
    }

    // MARK: Internals

    /// Remembers a session whose transport closed (see `recentlyEndedSessions`), dropping
    /// expired entries, and the oldest when the bound is reached.
    func rememberEndedSession(_ secret: String) {
        let now = clock.now
        if recentlyEndedSessions.count >= Self.recentlyEndedLimit {
            recentlyEndedSessions = recentlyEndedSessions.filter { now - $0.value < Self.recentlyEndedFor }
            if recentlyEndedSessions.count >= Self.recentlyEndedLimit,
               let oldest = recentlyEndedSessions.min(by: { $0.value < $1.value })?.key {
                recentlyEndedSessions[oldest] = nil
            }
        }
        recentlyEndedSessions[secret] = now
    }

    /// The session named by `secret` (the id in its URL): anything but 32 hex digits is no
    /// session, without a lookup; otherwise one dictionary lookup, and the stored secret compared
    /// in constant time.
    func mediaSessionMember(_ secret: String) -> (Room, LocalSFURoomMember)? {
        guard secret.utf8.count == Self.sessionSecretDigits, secret.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) || (0x41...0x46).contains($0) }),
              let owner = mediaSessions[secret], let room = rooms.first(where: { $0.id == owner.room }),
              let member = room.member(owner.member), let s = member.mediaSession?.secret, constantTimeEquals(s, secret)
        else { return nil }
        return (room, member)
    }

    /// Hex digits of a session's secret (128 bits).
    static let sessionSecretDigits = 32

    /// A new WHIP/WHEP session may start: within `whip.maxNewSessionsPerSecPerAddress` for its
    /// client address (429; first, so one address's flood is refused as such), and under
    /// `whip.maxSessions` on the server (503). Checked before anything is parsed or made; the
    /// session count again where the session is committed (`joinSession`).
    func admitSession(from address: String) throws(RoomError) {
        guard sessionStarts.admit(address, now: clock.now) else {
            throw RoomError.limitExceeded(
                "This address started \(configuration.maxNewMediaSessionsPerSecPerAddress) sessions in the last second (whip.maxNewSessionsPerSecPerAddress); wait a second.")
        }
        try checkSessionCount()
    }

    /// Under `whip.maxSessions` on the server (503).
    private func checkSessionCount() throws(RoomError) {
        guard mediaSessions.count < configuration.maxMediaSessions else {
            throw RoomError(code: 503, name: "limitExceeded",
                            detail: "The server has its maximum of \(configuration.maxMediaSessions) WHIP/WHEP sessions (whip.maxSessions); try again later.")
        }
    }

    /// The server-wide limits a session's member and transport would break (`rooms.maxMembers`,
    /// `media.maxTransports`, and `rooms.maxMembersPerRoom` when the room exists), checked
    /// before a room is made for it; `join` and the transport check them again.
    private func checkMemberLimits(joiningRoomNamed name: String) throws(RoomError) {
        if let room = rooms.first(where: { $0.name == name }), room.members.count >= configuration.maxMembersPerRoom {
            throw .limitExceeded("The room has its maximum of \(configuration.maxMembersPerRoom) members (rooms.maxMembersPerRoom).")
        }
        guard rooms.reduce(0, { $0 + $1.members.count }) < configuration.maxMembers else {
            throw .limitExceeded("The server has its maximum of \(configuration.maxMembers) members (rooms.maxMembers).")
        }
        guard transportOwners.count + transportsBeingCreated < configuration.maxTransports else {
            throw .limitExceeded("The server has its maximum of \(configuration.maxTransports) media transports (media.maxTransports).")
        }
    }

    /// Closes a room this request made and nobody uses (no member, no event listener).
    private func discardUnusedRoom(_ id: String) {
        guard let room = rooms.first(where: { $0.id == id }), room.members.isEmpty, room.listeners.isEmpty else { return }
        close(room)
    }

    /// A session's connection exists only for its one request: its token binding and ledger go.
    private func forgetConnection(_ channel: ClientChannel) {
        sessions[channel.id] = nil
        connections[channel.id] = nil
    }

    private func bindToken(_ token: String?, _ channel: ClientChannel) async throws {
        guard verifier != nil else { return }
        guard let token else { throw RoomError.invalidAuthToken("This server requires a token: send Authorization: Bearer <token>.") }
        _ = try await authenticate(token: token, update: false, from: channel)
    }

    /// With auth on, before anything is made: the token must let member `memberName` publish
    /// (ingest; and create the room when it does not exist) or subscribe (egress) in the room.
    private func permitSession(_ kind: MediaSessionRequest.Kind, roomName: String, memberName: String,
                               channel: ClientChannel) throws {
        guard let grant = try grant(of: channel) else { return }
        if kind == .ingest, !rooms.contains(where: { $0.name == roomName }) {
            try permit(grant, roomNamed: roomName, action: "create")
        }
        let action = kind == .ingest ? "publish" : "subscribe"
        let allowed = grant.rules(forRoom: roomName).contains { rule in
            guard let m = rule.member else { return false }
            return globMatches(m.name, memberName) && m.methods.contains(action) && rule.sfuEnabled
        }
        guard allowed else {
            throw RoomError.insufficientPermissions(
                "The token does not let member '\(memberName)' \(action) in room '\(roomName)' (it needs a scope.rooms[] rule for the room whose member rule matches that name and lists \"\(action)\").")
        }
    }

    /// Joins the session's member (type `bot`; named by the request, or `whip-`/`whep-` and 8
    /// random hex digits) with the permission the session needs.
    private func joinSession(_ r: MediaSessionRequest, name: String, from channel: ClientChannel) async throws -> (Room, LocalSFURoomMember) {
        guard let room = rooms.first(where: { $0.name == r.roomName }) else { throw RoomError.roomNotFound("named '\(r.roomName)'") }
        // A broadcaster that reconnects (OBS after a network drop) posts again under its name
        // while its old session may still wait for its transport timeout: a WHIP session of that
        // name is replaced (reason `replaced`); any other member of that name is not.
        let replace = r.kind == .ingest && room.members.contains { $0.name == name && $0.mediaSession?.egress.isEmpty == true }
        // Other sessions may have started while this request read its offer: `whip.maxSessions`
        // again, before the member joins (no events for a refused session)…
        try checkSessionCount()
        let joined = try await join(JoinRequest(roomId: room.id, name: name, replace: replace, type: "bot"), from: channel)
        guard case .object(let o) = joined.member, let id = o["id"]?.stringValue, let member = room.member(id) else {
            throw RoomError.internalError("The session's member could not be made.")
        }
        // …and where the session is committed, in case `join` suspended (it does only to check a
        // room password, which a session never sends).
        do { try checkSessionCount() } catch {
            removeMember(member, from: room, reason: "left")
            throw error
        }
        let secret = Self.randomHex(Self.sessionSecretDigits)
        member.mediaSession = MediaSession(secret: secret, etag: "\"" + Self.randomHex(16) + "\"")
        mediaSessions[secret] = (room.id, member.id)
        do {
            try authorize(.member(r.kind == .ingest ? "publish" : "subscribe"), target: .member(id), from: channel)
        } catch {
            removeMember(member, from: room, reason: "left")
            throw error
        }
        return (room, member)
    }

    static func sessionName(_ prefix: String) -> String { prefix + "-" + randomHex(8) }

    static func randomHex(_ digits: Int) -> String {
        var rng = SystemRandomNumberGenerator()
        var out = ""
        while out.count < digits {
            let hex = String(rng.next() as UInt64, radix: 16)
            out += String(repeating: "0", count: 16 - hex.count) + hex
        }
        return String(out.prefix(digits))
    }

}

/// A WHIP or WHEP request, as the core takes it.
public struct MediaSessionRequest: Sendable {
    public enum Kind: Sendable { case ingest, egress }
    public var kind: Kind
    public var roomName: String
    /// Ingest: the member's name (nil: `whip-` and random hex). Egress: the publisher followed.
    public var memberName: String?
    public var offer: String
    /// The bearer token (needed when auth is on).
    public var token: String?
    /// The client's IP address (new sessions per address are limited); "" when unknown.
    public var clientAddress: String
    public init(kind: Kind, roomName: String, memberName: String?, offer: String, token: String? = nil,
                clientAddress: String = "") {
        self.kind = kind; self.roomName = roomName; self.memberName = memberName; self.offer = offer; self.token = token
        self.clientAddress = clientAddress
    }
}

public struct MediaSessionResult: Sendable {
    /// The secret that names the session in its URL.
    public let sessionId: String
    public let memberId: String
    public let roomId: String
    public let answer: String
    /// The session's entity tag, quoted.
    public let etag: String
}

/// The answer to a PATCH that restarted ICE: the server's trickle-ice-sdpfrag and the session's new ETag.
public struct IceRestartFragment: Sendable, Equatable {
    public let fragment: String
    public let etag: String
}

/// The HTTP-only outcomes of a session request (everything else is a `RoomError`).
public enum MediaSessionError: Error, Sendable, Equatable {
    /// `If-Match` names another entity tag (412).
    case etagMismatch
    /// No `If-Match` (428).
    case etagMissing
}

/// What a session member keeps beside an ordinary member's state.
struct MediaSession {
    let secret: String
    /// Changes with each ICE restart (RFC 9725 4.4.2).
    var etag: String
    /// The session's m-sections (mid, kind), for the fragment an ICE restart answers with.
    var sections: [(mid: String, kind: String)] = []
    /// The client's ICE username fragment (a PATCH with another one is an ICE restart).
    var remoteUfrag = ""
    /// Egress: the publisher followed, by name, and the answered m-sections.
    var follows: String?
    var egress: [EgressLine] = []
}

/// One m-section of an egress session, as answered.
struct EgressLine {
    let mid: String
    let kind: String
    /// The player's payload type and fmtp for the codec it gets.
    let codec: ForwardableCodec
    let rtxPayloadType: UInt8?
    let ssrc: UInt32
    let rtxSsrc: UInt32?
    let extensions: [ExtMap]
    var subscriptionId: String?

    init(mid: String, kind: String, codec: ForwardableCodec, rtxPayloadType: UInt8?, ssrc: UInt32, rtxSsrc: UInt32?,
         extensions: [ExtMap]) {
        self.mid = mid; self.kind = kind; self.codec = codec; self.rtxPayloadType = rtxPayloadType
        self.ssrc = ssrc; self.rtxSsrc = rtxSsrc; self.extensions = extensions
    }

    func stream(cname: String) -> SfuSdp.AnsweredReceiverStream {
        SfuSdp.AnsweredReceiverStream(mid: mid, codec: codec, rtxPayloadType: rtxPayloadType, ssrc: ssrc, rtxSsrc: rtxSsrc,
                                      streamId: "minato", trackId: "\(kind)-\(mid)", cname: cname, extensions: extensions)
    }
}

/// An `application/trickle-ice-sdpfrag` body (RFC 8840): ICE credentials, candidate lines and
/// end-of-candidates. Lines it does not use (`m=`, `a=mid`, …) are skipped, unknown ones too.
struct TrickleFragment {
    var iceUfrag: String?
    var icePwd: String?
    var candidates: [String] = []
    var endOfCandidates = false

    static let maxLines = 256

    init(parsing text: String) throws(RoomError) {
        var count = 0
        for raw in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            count += 1
            guard count <= Self.maxLines else { throw .limitExceeded("A trickle fragment may have at most \(Self.maxLines) lines.") }
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw[...]
            if line.hasPrefix("a=ice-ufrag:") { iceUfrag = String(line.dropFirst("a=ice-ufrag:".count)) }
            else if line.hasPrefix("a=ice-pwd:") { icePwd = String(line.dropFirst("a=ice-pwd:".count)) }
            else if line.hasPrefix("a=candidate:") { candidates.append(String(line.dropFirst(2))) }
            else if line == "a=end-of-candidates" { endOfCandidates = true }
        }
    }
}
