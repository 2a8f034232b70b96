import Foundation
import Testing
@testable import MinatoClient

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
