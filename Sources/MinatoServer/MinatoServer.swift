public import Logging
public import MinatoRooms
internal import MinatoSignaling
internal import MinatoTransport
internal import MinatoCluster
internal import Hummingbird
internal import HummingbirdCore
internal import HummingbirdWebSocket
internal import Synchronization
internal import Foundation
internal import NIOCore
internal import Metrics
public import Prometheus

/// The Minato server process: the crypto runtime, the media workers, the room service, and the
/// Hummingbird application serving `/ws` (JSON-RPC signaling), `/healthz` and `/readyz`.
/// Owns every worker; `run()` returns after a graceful shutdown (SIGTERM / SIGINT).
public final class MinatoServer: Sendable {
    /// `/readyz`: how long each media worker has to answer before the node is not ready.
    static let readinessDeadline = Duration.seconds(2)
    /// How often the server pings an open WebSocket (it closes one that stops answering).
    static let webSocketPingPeriod = Duration.seconds(20)

    public let configuration: ServerConfiguration
    let logger: Logger
    let runtime: CryptoRuntime
    let workers: [MediaWorker]
    public let rooms: RoomService
    /// Verifies client tokens (nil: auth off).
    let authority: TokenAuthority?
    /// Where `/metrics` comes from: the control plane's swift-metrics (through the factory the
    /// CLI bootstraps) and the workers' packet counters, copied in at each scrape.
    let registry: PrometheusCollectorRegistry
    let packetMetrics: PacketMetrics
    /// This process as a node of a cluster (nil: a single node, `cluster.redisUrl` empty).
    let cluster: ClusterNode?
    private let connectionIds = Atomic<UInt64>(1)
    private let draining = Atomic<Bool>(false)

    public init(configuration: ServerConfiguration, logger: Logger, registry: PrometheusCollectorRegistry) async throws {
        self.configuration = configuration
        self.logger = logger
        let runtime = try CryptoRuntime(
            certificateFile: configuration.dtlsCertificateFile.isEmpty ? nil : configuration.dtlsCertificateFile,
            privateKeyFile: configuration.dtlsPrivateKeyFile.isEmpty ? nil : configuration.dtlsPrivateKeyFile)
        self.runtime = runtime
        logger.info("SRTP by libsrtp2", metadata: [
            "build": "\(CryptoRuntime.srtpBackend)", "gcm": "\(CryptoRuntime.srtpCipher(for: .aeadAes128Gcm))",
            "cm": "\(CryptoRuntime.srtpCipher(for: .aes128CmSha1_80))", "hmac": "\(CryptoRuntime.srtpHmac)"])
        let timeout = Duration.seconds(configuration.transportTimeoutSec)
        self.workers = (0..<configuration.resolvedWorkerCount).map { i in
            MediaWorker(index: i, runtime: runtime, ice: configuration.ice, transportTimeout: timeout,
                        consentTimeout: .seconds(configuration.consentTimeoutSec), connectTimeout: .seconds(configuration.connectTimeoutSec), tuning: configuration.engineTuning,
                        dataLimits: configuration.rooms.data, logger: logger)
        }
        var authority: TokenAuthority?
        var verifier: TokenVerifier?
        if !configuration.authSecret.isEmpty {
            let a = await TokenAuthority(secret: configuration.authSecret)
            authority = a
            verifier = { @Sendable (token: String) async -> Result<AuthGrant, RoomError> in await a.verify(token) }
        }
        self.authority = authority
        var roomConfiguration = configuration.rooms
        var nodeId: String?
        if configuration.cluster.enabled {
            let id = configuration.cluster.nodeId.isEmpty ? ClusterConfiguration.generatedNodeId() : configuration.cluster.nodeId
            roomConfiguration.idPrefix = id + "."
            nodeId = id
        }
        self.rooms = RoomService(configuration: roomConfiguration, workers: workers, logger: logger, verifier: verifier)
        if let nodeId {
            let store = try RedisClusterStore(url: configuration.cluster.redisUrl,
                                              connectTimeoutMs: configuration.cluster.storeTimeoutMs,
                                              commandTimeoutMs: configuration.cluster.storeTimeoutMs)
            self.cluster = await ClusterNode(configuration: configuration.cluster, nodeId: nodeId, store: store, rooms: rooms,
                                             linkMaxFrameBytes: configuration.linkMaxFrameBytes, logger: logger)
            if let cluster = self.cluster { await rooms.setMediaNodes(ClusterMediaNodes(node: cluster)) }
        } else {
            self.cluster = nil
        }
        self.registry = registry
        self.packetMetrics = PacketMetrics(registry: registry)
    }

    /// Serves until SIGTERM or SIGINT, then closes every transport and stops the workers.
    public func run() async throws {
        let files = OpenFileLimit.raise()
        await rooms.start()
        if let cluster { await cluster.start() }
        let router = Router(context: MinatoRequestContext.self)
        router.get("/healthz") { _, _ in "ok\n" }
        router.get("/readyz") { [workers, cluster] _, _ -> Response in
            if let cluster, let why = await cluster.notReadyReason {
                return Response(status: .serviceUnavailable, headers: [.contentType: "text/plain"],
                                body: .init(byteBuffer: ByteBuffer(string: "not ready: \(why)\n")))
            }
            for w in workers {
                let alive = try? await withThrowingTaskGroup(of: Bool.self) { group in
                    group.addTask { try await w.perform { _ in true } }
                    group.addTask { try await Task.sleep(for: MinatoServer.readinessDeadline); return false }
                    let first = try await group.next() ?? false
                    group.cancelAll()
                    return first
                }
                if alive != true {
                    return Response(status: .serviceUnavailable, headers: [.contentType: "text/plain"],
                                    body: .init(byteBuffer: ByteBuffer(string: "media worker \(w.index) is not responding\n")))
                }
            }
            return Response(status: .ok, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "ready\n")))
        }

        router.get("/metrics") { [self] _, _ -> Response in
            await self.updatePacketMetrics()
            let text = self.registry.emitToString()
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                            body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        // The browser SDK (/sdk/minato.js) and the demo page (/), shipped inside the binary's bundle.
        let webRoot = configuration.webRoot.isEmpty
            ? Bundle.module.url(forResource: "web", withExtension: nil)?.path : configuration.webRoot
        if let webRoot {
            router.add(middleware: FileMiddleware(webRoot, searchForIndexHtml: true, logger: logger))
        }

        let openAPI = Bundle.module.url(forResource: "openapi", withExtension: "yaml")
            .flatMap { try? String(contentsOf: $0, encoding: .utf8) }
        AdminAPI(rooms: rooms, apiSecret: configuration.adminApiSecret, authority: authority,
                 access: configuration.adminAccess, listenHost: configuration.host,
                 corsOrigins: Set(configuration.adminCorsOrigins), openAPIDocument: openAPI, cluster: cluster,
                 drain: { [self] c in Task { await self.drainAndExit(c) } }).register(on: router)

        WhipWhep(rooms: rooms, iceServers: configuration.rooms.iceServers,
                 nextConnectionId: { [self] in self.connectionIds.wrappingAdd(1, ordering: .relaxed).oldValue },
                 origins: OriginPolicy(listed: Set(configuration.allowedOrigins)),
                 maxOfferBytes: configuration.rooms.maxSdpBytes, cluster: cluster).register(on: router)

        let wsRouter = Router(context: SignalingRequestContext.self)
        let maxMessage = configuration.maxFrameBytes
        // Node links carry frames larger than a client's (ClusterConfiguration.linkMaxFrameBytes):
        // in a cluster the WebSocket layer admits those, and serveConnection holds a client's
        // messages to server.maxFrameBytes itself.
        let maxWebSocketFrame = cluster == nil ? maxMessage : max(maxMessage, configuration.linkMaxFrameBytes)
        wsRouter.ws("/ws") { [self] inbound, outbound, context in
            let token = context.request.uri.queryParameters["token"].map(String.init)
            try await self.serveConnection(inbound: inbound, outbound: outbound, socket: context.requestContext.channel, token: token)
        }
        if let cluster {
            // Node-to-node links: only a node presenting a credential signed with cluster.secret.
            let host = NodeLinkHost(rooms: rooms, nodeId: cluster.nodeId, maxInFlight: configuration.maxInFlightRequests,
                                    maxOutgoing: configuration.maxOutgoingBytes * 16, maxFrameBytes: configuration.linkMaxFrameBytes,
                                    nextConnectionId: { [self] in self.connectionIds.wrappingAdd(1, ordering: .relaxed).oldValue },
                                    logger: logger)
            let credentials = cluster.credentials
            wsRouter.ws("/cluster/link", shouldUpgrade: { [logger] request, context in
                let header = request.headers[.authorization] ?? ""
                let bearer = header.hasPrefix("Bearer ") ? String(header.dropFirst(7)) : ""
                guard await credentials.verify(bearer) != nil else {
                    logger.warning("node link refused: its credential does not verify with cluster.secret",
                                   metadata: ["peer": "\(context.channel.remoteAddress?.description ?? "?")"])
                    Counter(label: "minato_cluster_links_refused_total").increment()
                    throw HTTPError(.unauthorized, message: "node link credential refused")
                }
                return .upgrade([:])
            }) { inbound, outbound, context in
                let header = context.request.headers[.authorization] ?? ""
                let peer = await credentials.verify(header.hasPrefix("Bearer ") ? String(header.dropFirst(7)) : "") ?? "?"
                await host.serve(inbound: inbound, outbound: outbound, socket: context.requestContext.channel, peer: peer)
            }
        }
        // Every connection passes the gate (server.maxConnections, …PerAddress) and must send its
        // first request head within server.idleTimeoutSec; later, Hummingbird closes an HTTP
        // connection idle that long. A WebSocket handshake from a foreign page gets 403.
        let wsResponder = wsRouter.buildResponder()
        let gate = ConnectionGate(maxConnections: configuration.maxConnections,
                                  maxConnectionsPerAddress: configuration.maxConnectionsPerAddress)
        let idleTimeout = TimeAmount.seconds(Int64(configuration.idleTimeoutSec))
        let origins = OriginPolicy(listed: Set(configuration.allowedOrigins))
        let server = HTTPServerBuilder { responder in
            GatedHTTPChannel(
                inner: HTTP1WebSocketUpgradeChannel(
                    responder: responder, webSocketResponder: wsResponder,
                    configuration: .init(http1: .init(idleTimeout: idleTimeout),
                                         ws: .init(maxFrameSize: maxWebSocketFrame, autoPing: .enabled(timePeriod: MinatoServer.webSocketPingPeriod)))),
                gate: gate, origins: origins, firstRequestTimeout: idleTimeout)
        }
        let app = Application(
            router: router,
            server: server,
            // A burst of new connections waits in the kernel's accept queue rather than having its
            // SYNs dropped (a 1 s retransmit each); the kernel caps this at net.core.somaxconn.
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "minato",
                                 backlog: 4096),
            onServerRunning: { [logger, configuration] _ in
                logger.notice("minato listening", metadata: [
                    "http": "http://\(configuration.host):\(configuration.port)",
                    "ws": "ws://\(configuration.host):\(configuration.port)/ws",
                    "media": "\(configuration.ice.localAddresses.joined(separator: ",")) \(configuration.ice.tcp ? "udp+tcp" : "udp") \(configuration.ice.portMin)-\(configuration.ice.portMax)",
                    "workers": "\(configuration.resolvedWorkerCount)",
                    "admin": "\(configuration.adminAccess.description)",
                    "auth": "\(configuration.authSecret.isEmpty ? "off (no auth.secret): every signaling request is allowed" : "on")",
                ])
                let limits = configuration.effectiveValues.filter { $0.key.contains(".max") || $0.key.hasSuffix("TimeoutSec") }
                var values = Logger.Metadata(uniqueKeysWithValues: limits.map { ($0.key, .string($0.value)) })
                values["process.openFiles"] = .string("\(files.now)" + (files.now != files.before ? " (raised from \(files.before))" : ""))
                logger.notice("limits", metadata: values)
                let needed = configuration.maxConnections + OpenFileLimit.reserve(for: configuration)
                if files.now >= 0, needed > files.now {
                    logger.warning("server.maxConnections does not fit the open-file limit", metadata: [
                        "server.maxConnections": "\(configuration.maxConnections)", "openFiles": "\(files.now)",
                        "needed": "about \(needed) with the media sockets",
                        "fix": "raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower server.maxConnections",
                    ])
                }
            },
            logger: logger)
        defer { for w in workers { w.shutdown() } }
        if let cluster {
            // In a cluster SIGTERM drains first (no new rooms; live ones keep running until they
            // empty or cluster.drainTimeoutSec), then shuts down as SIGINT does at once.
            signal(SIGTERM, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: SIGTERM, queue: .global())
            source.setEventHandler { [self] in Task { await self.drainAndExit(cluster) } }
            source.resume()
            defer { source.cancel() }
            try await app.runService(gracefulShutdownSignals: [.sigint])
        } else {
            try await app.runService()
        }
        if let cluster { await cluster.stop() }
        await rooms.closeAllRooms()
        logger.notice("minato stopped")
    }

    /// Drains this cluster node (`SIGTERM`, `POST /v1/nodes/{id}/drain`): no new rooms are
    /// placed here; once no member is left, or after `cluster.drainTimeoutSec`, the server shuts
    /// down gracefully (rooms closed, lease dropped) and the process exits 0.
    func drainAndExit(_ cluster: ClusterNode) async {
        guard !draining.exchange(true, ordering: .relaxed) else { return }
        await cluster.drain()
        let deadline = ContinuousClock.now + .seconds(configuration.cluster.drainTimeoutSec)
        while ContinuousClock.now < deadline, await rooms.load().members > 0 {
            try? await Task.sleep(for: .milliseconds(250))
        }
        let left = await rooms.load().members
        logger.notice("drained: shutting down", metadata: ["membersLeft": "\(left)"])
        kill(getpid(), SIGINT)
    }

    /// Copies the workers' packet counters and the room counts into the registry.
    func updatePacketMetrics() async {
        var totals = WorkerTotals()
        for w in workers {
            guard let c = try? await w.perform({ $0.counters }) else { continue }
            totals.add(c)
        }
        let counts = await rooms.counts()
        packetMetrics.update(totals, rooms: counts)
    }

    /// One signaling connection. Frames are parsed here, on the connection's own task; requests
    /// are handled concurrently (each answered with its own id), at most
    /// `server.maxInFlightRequests` at once; responses and notifications leave in the order the
    /// room service sends them, through a queue of at most `server.maxOutgoingBytes`. A peer
    /// that lets more pile up (it does not read) is closed with 4008.
    func serveConnection(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, socket: any Channel,
                         token: String?) async throws {
        let id = connectionIds.wrappingAdd(1, ordering: .relaxed).oldValue
        let budget = ConnectionBudget()
        let maxInFlight = configuration.maxInFlightRequests
        let maxOutgoing = configuration.maxOutgoingBytes
        let (stream, continuation) = AsyncStream<Outgoing>.makeStream(bufferingPolicy: .unbounded)
        let logger = self.logger
        let send: @Sendable (String) -> Void = { text in
            guard !budget.overflowed.load(ordering: .relaxed) else { return }
            let bytes = text.utf8.count
            if budget.queuedBytes.add(bytes, ordering: .relaxed).newValue > maxOutgoing {
                guard !budget.overflowed.exchange(true, ordering: .relaxed) else { return }
                logger.notice("signaling connection closed: its peer does not read", metadata: [
                    "connection": "\(id)", "queuedBytes": "\(budget.queuedBytes.load(ordering: .relaxed))"])
                Counter(label: "minato_signaling_connections_closed_total", dimensions: [("reason", "outgoingQueueFull")]).increment()
                continuation.yield(.close(4008, "outgoingQueueFull: the client did not read its messages"))
                // The close frame waits behind what the peer has not read; if it never reads, drop the socket.
                Task {
                    try? await Task.sleep(for: Self.unreadPeerGrace)
                    socket.close(promise: nil)
                }
                return
            }
            continuation.yield(.text(text))
        }
        let channel = ClientChannel(id: id, send: send, close: { code, reason in continuation.yield(.close(code, reason)) })
        let rooms = self.rooms
        let signaling = SignalingFrontDoor(rooms: rooms)
        // In a cluster, requests for rooms hosted on other nodes go there (ClusterGateway).
        let gateway = await cluster?.gateway(for: channel, token: token)
        defer { gateway?.connectionClosed() }
        logger.debug("signaling connection opened", metadata: ["connection": "\(id)"])
        if let token, let error = await rooms.authenticate(token: token, channel: channel) {
            // A bad token at connect time: say why in the close frame (4001 invalid, 4002 expired).
            try? await outbound.close(.init(codeNumber: error.name == "authTokenExpired" ? 4002 : 4001),
                                      reason: "\(error.name): \(error.detail)".utf8Prefix(120))
            return
        }
        var failure: (any Error)?
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await item in stream {
                    // After an overflow only the close frame goes out; the rest is dropped.
                    if budget.overflowed.load(ordering: .relaxed), case .text = item { continue }
                    switch item {
                    case .text(let text):
                        do { try await outbound.write(.text(text)) } catch { return }
                        budget.queuedBytes.subtract(text.utf8.count, ordering: .relaxed)
                    case .close(let code, let reason):
                        try? await outbound.close(.init(codeNumber: Int(code)), reason: reason.utf8Prefix(120))
                        return
                    }
                }
            }
            do {
                for try await message in inbound.messages(maxSize: configuration.maxFrameBytes) {
                    if budget.overflowed.load(ordering: .relaxed) { break }
                    if case .text(let text) = message, text.utf8.count > configuration.maxFrameBytes {
                        // Only reachable in a cluster (see maxWebSocketFrame): the same close as
                        // the WebSocket layer's on a single node.
                        continuation.yield(.close(1009, "message too big: over server.maxFrameBytes"))
                        break
                    }
                    switch message {
                    case .text(let text):
                        switch JsonRpcRequest.parse(text) {
                        case .failure(let rejection):
                            channel.send(rejection.responseText)
                        case .success(let request):
                            if budget.inFlight.add(1, ordering: .relaxed).newValue > maxInFlight {
                                budget.inFlight.subtract(1, ordering: .relaxed)
                                signaling.countRefused(request)
                                channel.send(request.errorResponse(.limitExceeded(
                                    "This connection has \(maxInFlight) requests in flight; wait for their responses (server.maxInFlightRequests).")))
                            } else {
                                group.addTask {
                                    if let gateway, await gateway.route(request, text: text) != .local {
                                        budget.inFlight.subtract(1, ordering: .relaxed)
                                        return
                                    }
                                    await signaling.handle(request, channel: channel)
                                    budget.inFlight.subtract(1, ordering: .relaxed)
                                }
                            }
                        }
                    case .binary:
                        let error = RoomError.invalidRequest("Only text frames carry JSON-RPC requests; this binary frame was ignored.")
                        channel.send(JSONValue.object(["jsonrpc": "2.0", "id": .null, "error": error.json]).serialized())
                    }
                }
            } catch {
                failure = error
            }
            // Members of this connection start their reconnect gap now; requests still running finish.
            await rooms.channelClosed(id)
            continuation.finish()
        }
        await rooms.channelClosed(id)
        logger.debug("signaling connection closed", metadata: ["connection": "\(id)"])
        if let failure { throw failure }
    }

    /// How long a peer whose output queue overflowed has to read up to the close frame.
    static let unreadPeerGrace = Duration.seconds(10)
}

/// What one signaling connection holds: requests being handled and bytes queued for its socket.
final class ConnectionBudget: Sendable {
    let inFlight = Atomic<Int>(0)
    let queuedBytes = Atomic<Int>(0)
    let overflowed = Atomic<Bool>(false)
}

/// The WebSocket route's request context: Hummingbird's, plus the connection's NIO channel (so
/// a peer that stops reading can be dropped even while a write to it is blocked).
struct SignalingRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<Self>
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.channel = source.channel
    }
}

enum Outgoing: Sendable {
    case text(String)
    case close(UInt16, String)
}

extension String {
    /// At most `n` bytes of UTF-8, cut at a character boundary (WebSocket close reasons are ≤ 123 bytes).
    func utf8Prefix(_ n: Int) -> String {
        var out = ""
        for ch in self {
            if out.utf8.count + String(ch).utf8.count > n { break }
            out.append(ch)
        }
        return out
    }
}
