internal import Hummingbird
internal import HummingbirdCore
internal import HummingbirdWebSocket
internal import Logging
internal import Metrics
internal import NIOCore
internal import NIOHTTP1
internal import Synchronization
internal import Foundation

// How the HTTP listener defends itself (docs/protocol.md "Limits", the paragraph on connections; docs/architecture.md "Threads and who owns what"):
//
//   socket -> ConnectionGateHandler -> HTTP decoder -> FirstRequestHandler -> upgrade handler -> …
//
// `ConnectionGateHandler` counts every connection against `server.maxConnections` and
// `server.maxConnectionsPerAddress` and answers one over either with 503.
// `FirstRequestHandler` closes a connection whose first request head does not arrive within
// `server.idleTimeoutSec` and refuses a WebSocket handshake from a foreign page (403); it leaves
// the pipeline at the first head, so WebSockets never see it. After the first request,
// Hummingbird's own idle timeout (the same `server.idleTimeoutSec`) closes an HTTP connection
// that stays idle or half-sends a later request.

/// Counts the open HTTP and WebSocket connections, in total and per client IP address, and
/// refuses one beyond `server.maxConnections` or `server.maxConnectionsPerAddress`. One per
/// server, shared by every connection's `ConnectionGateHandler` on any event loop, so the counts
/// live behind a mutex (held for one dictionary update).
final class ConnectionGate: Sendable {
    /// Which limit refused a connection.
    enum Refusal: String, Sendable {
        case maxConnections
        case maxConnectionsPerAddress

        var configKey: String { "server." + rawValue }
    }

    struct Counts {
        var total = 0
        var perAddress: [String: Int] = [:]
    }

    let maxConnections: Int
    let maxConnectionsPerAddress: Int
    private let counts = Mutex(Counts())
    private let refusedTotal: Counter
    private let refusedPerAddress: Counter
    private let open: Gauge

    init(maxConnections: Int, maxConnectionsPerAddress: Int) {
        self.maxConnections = maxConnections
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
        refusedTotal = Counter(label: "minato_http_connections_refused_total", dimensions: [("reason", Refusal.maxConnections.rawValue)])
        refusedPerAddress = Counter(label: "minato_http_connections_refused_total",
                                    dimensions: [("reason", Refusal.maxConnectionsPerAddress.rawValue)])
        open = Gauge(label: "minato_http_connections_open")
    }

    /// Takes a slot for a new connection from `address`, or says which limit refuses it.
    func admit(_ address: String) -> Refusal? {
        let refusal: Refusal? = counts.withLock { c in
            if c.total >= maxConnections { return .maxConnections }
            let n = c.perAddress[address, default: 0]
            if n >= maxConnectionsPerAddress { return .maxConnectionsPerAddress }
            c.total += 1
            c.perAddress[address] = n + 1
            open.record(c.total)
            return nil
        }
        switch refusal {
        case .maxConnections: refusedTotal.increment()
        case .maxConnectionsPerAddress: refusedPerAddress.increment()
        case nil: break
        }
        return refusal
    }

    /// Gives back the slot `admit(address)` took.
    func release(_ address: String) {
        counts.withLock { c in
            c.total -= 1
            let n = c.perAddress[address, default: 1] - 1
            c.perAddress[address] = n > 0 ? n : nil
            open.record(c.total)
        }
    }

    /// Open connections: all of them, and those from `address`.
    var openConnections: Int { counts.withLock { $0.total } }
    func openConnections(from address: String) -> Int { counts.withLock { $0.perAddress[address, default: 0] } }

    /// The plain-text body of the 503 a refused connection gets.
    func refusalText(_ refusal: Refusal) -> String {
        switch refusal {
        case .maxConnections:
            return "\(refusal.rawValue): the server has \(maxConnections) connections open (\(refusal.configKey)); try again later\n"
        case .maxConnectionsPerAddress:
            return "\(refusal.rawValue): your address has \(maxConnectionsPerAddress) connections open (\(refusal.configKey)); close some first\n"
        }
    }
}

/// The first handler of every HTTP connection's pipeline (raw bytes): takes the connection's
/// slot in the `ConnectionGate` when it becomes active and gives it back when it closes. A
/// connection the gate refuses is answered `503 Service Unavailable` naming the limit, its
/// output is shut, whatever it sends is dropped, and it is closed once the peer closes (or
/// after `lingerTime`): closing at once could reset it before the client read the answer.
/// Lives on the connection's event loop.
final class ConnectionGateHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum State {
        case new
        case admitted(address: String)
        case refused
        case closed
    }

    static let lingerTime = TimeAmount.seconds(2)
    /// Shared by all connections (passed by argument).
    private let gate: ConnectionGate
    private var state = State.new

    init(gate: ConnectionGate) { self.gate = gate }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { admit(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
    }

    func channelActive(context: ChannelHandlerContext) {
        admit(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .refused = state { return }
        context.fireChannelRead(data)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .refused = state, let e = event as? ChannelEvent, e == .inputClosed {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func admit(context: ChannelHandlerContext) {
        guard case .new = state else { return }
        let address = context.channel.remoteAddress?.ipAddress ?? ""
        guard let refusal = gate.admit(address) else {
            state = .admitted(address: address)
            return
        }
        state = .refused
        let body = gate.refusalText(refusal)
        let head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            + "Content-Length: \(body.utf8.count)\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: head + body)), promise: nil)
        context.close(mode: .output, promise: nil)
        let channel = context.channel
        context.eventLoop.scheduleTask(in: Self.lingerTime) { channel.close(promise: nil) }
    }

    private func release() {
        if case .admitted(let address) = state { gate.release(address) }
        state = .closed
    }
}

/// Sits between the HTTP decoder and the WebSocket upgrade handler until the connection's first
/// request head arrives. It closes the connection if no whole head arrives within
/// `server.idleTimeoutSec` (half-sent or trickled headers: Hummingbird's idle timeout starts
/// only with the first request), if the head cannot be parsed, or if the server begins a
/// graceful shutdown meanwhile; and it answers a WebSocket handshake from a page whose origin
/// `server.allowedOrigins` does not allow with 403. At the head it leaves the pipeline, so it
/// never sees WebSocket traffic. Completes `firstRequest` with whether a request went on to
/// Hummingbird. Lives on the connection's event loop.
final class FirstRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    enum State {
        case waiting
        case refused
        case passed
    }

    private let timeout: TimeAmount
    private let origins: OriginPolicy
    /// Completed once (allocated by `GatedHTTPChannel.setup`).
    private let firstRequest: EventLoopPromise<Bool>
    private var state = State.waiting
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount, origins: OriginPolicy, firstRequest: EventLoopPromise<Bool>) {
        self.timeout = timeout
        self.origins = origins
        self.firstRequest = firstRequest
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        firstRequest.succeed(state == .passed)
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        if state == .waiting { firstRequest.succeed(false) }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch state {
        case .refused: return
        case .passed: context.fireChannelRead(data); return
        case .waiting: break
        }
        guard case .head(let head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        deadline?.cancel()
        deadline = nil
        if Self.isWebSocketHandshake(head),
           origins.verdict(origin: head.headers.first(name: "origin"), host: head.headers.first(name: "host")) == .refused {
            refuse(context: context, origin: head.headers.first(name: "origin") ?? "")
            return
        }
        state = .passed
        firstRequest.succeed(true)
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A head the decoder cannot parse (or one over its size limits): nothing will follow.
        guard state == .waiting else { return context.fireErrorCaught(error) }
        close(context: context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, state == .waiting { close(context: context) }
        context.fireUserInboundEventTriggered(event)
    }

    static func isWebSocketHandshake(_ head: HTTPRequestHead) -> Bool {
        head.headers["upgrade"].contains { $0.lowercased().contains("websocket") }
    }

    private func arm(context: ChannelHandlerContext) {
        guard deadline == nil, state == .waiting else { return }
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            deadline = nil
            guard state == .waiting else { return }
            Counter(label: "minato_http_connections_closed_total", dimensions: [("reason", "idleTimeout")]).increment()
            close(context: context)
        }
    }

    private func close(context: ChannelHandlerContext) {
        state = .refused
        firstRequest.succeed(false)
        context.close(promise: nil)
    }

    private func refuse(context: ChannelHandlerContext, origin: String) {
        state = .refused
        firstRequest.succeed(false)
        Counter(label: "minato_http_connections_refused_total", dimensions: [("reason", "origin")]).increment()
        let body = "originNotAllowed: this server does not accept WebSocket connections from pages of origin '\(origin.prefix(100))'; "
            + "list it in server.allowedOrigins to allow it\n"
        let headers = HTTPHeaders([("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "\(body.utf8.count)"),
                                   ("Connection", "close")])
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .forbidden, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// Hummingbird's HTTP/1 + WebSocket-upgrade child channel with `ConnectionGateHandler` in front
/// and `FirstRequestHandler` before the upgrade handler. A connection that ends before its first
/// request (refused, timed out, gone) is not handed to Hummingbird at all, so it costs no task
/// beyond this one and logs nothing.
struct GatedHTTPChannel: ServerChildChannel {
    struct Value: ServerChildChannelValue {
        let inner: HTTP1WebSocketUpgradeChannel.Value
        /// True once a first request went on to Hummingbird; false if the connection ended before.
        let firstRequest: EventLoopFuture<Bool>
        var channel: any Channel { inner.channel }
    }

    let inner: HTTP1WebSocketUpgradeChannel
    let gate: ConnectionGate
    let origins: OriginPolicy
    let firstRequestTimeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let firstRequest = channel.eventLoop.makePromise(of: Bool.self)
        do {
            try channel.pipeline.syncOperations.addHandler(ConnectionGateHandler(gate: gate), position: .first)
        } catch {
            firstRequest.succeed(false)
            return channel.eventLoop.makeFailedFuture(error)
        }
        return inner.setup(channel: channel, logger: logger).flatMapThrowing { [origins, firstRequestTimeout] value in
            let pipeline = channel.pipeline.syncOperations
            let upgrader = try pipeline.handler(type: NIOTypedHTTPServerUpgradeHandler<HTTP1WebSocketUpgradeChannel.UpgradeResult>.self)
            try pipeline.addHandler(FirstRequestHandler(timeout: firstRequestTimeout, origins: origins, firstRequest: firstRequest),
                                    position: .before(upgrader))
            return Value(inner: value, firstRequest: firstRequest.futureResult)
        }.flatMapErrorThrowing { error in
            firstRequest.succeed(false)
            throw error
        }
    }

    func handle(value: Value, logger: Logger) async {
        guard (try? await value.firstRequest.get()) == true else { return }
        await inner.handle(value: value.inner, logger: logger)
    }
}

/// The process's limit on open files (sockets count), raised at start to the hard limit.
struct OpenFileLimit: Sendable {
    /// The limit before and after `raise()`.
    let before: Int
    let now: Int

    /// Raises the soft `RLIMIT_NOFILE` to the hard limit where the OS allows it.
    static func raise() -> OpenFileLimit {
        var rl = rlimit()
        #if os(Linux)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &rl) == 0 else { return OpenFileLimit(before: -1, now: -1) }
        let before = rl.rlim_cur
        if rl.rlim_cur < rl.rlim_max {
            var raised = rl
            raised.rlim_cur = rl.rlim_max
            if setrlimit(resource, &raised) == 0 { rl = raised }
        }
        let clamp = { (v: rlim_t) -> Int in v >= rlim_t(Int.max) ? Int.max : Int(v) }
        return OpenFileLimit(before: clamp(before), now: clamp(rl.rlim_cur))
    }

    /// Files the server may need besides its HTTP connections: media sockets (one per ICE port
    /// at most), worker event fds, the listener, logs, libraries.
    static func reserve(for configuration: ServerConfiguration) -> Int {
        let ports = Int(configuration.ice.portMax) - Int(configuration.ice.portMin) + 1
        let media = min(configuration.rooms.maxTransports * configuration.ice.localAddresses.count, ports * configuration.ice.localAddresses.count)
        return media + 16 * configuration.resolvedWorkerCount + 128
    }
}
