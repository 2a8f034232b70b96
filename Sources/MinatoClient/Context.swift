public import MinatoTransport
public import Logging
public import MinatoWire
internal import Synchronization

/// The client's process-level state (SkyWay's `Context`): the server URLs and token, the DTLS
/// identity, and the media worker thread every connection of this context runs on.
public final class Context: Sendable {
    public struct Options: Sendable {
        /// The server's WebSocket endpoints, e.g. ["ws://127.0.0.1:7880/ws"]; several for the nodes
        /// of a cluster. A new socket goes to the first of them that accepts it; after a member's
        /// socket is lost, its server is tried again first, then the next ones in turn.
        public var urls: [String]
        /// The first of `urls`; setting it makes it the only one.
        public var url: String {
            get { urls.first ?? "" }
            set { urls = [newValue] }
        }
        /// A JWT (docs/protocol.md "Auth"), sent as `?token=`; nil when the server runs without auth.
        public var token: String?
        /// SRTP profiles to offer in DTLS (OpenSSL names, colon separated); nil offers all.
        public var srtpProfiles: String?
        /// The numeric local addresses ICE gathers candidates on (default 127.0.0.1 only: a
        /// server elsewhere needs this host's address on the way to it).
        public var iceLocalAddresses: [String]
        /// Whether a member joins its room again when it lost it: the node hosting the room failed,
        /// or the member's socket closed (`LocalSFURoomMember.connectionEvents`).
        public var rejoin: Bool
        /// How long a rejoin keeps trying (a server answering `serviceUnavailable`, none reachable).
        public var rejoinTimeout: Duration
        /// How long a rejoined member waits for each publisher it subscribed to to publish again.
        public var resubscribeWait: Duration
        /// The first wait between two rejoin attempts; it doubles, up to 5 s.
        public var reconnectDelay: Duration
        /// Whether a member recovers in place (docs/sdk-swift.md "Recovery"): a lost socket is
        /// replaced and the member taken back with its reconnectSecret (events missed meanwhile
        /// replayed), and a connection whose packets stopped restarts ICE. Off: a lost socket
        /// makes the member rejoin, and nothing watches the media.
        public var recover = true
        /// A member's socket that has been silent this long is probed with a `keepalive`...
        public var heartbeatInterval: Duration = .seconds(2)
        /// ...which must be answered within this, else the socket is given up and replaced.
        public var heartbeatTimeout: Duration = .seconds(3)
        /// When a connection stalls, the probe of a socket silent for a second waits this long
        /// (the network may have changed: a live socket answers in a round trip).
        public var networkProbeTimeout: Duration = .milliseconds(1500)
        /// A connection that was receiving and then receives nothing for this long has stalled.
        public var mediaStallTimeout: Duration = .seconds(2)
        /// How long an ICE restart has to bring a new pair or packets before the next try...
        public var mediaRestartWait: Duration = .seconds(4)
        /// ...and how many tries one stall gets before the member rejoins instead.
        public var maxMediaRestarts = 3
        /// Per connection, bytes of data-channel messages waiting for the server (its SCTP send
        /// buffer): a `LocalDataStream.write` with no room left throws `dataBufferFull`.
        public var dataSendBufferBytes = 1 << 20
        /// How long a lost socket is tried again before the member rejoins instead. The server
        /// keeps a member whose socket closed for its keepalive gap (30 s by default).
        public var signalingResumeTimeout: Duration = .seconds(20)
        /// With TURN servers in the member's `iceServers`, how long a new connection (or an ICE
        /// restart) waits for its relayed candidates before it offers what it has.
        public var relayGatherTimeout: Duration = .seconds(3)
        /// Microseconds between the starts of two iterations of the media thread's loop (0: no
        /// wait). Each iteration polls every socket of the context: with hundreds of connections
        /// on one thread, a wait lets each poll read many packets (which wait up to that long).
        /// `minato-bench capacity` sets 20,000 on the context of the subscribers it mutes.
        public var mediaIterationMicros = 0
        public var logger: Logger

        public init(url: String = "ws://127.0.0.1:7880/ws", token: String? = nil, srtpProfiles: String? = nil,
                    logger: Logger = Logger(label: "minato.client")) {
            self.init(urls: [url], token: token, srtpProfiles: srtpProfiles, logger: logger)
        }

        public init(urls: [String], token: String? = nil, srtpProfiles: String? = nil,
                    iceLocalAddresses: [String] = ["127.0.0.1"], rejoin: Bool = true,
                    rejoinTimeout: Duration = .seconds(60), resubscribeWait: Duration = .seconds(10),
                    reconnectDelay: Duration = .milliseconds(300), logger: Logger = Logger(label: "minato.client")) {
            self.urls = urls; self.token = token; self.srtpProfiles = srtpProfiles
            self.iceLocalAddresses = iceLocalAddresses; self.rejoin = rejoin
            self.rejoinTimeout = rejoinTimeout; self.resubscribeWait = resubscribeWait
            self.reconnectDelay = reconnectDelay; self.logger = logger
        }
    }

    public let options: Options
    let runtime: CryptoRuntime
    let worker: ClientWorker
    /// The socket for room lookups (create, find, snapshot, close), opened again when it closed.
    private let lookup: Mutex<RpcChannel>

    private init(options: Options, runtime: CryptoRuntime, worker: ClientWorker, channel: RpcChannel) {
        self.options = options; self.runtime = runtime; self.worker = worker; self.lookup = Mutex(channel)
    }

    /// Connects to the server (one WebSocket for room lookups; each joined member has its own).
    public static func setup(_ options: Options = Options()) async throws -> Context {
        let runtime = try CryptoRuntime()
        let worker = ClientWorker(runtime: runtime,
                                  ice: IceConfiguration(localAddresses: options.iceLocalAddresses, portMin: 0, portMax: 0),
                                  minIterationMicros: options.mediaIterationMicros)
        do {
            let (channel, _) = try await openChannel(options)
            return Context(options: options, runtime: runtime, worker: worker, channel: channel)
        } catch {
            worker.shutdown()
            throw error
        }
    }

    /// Opens a socket to the first of `options.urls` that accepts one, trying each once, in
    /// order; returns it and the index of its URL.
    static func openChannel(_ options: Options) async throws -> (RpcChannel, Int) {
        var failure: any Error = ClientError.connectionClosed("no server URL given")
        for index in options.urls.indices {
            do { return (try await openChannel(options, at: index), index) } catch { failure = error }
        }
        throw failure
    }

    /// Opens a socket to `options.urls[index]`.
    static func openChannel(_ options: Options, at index: Int) async throws -> RpcChannel {
        var url = options.urls[index]
        if let token = options.token { url += (url.contains("?") ? "&" : "?") + "token=" + token }
        return try await RpcChannel.connect(url: url, logger: options.logger)
    }

    /// The lookup socket; when it closed (its server went away), a new one to the first server
    /// that accepts it.
    func channel() async throws -> RpcChannel {
        let current = lookup.withLock { $0 }
        if !current.isClosed { return current }
        let (fresh, _) = try await Context.openChannel(options)
        lookup.withLock { $0 = fresh }
        return fresh
    }

    /// Runs `body` on the media worker thread, where sources, sinks and connections live.
    public func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await worker.perform { _ in try body() }
    }

    /// Closes the lookup socket and stops the media thread (members should `leave` first).
    public func dispose() {
        lookup.withLock { $0 }.close()
        worker.shutdown()
    }
}
