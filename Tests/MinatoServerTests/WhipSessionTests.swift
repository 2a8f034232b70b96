import Foundation
import Testing
import MinatoMedia
@testable import MinatoRooms
@testable import MinatoTransport

/// What docs/protocol.md "WHIP and WHEP" says of a session, against `RoomService` with a real
/// media worker (nothing connects; no timing is measured): the ids it hands out, the trickle
/// fragment's line limit, and the DELETE that arrives after the session's transport closed —
/// 200 within 30 s, from a table of at most 1024 sessions. Time is simulated by writing the
/// instant a session ended into that table, never by waiting.
@Suite struct WhipSessionTests {
    static func isHex(_ s: Substring, count: Int) -> Bool {
        s.count == count && s.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// A WHIP session (each from an address of its own: no per-address rate limit here).
    static func ingest(_ s: RoomService, room: String = "live", name: String? = nil, ssrc: UInt32 = 1000) async throws
        -> MediaSessionResult {
        let r = MediaSessionRequest(kind: .ingest, roomName: room, memberName: name,
                                    offer: ConcurrentLimitTests.offer(mid: "0", ssrc: ssrc), clientAddress: "198.18.1.\(ssrc % 250)")
        return try await s.ingest(r, from: ClientChannel(id: UInt64(ssrc)) { _ in })
    }

    /// A player's offer: one recvonly VP8 m-section.
    static let playerOffer =
        "v=0\r\no=- 2 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
        + "a=ice-ufrag:efgh\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
        + "a=fingerprint:sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89\r\n"
        + "a=setup:actpass\r\n"
        + "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 127.0.0.1\r\na=mid:0\r\na=recvonly\r\na=rtcp-mux\r\n"
        + "a=rtpmap:96 VP8/90000\r\n"

    /// README.md and protocol.md: the session URL is 32 hex digits, the ETag 16 hex digits in
    /// quotes, and a session member without `?name=` is `whip-` (a WHEP player always `whep-`)
    /// and 8 hex digits.
    @Test func sessionIdsEtagsAndMemberNamesHaveTheDocumentedShape() async throws {
        let (s, worker) = try ConcurrentLimitTests.service()
        defer { worker.shutdown() }
        let whip = try await Self.ingest(s)
        #expect(Self.isHex(whip.sessionId[...], count: 32), "session id \(whip.sessionId)")
        #expect(whip.etag.hasPrefix("\"") && whip.etag.hasSuffix("\"") && Self.isHex(whip.etag.dropFirst().dropLast(), count: 16),
                "ETag \(whip.etag)")
        let publisher = try #require(await s.memberName(whip.memberId))
        #expect(publisher.hasPrefix("whip-") && Self.isHex(publisher.dropFirst(5), count: 8), "WHIP member \(publisher)")

        let whep = try await s.egress(MediaSessionRequest(kind: .egress, roomName: "live", memberName: publisher,
                                                          offer: Self.playerOffer, clientAddress: "198.18.2.1"),
                                      from: ClientChannel(id: 9) { _ in })
        #expect(Self.isHex(whep.sessionId[...], count: 32), "session id \(whep.sessionId)")
        #expect(whep.etag.hasPrefix("\"") && whep.etag.hasSuffix("\"") && Self.isHex(whep.etag.dropFirst().dropLast(), count: 16),
                "ETag \(whep.etag)")
        #expect(whep.etag != whip.etag && whep.sessionId != whip.sessionId)
        let player = try #require(await s.memberName(whep.memberId))
        #expect(player.hasPrefix("whep-") && Self.isHex(player.dropFirst(5), count: 8), "WHEP member \(player)")
    }

    /// protocol.md "Statuses": a fragment of more than 256 lines is 429 `limitExceeded`; 256
    /// lines are read.
    @Test func aTrickleFragmentOfMoreThan256LinesIs429() async throws {
        let (s, worker) = try ConcurrentLimitTests.service()
        defer { worker.shutdown() }
        let whip = try await Self.ingest(s)
        let lines = { (n: Int) in (0..<n).map { "a=x-unused-\($0)\r\n" }.joined() }
        _ = try await s.trickle(session: whip.sessionId, ifMatch: whip.etag, fragment: lines(256))
        do {
            _ = try await s.trickle(session: whip.sessionId, ifMatch: whip.etag, fragment: lines(257))
            Issue.record("a 257-line fragment was accepted")
        } catch let e as RoomError {
            #expect(e.code == 429 && e.name == "limitExceeded", "\(e)")
            #expect(e.detail.contains("256"), "\(e.detail)")
        }
        #expect(TrickleFragment.maxLines == 256)
    }

    /// protocol.md "ICE restart" (WHIP): a PATCH with new credentials answers the server's new
    /// fragment (ice-lite, new ufrag and pwd, the session's mid, candidates, end-of-candidates)
    /// and a new ETag; the old ETag is then refused; a new ufrag without a pwd is 400.
    @Test func aPatchWithNewCredentialsRestartsIce() async throws {
        let (s, worker) = try ConcurrentLimitTests.service()
        defer { worker.shutdown() }
        let whip = try await Self.ingest(s)
        let answerUfrag = try #require(whip.answer.split(separator: "\r\n").first { $0.hasPrefix("a=ice-ufrag:") })
        do {
            _ = try await s.trickle(session: whip.sessionId, ifMatch: whip.etag, fragment: "a=ice-ufrag:wxyz\r\n")
            Issue.record("a restart without a pwd was accepted")
        } catch let e as RoomError {
            #expect(e.code == 400 && e.detail.contains("ice-pwd"), "\(e)")
        }
        let frag = "a=ice-ufrag:wxyz\r\na=ice-pwd:zyxwvutsrqponmlkjihgfedc\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:0\r\n"
            + "a=candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host\r\na=end-of-candidates\r\n"
        let restart = try #require(try await s.trickle(session: whip.sessionId, ifMatch: whip.etag, fragment: frag))
        let lines = restart.fragment.split(separator: "\r\n").map(String.init)
        #expect(lines.first == "a=ice-lite")
        let ufrag = try #require(lines.first { $0.hasPrefix("a=ice-ufrag:") })
        #expect(ufrag != String(answerUfrag), "the server's credentials are new")
        #expect(lines.contains { $0.hasPrefix("a=ice-pwd:") })
        #expect(lines.contains("a=group:BUNDLE 0") && lines.contains("m=video 9 UDP/TLS/RTP/SAVPF 0") && lines.contains("a=mid:0"))
        #expect(lines.contains { $0.hasPrefix("a=candidate:") } && lines.last == "a=end-of-candidates")
        #expect(restart.etag != whip.etag && restart.etag.hasPrefix("\""))
        await #expect(throws: MediaSessionError.etagMismatch) {
            _ = try await s.trickle(session: whip.sessionId, ifMatch: whip.etag, fragment: "a=end-of-candidates\r\n")
        }
        #expect(try await s.trickle(session: whip.sessionId, ifMatch: restart.etag, fragment: "a=end-of-candidates\r\n") == nil)
    }

    /// protocol.md: DELETE is 200 within 30 s after the session ended because its transport
    /// closed; 404 `sessionNotFound` after that, after a second DELETE, and after a kick.
    @Test func deleteAfterTheTransportClosedIs200ForThirtySeconds() async throws {
        let (s, worker) = try ConcurrentLimitTests.service()
        defer { worker.shutdown() }
        // Just ended by its transport: DELETE succeeds, once.
        let a = try await Self.ingest(s, name: "a", ssrc: 1001)
        #expect(await s.endSessionByTransport(a.sessionId))
        #expect(await s.mediaSessionExists(a.sessionId) == false)
        // A trickle PATCH that raced the end is answered as done too (204), and changes nothing.
        #expect(await s.mediaSessionEndedRecently(a.sessionId))
        try await s.endMediaSession(a.sessionId)
        #expect(await Self.notFound { try await s.endMediaSession(a.sessionId) })

        // Ended 29 s ago: still 200. Ended 30 s ago: 404.
        let b = try await Self.ingest(s, name: "b", ssrc: 1002)
        let c = try await Self.ingest(s, name: "c", ssrc: 1003)
        #expect(await s.endSessionByTransport(b.sessionId))
        #expect(await s.endSessionByTransport(c.sessionId))
        await s.setEnded(b.sessionId, ago: .seconds(29))
        await s.setEnded(c.sessionId, ago: .seconds(30))
        #expect(await s.mediaSessionEndedRecently(b.sessionId))
        #expect(await s.mediaSessionEndedRecently(c.sessionId) == false)
        try await s.endMediaSession(b.sessionId)
        #expect(await Self.notFound { try await s.endMediaSession(c.sessionId) })

        // Kicked (not its transport): 404 at once.
        let d = try await Self.ingest(s, name: "d", ssrc: 1004)
        #expect(await s.endSession(d.sessionId, reason: "kicked"))
        #expect(await s.mediaSessionEndedRecently(d.sessionId) == false)
        #expect(await Self.notFound { try await s.endMediaSession(d.sessionId) })
        #expect(RoomService.recentlyEndedFor == .seconds(30))
    }

    /// protocol.md: at most 1024 ended sessions are remembered. Expired ones go first; when
    /// all are younger than 30 s, the oldest goes.
    @Test func atMost1024EndedSessionsAreRemembered() async throws {
        let s = RoomSafetyTests.service()
        let secrets = (0..<1100).map { String(format: "%032x", $0) }
        for (i, secret) in secrets.enumerated() {
            await s.rememberEndedSession(secret)
            if i < 1024 { await s.setEnded(secret, ago: .milliseconds(10_000 - i)) }   // the first is the oldest
        }
        #expect(await s.recentlyEndedSessions.count == 1024)
        let kept = await Set(s.recentlyEndedSessions.keys)
        #expect(kept == Set(secrets[76...]), "the oldest 76 should have gone")
        // Half of them 30 s old: the next one to end drops those (and nothing younger).
        for secret in secrets[76..<588] { await s.setEnded(secret, ago: .seconds(31)) }
        await s.rememberEndedSession(String(format: "%032x", 5000))
        #expect(await s.recentlyEndedSessions.count == 1024 - 512 + 1)
        #expect(RoomService.recentlyEndedLimit == 1024)
    }

    static func notFound(_ body: () async throws -> Void) async -> Bool {
        do { try await body(); return false } catch let e as RoomError { return e.name == "sessionNotFound" && e.code == 404 } catch {
            return false
        }
    }
}

extension RoomService {
    func memberName(_ id: String) -> String? { findMember(id)?.1.name }

    /// Ends session `secret` as its transport closing would (reason `transportClosed`).
    func endSessionByTransport(_ secret: String) -> Bool { endSession(secret, reason: "transportClosed") }

    func endSession(_ secret: String, reason: String) -> Bool {
        guard let (room, member) = mediaSessionMember(secret) else { return false }
        removeMember(member, from: room, reason: reason)
        return true
    }

    /// Writes that session `secret` ended `ago` before now (the simulated clock).
    func setEnded(_ secret: String, ago: Duration) { recentlyEndedSessions[secret] = clock.now - ago }
}
