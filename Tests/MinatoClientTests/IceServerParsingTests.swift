import Foundation
import Testing
@testable import MinatoClient
import MinatoTransport

/// The Swift SDK reads `join`'s and `getIceServers`' `iceServers` (docs/protocol.md "ICE servers").
@Suite struct IceServerParsingTests {
    @Test func parsesTurnAndStunEntriesAndTheExpiry() throws {
        let json = try JSON.parse(#"""
            [{"urls":["turn:198.18.0.2:3478?transport=udp","turn:198.18.0.2:3478?transport=tcp"],
              "username":"1700000000:3f2c9a9e","credential":"kSkOoXg5OGfsEDAIsxT++cxU7f4="},
             {"urls":["stun:198.18.0.2:3478"]}, {"bad":1}]
            """#)
        let servers = IceServer.list(json)
        #expect(servers.count == 2)
        #expect(servers[0].urls.count == 2 && servers[0].username == "1700000000:3f2c9a9e")
        #expect(servers[0].credential == "kSkOoXg5OGfsEDAIsxT++cxU7f4=")
        #expect(servers[0].expiresAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(servers[1] == IceServer(urls: ["stun:198.18.0.2:3478"]) && servers[1].expiresAt == nil)
        #expect(IceServer.list(nil).isEmpty)
    }
}

/// TURN URLs (RFC 7065) as the Swift SDK's connections read them into libnice relays.
@Suite struct TurnRelayParsingTests {
    @Test func urlsGiveHostPortAndTransport() {
        #expect(IceServer.parseTurnURL("turn:198.18.0.2:3478?transport=udp")! == ("198.18.0.2", 3478, .udp))
        #expect(IceServer.parseTurnURL("turn:198.18.0.2:3478?transport=tcp")! == ("198.18.0.2", 3478, .tcp))
        #expect(IceServer.parseTurnURL("turn:198.18.0.2")! == ("198.18.0.2", 3478, .udp))
        #expect(IceServer.parseTurnURL("turns:198.18.0.2:443")! == ("198.18.0.2", 443, .tls))
        #expect(IceServer.parseTurnURL("turns:198.18.0.2")! == ("198.18.0.2", 5349, .tls))
        #expect(IceServer.parseTurnURL("turn:[2001:db8::1]:3479")! == ("2001:db8::1", 3479, .udp))
    }

    @Test func badURLsAreSkipped() {
        for url in ["stun:198.18.0.2:3478", "turn:", "turn:198.18.0.2:0", "turn:198.18.0.2:99999",
                    "turn:198.18.0.2:3478?transport=sctp", "turns:198.18.0.2?transport=udp", "turn:[2001:db8::1"] {
            #expect(IceServer.parseTurnURL(url) == nil, "\(url)")
        }
    }

    @Test func onlyEntriesWithACredentialAreRelays() {
        let servers = [IceServer(urls: ["stun:198.18.0.2:3478"]),
                       IceServer(urls: ["turn:198.18.0.2:3478?transport=udp", "turn:198.18.0.2:3478?transport=tcp"],
                                 username: "1700000000:m1", credential: "c2VjcmV0")]
        let relays = IceServer.relays(servers)
        #expect(relays.map(\.transport) == [.udp, .tcp])
        #expect(relays.allSatisfy { $0.address == "198.18.0.2" && $0.port == 3478 && $0.username == "1700000000:m1" })
    }
}
