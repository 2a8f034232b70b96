import Foundation
import Testing
@testable import MinatoRooms
@testable import MinatoServer

/// TURN for clients (issue 25 item 2): coturn's `use-auth-secret` credentials, the
/// `media.turn.*` configuration, `join`'s `iceServers` and `getIceServers`, WHIP/WHEP `Link`s.
@Suite struct TurnCredentialTests {
    static let secret = "minato-turn-secret-0123"
    static let memberId = "3f2c9a9e-1111-4222-8333-444455556666"

    /// The expected values were computed apart from Swift, with OpenSSL:
    /// `printf '%s' "1700000000:3f2c9a9e-…" | openssl dgst -sha1 -hmac "minato-turn-secret-0123" -binary | base64`.
    @Test func credentialIsCoturnsRestSchemeHmac() {
        let c = IceServerConfiguration.turnCredential(secret: Self.secret, id: Self.memberId, expiresAt: 1_700_000_000)
        #expect(c.username == "1700000000:3f2c9a9e-1111-4222-8333-444455556666")
        #expect(c.password == "kSkOoXg5OGfsEDAIsxT++cxU7f4=")
        #expect(c.expiresAt == 1_700_000_000)
        // A cluster node's id (with its prefix and dot) and another secret.
        let d = IceServerConfiguration.turnCredential(secret: "0123456789abcdef", id: "n2.abc", expiresAt: 1_700_086_400)
        #expect(d.username == "1700086400:n2.abc" && d.password == "HpdrHplgFpzo3bDw8/fQVs1/TX8=")
    }

    @Test func credentialExpiresTtlAfterNow() throws {
        var c = IceServerConfiguration()
        #expect(c.credential(for: "m", now: Date()) == nil)
        c.turnUrls = ["turn:198.18.0.2:3478?transport=tcp"]
        c.turnSecret = Self.secret
        c.turnTtlSec = 600
        let now = Date(timeIntervalSince1970: 1_699_999_400)
        let cred = try #require(c.credential(for: Self.memberId, now: now))
        #expect(cred.expiresAt == 1_700_000_000)
        #expect(cred.password == "kSkOoXg5OGfsEDAIsxT++cxU7f4=")
    }

    @Test func urlsAreCheckedAsRfc7064And7065Say() {
        for good in ["turn:turn.example.com", "turn:198.18.0.2:3478?transport=udp", "turn:host:3478?transport=tcp",
                     "turns:turn.example.com:443", "turns:host:443?transport=tcp", "stun:198.18.0.2:3478",
                     "turn:[2001:db8::1]:3478?transport=udp", "TURN:Host.Example:3478"] {
            #expect(IceServerConfiguration.urlProblem(good) == nil, "\(good)")
        }
        for bad in ["http://turn.example.com", "turn:", "turn://host:3478", "turn:host:0", "turn:host:65536",
                    "turn:host:34x8", "turn:host:3478?transport=sctp", "turns:host:443?transport=udp",
                    "stun:host:3478?transport=udp", "turn:ho st:3478", "turn:[::1:3478", "turn:[zz]:3478",
                    "turn:host:3478?transport=udp&x=1", "turn:user@host:3478"] {
            #expect(IceServerConfiguration.urlProblem(bad) != nil, "\(bad)")
        }
    }

    @Test func configurationErrorsAreClearAtStart() {
        func message(_ env: [String: String]) -> String? {
            do { _ = try ServerConfiguration.load(file: nil, environment: env); return nil } catch { return error.message }
        }
        let url = "turn:198.18.0.2:3478?transport=tcp"
        #expect(message(["MINATO_MEDIA_TURN_URLS": url])?.contains("media.turn.secret must be set") == true)
        #expect(message(["MINATO_MEDIA_TURN_SECRET": Self.secret])?.contains("media.turn.urls is empty") == true)
        #expect(message(["MINATO_MEDIA_TURN_URLS": url, "MINATO_MEDIA_TURN_SECRET": "short"])?.contains("at least 16 bytes") == true)
        #expect(message(["MINATO_MEDIA_TURN_URLS": "turn://198.18.0.2", "MINATO_MEDIA_TURN_SECRET": Self.secret])?
            .contains("MINATO_MEDIA_TURN_URLS") == true)
        #expect(message(["MINATO_MEDIA_TURN_URLS": url, "MINATO_MEDIA_TURN_SECRET": Self.secret, "MINATO_MEDIA_TURN_TTL_SEC": "5"])?
            .contains("60...604800") == true)
        var c = ServerConfiguration()
        do {
            try c.apply(yaml: "media:\n  turn:\n    urls: [\"turn:h:3478?transport=quic\"]\n", source: "t.yaml")
            Issue.record("a bad transport was accepted")
        } catch {
            #expect(error.message.contains("t.yaml: media.turn.urls") && error.message.contains("transport"))
        }
        // A good configuration; the secret is never shown among the effective values.
        let ok = try? ServerConfiguration.load(file: nil, environment: [
            "MINATO_MEDIA_TURN_URLS": "\(url),turns:turn.example.com:443", "MINATO_MEDIA_TURN_SECRET": Self.secret,
            "MINATO_MEDIA_TURN_TTL_SEC": "3600"])
        #expect(ok?.turn.turnUrls == [url, "turns:turn.example.com:443"] && ok?.turn.turnTtlSec == 3600)
        #expect(ok?.effectiveValues.contains { $0.value.contains(Self.secret) } == false)
        #expect(ok?.effectiveValues.first { $0.key == "media.turn.secret" }?.value == "(set)")
        #expect(ServerConfiguration().turn.turnTtlSec == 86_400 && ServerConfiguration().turn.turnUrls.isEmpty)
    }

    static func turnService(static staticUrls: [String] = ["stun:198.18.0.2:3478", "turn:static.example:3478"]) -> RoomService {
        RoomSafetyTests.service { c in
            c.iceServers.turnUrls = ["turn:198.18.0.2:3478?transport=udp", "turn:198.18.0.2:3478?transport=tcp"]
            c.iceServers.turnSecret = Self.secret
            c.iceServers.turnTtlSec = 3600
            c.iceServers.staticUrls = staticUrls
        }
    }

    /// Checks one `iceServers` array: the TURN entry with a credential for `memberId` expiring
    /// about ttl from now, then the static stun: URLs (the credential-less turn: one is left out).
    static func checkIceServers(_ value: JSONValue?, memberId: String) throws -> String {
        guard case .array(let servers)? = value else { Issue.record("no iceServers"); return "" }
        #expect(servers.count == 2)
        let turn = try #require(servers.first)
        #expect(turn["urls"] == ["turn:198.18.0.2:3478?transport=udp", "turn:198.18.0.2:3478?transport=tcp"])
        let username = try #require(turn["username"]?.stringValue)
        let parts = username.split(separator: ":", maxSplits: 1).map(String.init)
        #expect(parts.count == 2 && parts.last == memberId)
        let expiry = try #require(Int(parts[0]))
        let now = Int(Date().timeIntervalSince1970)
        #expect(expiry >= now + 3600 - 5 && expiry <= now + 3600 + 5)
        let expected = IceServerConfiguration.turnCredential(secret: Self.secret, id: memberId, expiresAt: expiry).password
        #expect(turn["credential"]?.stringValue == expected)
        #expect(turn.objectValue?.keys.sorted() == ["credential", "urls", "username"])
        #expect(servers.last == ["urls": ["stun:198.18.0.2:3478"]])
        return username
    }

    @Test func joinResultCarriesIceServersAndGetIceServersRenewsThem() async throws {
        let s = Self.turnService()
        let owner = RoomSafetyTests.Client(id: 1), other = RoomSafetyTests.Client(id: 2)
        let room = try await RoomSafetyTests.call(s, owner, "createRoom", ["name": "turn"])
        let roomId = try #require(room["room"]?["id"]?.stringValue)
        let joined = try await RoomSafetyTests.call(s, owner, "join", ["roomId": .string(roomId), "name": "alice"])
        let memberId = try #require(joined["member"]?["id"]?.stringValue)
        _ = try Self.checkIceServers(joined["iceServers"], memberId: memberId)
        // Credentials are only in the member's own results: not in events, getRoom or Member JSON.
        let view = try await RoomSafetyTests.call(s, other, "getRoom", ["roomId": .string(roomId)])
        #expect(!view.serialized().contains("credential") && !view.serialized().contains("iceServers"))

        let renewed = try await RoomSafetyTests.call(s, owner, "getIceServers", ["memberId": .string(memberId)])
        #expect(renewed.objectValue?.keys.sorted() == ["iceServers"])
        _ = try Self.checkIceServers(renewed["iceServers"], memberId: memberId)
        // Member-scoped like the other member requests.
        #expect(await RoomSafetyTests.errorName {
            try await RoomSafetyTests.call(s, other, "getIceServers", ["memberId": .string(memberId)])
        } == "notJoined")
        #expect(await RoomSafetyTests.errorName {
            try await RoomSafetyTests.call(s, owner, "getIceServers", ["memberId": "00000000-0000-0000-0000-000000000000"])
        } == "memberNotFound")
        #expect(await RoomSafetyTests.errorName { try await RoomSafetyTests.call(s, owner, "getIceServers", [:]) } == "invalidParams")
    }

    @Test func withoutIceServersConfiguredJoinHasNone() async throws {
        let s = RoomSafetyTests.service()
        let c = RoomSafetyTests.Client(id: 1)
        let room = try await RoomSafetyTests.call(s, c, "createRoom", ["name": "plain"])
        let joined = try await RoomSafetyTests.call(s, c, "join", ["roomId": room["room"]?["id"] ?? .null, "name": "bob"])
        #expect(joined["iceServers"] == nil)
        #expect(joined.objectValue?.keys.sorted() == ["member", "reconnectSecret", "room"])
        let memberId = try #require(joined["member"]?["id"]?.stringValue)
        let renewed = try await RoomSafetyTests.call(s, c, "getIceServers", ["memberId": .string(memberId)])
        #expect(renewed == ["iceServers": []])
    }

    @Test func whipLinkHeadersFollowRfc9725() {
        let server = IceServer(urls: ["turn:198.18.0.2:3478?transport=udp", "turns:t.example:443"],
                               username: "1700000000:m1", credential: "kSkOoXg5OGfsEDAIsxT++cxU7f4=")
        #expect(server.linkValues == [
            #"<turn:198.18.0.2:3478?transport=udp>; rel="ice-server"; username="1700000000:m1"; credential="kSkOoXg5OGfsEDAIsxT++cxU7f4="; credential-type="password""#,
            #"<turns:t.example:443>; rel="ice-server"; username="1700000000:m1"; credential="kSkOoXg5OGfsEDAIsxT++cxU7f4="; credential-type="password""#,
        ])
        #expect(IceServer(urls: ["stun:s:3478"], username: nil, credential: nil).linkValues == [#"<stun:s:3478>; rel="ice-server""#])
    }
}
