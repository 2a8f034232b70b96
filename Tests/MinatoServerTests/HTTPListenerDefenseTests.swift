import Testing
import NIOCore
import NIOEmbedded
import NIOHTTP1
@testable import MinatoServer

/// The HTTP listener's own handlers on an `EmbeddedChannel` (no sockets, a manual clock): the
/// connection gate's 503, the first-request deadline, and the WebSocket handshake's origin check.
@Suite struct HTTPListenerDefenseTests {
    static func address(_ ip: String, _ port: Int) throws -> SocketAddress { try SocketAddress(ipAddress: ip, port: port) }

    @Test func aConnectionOverTheLimitGets503NamingIt() throws {
        let gate = ConnectionGate(maxConnections: 10, maxConnectionsPerAddress: 1)
        let first = EmbeddedChannel(handler: ConnectionGateHandler(gate: gate))
        try first.connect(to: Self.address("198.18.0.1", 1000)).wait()
        #expect(gate.openConnections == 1)
        #expect(try first.readOutbound(as: ByteBuffer.self) == nil)

        let second = EmbeddedChannel(handler: ConnectionGateHandler(gate: gate))
        try second.connect(to: Self.address("198.18.0.1", 1001)).wait()
        let answer = try #require(try second.readOutbound(as: ByteBuffer.self))
        let text = String(buffer: answer)
        #expect(text.hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(text.contains("Connection: close\r\n") && text.contains("server.maxConnectionsPerAddress"))
        // (EmbeddedChannel closes fully where a socket shuts only its output; the real half-close,
        // 503 then EOF, is in Tests/interop/test_hostile_http.py.)
        #expect(!second.isActive)
        #expect(gate.openConnections == 1)

        // Another address is not limited by the first one's count.
        let other = EmbeddedChannel(handler: ConnectionGateHandler(gate: gate))
        try other.connect(to: Self.address("198.18.0.2", 1000)).wait()
        try other.writeInbound(ByteBuffer(string: "GET"))
        #expect(try other.readInbound(as: ByteBuffer.self).map { String(buffer: $0) } == "GET")
        #expect(gate.openConnections == 2)

        _ = try first.finish()
        _ = try other.finish()
        _ = try? second.finish()
        #expect(gate.openConnections == 0)
    }

    /// decoder -> encoder -> FirstRequestHandler, as in the server (the upgrade handler after it
    /// is left out: what reaches the end of the pipeline is what it would get).
    static func firstRequestChannel(timeout: TimeAmount = .seconds(3), allowed: Set<String> = [])
        throws -> (EmbeddedChannel, EventLoopFuture<Bool>) {
        let channel = EmbeddedChannel()
        let promise = channel.eventLoop.makePromise(of: Bool.self)
        try channel.pipeline.syncOperations.addHandlers([
            ByteToMessageHandler(HTTPRequestDecoder()), HTTPResponseEncoder(),
            FirstRequestHandler(timeout: timeout, origins: OriginPolicy(listed: allowed), firstRequest: promise),
        ])
        try channel.connect(to: Self.address("127.0.0.1", 40000)).wait()
        return (channel, promise.futureResult)
    }

    static func handshake(origin: String?) -> String {
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:7880\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            + (origin.map { "Origin: \($0)\r\n" } ?? "") + "\r\n"
    }

    @Test func aHalfSentHeadIsClosedAtTheDeadline() throws {
        let (channel, firstRequest) = try Self.firstRequestChannel(timeout: .seconds(3))
        try channel.writeInbound(ByteBuffer(string: "GET /healthz HTTP/1.1\r\nHost: x\r\n"))
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(2900))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(200))
        #expect(!channel.isActive)
        #expect(try firstRequest.wait() == false)
    }

    @Test func aWholeHeadInTimePassesAndTheHandlerLeaves() throws {
        let (channel, firstRequest) = try Self.firstRequestChannel(timeout: .seconds(3))
        try channel.writeInbound(ByteBuffer(string: Self.handshake(origin: "http://127.0.0.1:7880")))
        guard case .head(let head) = try #require(try channel.readInbound(as: HTTPServerRequestPart.self)) else {
            Issue.record("the head did not pass")
            return
        }
        #expect(head.uri == "/ws")
        #expect(try firstRequest.wait() == true)
        #expect(throws: (any Error).self) { try channel.pipeline.syncOperations.handler(type: FirstRequestHandler.self) }
        // Past the deadline nothing closes it: a WebSocket's life is its own after this.
        channel.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(channel.isActive)
        _ = try channel.finish()
    }

    @Test func aWebSocketHandshakeFromAForeignPageGets403() throws {
        let (channel, firstRequest) = try Self.firstRequestChannel()
        try channel.writeInbound(ByteBuffer(string: Self.handshake(origin: "http://evil.example")))
        #expect(try channel.readInbound(as: HTTPServerRequestPart.self) == nil)
        var text = ""
        while let part = try channel.readOutbound(as: IOData.self) {
            if case .byteBuffer(let b) = part { text += String(buffer: b) }
        }
        #expect(text.hasPrefix("HTTP/1.1 403 Forbidden\r\n"))
        #expect(text.contains("server.allowedOrigins") && text.lowercased().contains("connection: close"))
        #expect(try firstRequest.wait() == false)
        #expect(!channel.isActive)
    }

    @Test func handshakesWithoutOriginOrFromAListedOriginPass() throws {
        for (origin, allowed) in [(nil, Set<String>()), ("http://app.example", ["http://app.example"])] as [(String?, Set<String>)] {
            let (channel, firstRequest) = try Self.firstRequestChannel(allowed: allowed)
            try channel.writeInbound(ByteBuffer(string: Self.handshake(origin: origin)))
            #expect(try channel.readInbound(as: HTTPServerRequestPart.self) != nil, "\(origin ?? "no origin")")
            #expect(try firstRequest.wait() == true)
            _ = try channel.finish()
        }
    }
}
