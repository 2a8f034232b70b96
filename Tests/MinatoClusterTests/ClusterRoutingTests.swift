import Foundation
import XCTest
@testable import MinatoCluster
import MinatoRooms
import MinatoSignaling

/// The gateway's routing table and the node link's frames, without sockets.
final class ClusterRoutingTests: XCTestCase {
    /// Every method of the protocol is routed: by the id it names, or by the gateway itself.
    /// A method added to the protocol without a route here would run on the wrong node.
    func testEveryMethodHasARoute() {
        for method in SignalingFrontDoor.methodNames {
            XCTAssertTrue(ClusterGateway.routingKeys[method] != nil || ClusterGateway.specialMethods.contains(method),
                          "\(method) has no cluster route")
        }
        for method in ClusterGateway.routingKeys.keys {
            XCTAssertTrue(SignalingFrontDoor.methodNames.contains(method), "\(method) is routed but is no method")
        }
    }

    func testNodeIdOfAnId() {
        XCTAssertEqual(ClusterConfiguration.nodeId(of: "n1.4f1c2a9e-0000-4000-8000-000000000000"), "n1")
        XCTAssertEqual(ClusterConfiguration.nodeId(of: "node-b.x"), "node-b")
        XCTAssertNil(ClusterConfiguration.nodeId(of: "4f1c2a9e-0000-4000-8000-000000000000"))
        XCTAssertNil(ClusterConfiguration.nodeId(of: ".abc"))
        XCTAssertNil(ClusterConfiguration.nodeId(of: "bad_node.abc"))
        XCTAssertNil(ClusterConfiguration.nodeId(of: String(repeating: "a", count: 33) + ".x"))
    }

    /// A node's judgement of its own load (`NodeLoad.underLimit`): transports and CPU both under
    /// `cluster.loadLimitPercent`; an old record that says nothing counts as under.
    func testLoadLimit() throws {
        func under(_ t: Int, _ cpu: Double, cores: Int = 2, limit: Int = 80) -> Bool {
            ClusterNode.underLimit(transports: t, maxTransports: 2000, cpuPercent: cpu, cores: cores, limitPercent: limit)
        }
        XCTAssertTrue(under(0, 0))
        XCTAssertTrue(under(1599, 159.9))
        XCTAssertFalse(under(1600, 0), "80% of 2000 transports")
        XCTAssertFalse(under(0, 160), "80% of two cores")
        XCTAssertTrue(under(0, 160, cores: 4))
        XCTAssertFalse(under(0, 90, cores: 0), "no core count: one core")
        XCTAssertTrue(under(19, 0, limit: 1), "1% of 2000 is 20")
        XCTAssertFalse(under(20, 0, limit: 1))
        XCTAssertFalse(ClusterNode.underLimit(transports: 0, maxTransports: 0, cpuPercent: 0, cores: 2, limitPercent: 80))
        let old = try JSONDecoder().decode(NodeLoad.self, from: Data(#"{"rooms":1,"members":2,"transports":3,"cpuPercent":4}"#.utf8))
        XCTAssertNil(old.underLimit)
    }

    func testConfigurationProblems() {
        var c = ClusterConfiguration()
        XCTAssertNil(c.problem(), "single node needs nothing")
        c.redisUrl = "redis://198.18.2.2:6379"
        XCTAssertNotNil(c.problem())
        c.advertiseUrl = "http://198.18.2.11:7880"
        XCTAssertEqual(c.problem(), "cluster.secret must be at least 32 bytes when cluster.redisUrl is set")
        c.secret = String(repeating: "s", count: 32)
        XCTAssertNil(c.problem())
        c.advertiseUrl = "http://198.18.2.11:7880/path"
        XCTAssertNotNil(c.problem())
        c.advertiseUrl = "http://198.18.2.11:7880"
        c.redisUrl = "memcached://x"
        XCTAssertNotNil(c.problem())
    }

    func testLinkFramesRoundTrip() {
        let frames: [LinkFrame] = [
            .open(channel: 7, token: nil), .open(channel: 8, token: "t.o.k"),
            .message(channel: 7, text: #"{"jsonrpc":"2.0","id":1,"method":"getRoom","params":{"roomId":"n2.x"}}"#),
            .auth(channel: 7, token: "a.b.c"), .shut(channel: 7), .closed(channel: 7, code: 4008, reason: "outgoingQueueFull"),
            .call(id: 3, op: "listRooms", channel: 7, params: [:]), .call(id: 4, op: "adminListRooms", channel: nil, params: ["x": 1]),
            .reply(id: 3, result: .success(["rooms": []])),
            .reply(id: 4, result: .failure(.serviceUnavailable("down"))),
        ]
        for frame in frames { XCTAssertEqual(LinkFrame.parse(frame.serialized()), frame) }
        for junk in ["", "[]", "{}", #"{"ch":-1,"msg":"x"}"#, #"{"ch":"1","msg":"x"}"#, #"{"call":1}"#, "{\"open\":1e99}"] {
            XCTAssertNil(LinkFrame.parse(junk), junk)
        }
    }

    func testNodeLinkCredentials() async throws {
        let a = await NodeLinkCredentials(secret: String(repeating: "k", count: 32), nodeId: "n1")
        let b = await NodeLinkCredentials(secret: String(repeating: "w", count: 32), nodeId: "n2")
        let token = try await a.mint()
        let verified = await a.verify(token)
        XCTAssertEqual(verified, "n1")
        let refused = await b.verify(token)
        XCTAssertNil(refused, "a credential signed with another secret is refused")
        let garbage = await a.verify("not-a-jwt")
        XCTAssertNil(garbage)
    }
}
