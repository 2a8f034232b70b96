import Testing
import MinatoRooms
@testable import MinatoServer

@Suite struct TokenTests {
    static let secret = "0123456789abcdef0123456789abcdef-test"
    static let rule = AuthGrant.RoomRule(name: "lesson-*", methods: ["create"],
                                         member: .init(name: "alice", methods: ["publish", "subscribe"]),
                                         sfuEnabled: true, maxSubscribersLimit: 10)

    @Test func mintedTokenVerifiesToTheSameGrant() async throws {
        let authority = await TokenAuthority(secret: Self.secret)
        let token = try await authority.mint(appId: "app-1", rooms: [Self.rule], admin: true, ttl: .seconds(600))
        let grant = try await authority.verify(token).get()
        #expect(grant.appId == "app-1" && grant.admin)
        #expect(grant.rooms == [Self.rule])
    }

    @Test func expiredTokenIsAuthTokenExpired() async throws {
        let authority = await TokenAuthority(secret: Self.secret)
        let token = try await authority.mint(appId: "app", rooms: [Self.rule], admin: false, ttl: .seconds(-5))
        guard case .failure(let e) = await authority.verify(token) else { Issue.record("an expired token verified"); return }
        #expect(e.name == "authTokenExpired" && e.code == 401)
    }

    @Test func otherSecretAndGarbageAreInvalidAuthToken() async throws {
        let mine = await TokenAuthority(secret: Self.secret)
        let theirs = await TokenAuthority(secret: "another-secret-of-at-least-32-bytes!!")
        let token = try await theirs.mint(appId: "app", rooms: [Self.rule], admin: false, ttl: .seconds(60))
        for bad in [token, "not-a-jwt", "a.b.c", String(token.dropLast(3))] {
            guard case .failure(let e) = await mine.verify(bad) else { Issue.record("\(bad) verified"); continue }
            #expect(e.name == "invalidAuthToken" && !e.detail.isEmpty)
        }
    }

    @Test func globsMatchLikeSkyWay() {
        #expect(globMatches("*", ""))
        #expect(globMatches("*", "anything.at-all"))
        #expect(globMatches("lesson-*", "lesson-1"))
        #expect(globMatches("lesson-*", "lesson-"))
        #expect(!globMatches("lesson-*", "lessons"))
        #expect(!globMatches("lesson-*", "my-lesson-1"))
        #expect(globMatches("*-teacher", "math-teacher"))
        #expect(globMatches("a*b*c", "aXXbYYc"))
        #expect(!globMatches("a*b*c", "aXXbYY"))
        #expect(globMatches("room.%1", "room.%1"))
        #expect(!globMatches("room.1", "roomX1"))
    }
}
