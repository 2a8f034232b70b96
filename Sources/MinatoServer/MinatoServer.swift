public import Logging
public import MinatoRooms
internal import MinatoTransport
internal import Hummingbird
internal import HummingbirdWebSocket
internal import Synchronization
internal import Foundation

/// The Minato server process: the crypto runtime, the media workers, the room service, and the
/// Hummingbird application serving `/ws` (JSON-RPC signaling), `/healthz` and `/readyz`.
/// Owns every worker; `run()` returns after a graceful shutdown (SIGTERM / SIGINT).
public final class MinatoServer: Sendable {
    public let configuration: ServerConfiguration
    let logger: Logger
    let runtime: CryptoRuntime
    let workers: [MediaWorker]
    public let rooms: RoomService
    private let connectionIds = Atomic<UInt64>(1)

    public init(configuration: ServerConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        let runtime = try CryptoRuntime()
        self.runtime = runtime
        let timeout = Duration.seconds(configuration.transportTimeoutSec)
        self.workers = (0..<configuration.resolvedWorkerCount).map { i in
            MediaWorker(index: i, runtime: runtime, ice: configuration.ice, transportTimeout: timeout, logger: logger)
        }
        self.rooms = RoomService(configuration: configuration.rooms, workers: workers, logger: logger)
    }

    /// Serves until SIGTERM or SIGINT, then closes every transport and stops the workers.
    public func run() async throws {
        await rooms.start()
        let router = Router()
        router.get("/healthz") { _, _ in "ok\n" }
        router.get("/readyz") { [workers] _, _ -> Response in
            for w in workers {
                let alive = try? await withThrowingTaskGroup(of: Bool.self) { group in
                    group.addTask { try await w.perform { _ in true } }
                    group.addTask { try await Task.sleep(for: .seconds(2)); return false }
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
            let text = await self.metricsText()
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                            body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        // The browser SDK (/sdk/minato.js) and the demo page (/), shipped inside the binary's bundle.
        let webRoot = configuration.webRoot.isEmpty
            ? Bundle.module.url(forResource: "web", withExtension: nil)?.path : configuration.webRoot
        if let webRoot {
            router.add(middleware: FileMiddleware(webRoot, searchForIndexHtml: true, logger: logger))
        }

        let wsRouter = Router(context: BasicWebSocketRequestContext.self)
        let maxMessage = configuration.maxFrameBytes
        wsRouter.ws("/ws") { [self] inbound, outbound, _ in
            try await self.serveConnection(inbound: inbound, outbound: outbound, maxMessage: maxMessage)
        }
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(
                webSocketRouter: wsRouter,
                configuration: .init(ws: .init(maxFrameSize: maxMessage, autoPing: .enabled(timePeriod: .seconds(20))))),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "minato"),
            onServerRunning: { [logger, configuration] _ in
                logger.notice("minato listening", metadata: [
                    "http": "http://\(configuration.host):\(configuration.port)",
                    "ws": "ws://\(configuration.host):\(configuration.port)/ws",
                    "media": "\(configuration.ice.localAddresses.joined(separator: ",")) udp \(configuration.ice.portMin)-\(configuration.ice.portMax)",
                    "workers": "\(configuration.resolvedWorkerCount)",
                ])
            },
            logger: logger)
        defer { for w in workers { w.shutdown() } }
        try await app.runService()
        logger.notice("minato stopped")
    }

    /// Prometheus text exposition of the workers' and rooms' counters.
    func metricsText() async -> String {
        var forwarded: UInt64 = 0, received: UInt64 = 0, bytes: UInt64 = 0, keyFrames: UInt64 = 0, transports = 0
        var drops: [String: UInt64] = [:]
        for w in workers {
            guard let c = try? await w.perform({ $0.counters }) else { continue }
            forwarded &+= c.rtpPacketsForwarded; received &+= c.rtpPacketsReceived; bytes &+= c.rtpBytesForwarded
            keyFrames &+= c.keyFrameRequestsSent; transports += c.transports
            for (k, v) in c.drops { drops[k, default: 0] &+= v }
        }
        let counts = await rooms.counts()
        var lines = [
            "# HELP minato_rtp_packets_received_total RTP packets received from publishers.",
            "# TYPE minato_rtp_packets_received_total counter",
            "minato_rtp_packets_received_total \(received)",
            "# HELP minato_rtp_packets_forwarded_total RTP packets sent to subscribers.",
            "# TYPE minato_rtp_packets_forwarded_total counter",
            "minato_rtp_packets_forwarded_total \(forwarded)",
            "# HELP minato_rtp_bytes_forwarded_total RTP bytes (clear) sent to subscribers.",
            "# TYPE minato_rtp_bytes_forwarded_total counter",
            "minato_rtp_bytes_forwarded_total \(bytes)",
            "# HELP minato_keyframe_requests_total PLI/FIR sent to publishers.",
            "# TYPE minato_keyframe_requests_total counter",
            "minato_keyframe_requests_total \(keyFrames)",
            "# HELP minato_packets_dropped_total Received packets not forwarded, by reason.",
            "# TYPE minato_packets_dropped_total counter",
        ]
        for (reason, n) in drops.sorted(by: { $0.key < $1.key }) { lines.append("minato_packets_dropped_total{reason=\"\(reason)\"} \(n)") }
        lines += [
            "# HELP minato_transports WebRTC transports open.", "# TYPE minato_transports gauge", "minato_transports \(transports)",
            "# HELP minato_rooms Rooms open.", "# TYPE minato_rooms gauge", "minato_rooms \(counts.rooms)",
            "# HELP minato_members Members joined.", "# TYPE minato_members gauge", "minato_members \(counts.members)",
            "# HELP minato_publications Publications.", "# TYPE minato_publications gauge", "minato_publications \(counts.publications)",
            "# HELP minato_subscriptions Subscriptions.", "# TYPE minato_subscriptions gauge", "minato_subscriptions \(counts.subscriptions)",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    /// One signaling connection: requests are handled as they arrive (each answered with its
    /// own id); responses and notifications leave in the order the room service sends them.
    func serveConnection(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, maxMessage: Int) async throws {
        let id = connectionIds.wrappingAdd(1, ordering: .relaxed).oldValue
        let (stream, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .unbounded)
        let channel = ClientChannel(id: id) { text in continuation.yield(text) }
        let rooms = self.rooms
        logger.debug("signaling connection opened", metadata: ["connection": "\(id)"])
        var failure: (any Error)?
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await text in stream {
                    do { try await outbound.write(.text(text)) } catch { break }
                }
            }
            do {
                for try await message in inbound.messages(maxSize: maxMessage) {
                    switch message {
                    case .text(let text):
                        group.addTask { await rooms.handle(text: text, channel: channel) }
                    case .binary:
                        let error = RoomError.invalidRequest("Only text frames carry JSON-RPC requests; this binary frame was ignored.")
                        channel.send(JSONValue.object(["jsonrpc": "2.0", "id": .null, "error": error.json]).serialized())
                    }
                }
            } catch {
                failure = error
            }
            await rooms.channelClosed(id)
            continuation.finish()
        }
        logger.debug("signaling connection closed", metadata: ["connection": "\(id)"])
        if let failure { throw failure }
    }
}
