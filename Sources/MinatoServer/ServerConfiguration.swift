public import MinatoRooms
public import MinatoTransport
public import MinatoMedia
public import MinatoCluster
internal import Foundation
internal import Yams

/// Everything the server is configured with. Built from embedded defaults, then
/// `config/minato.yaml` (or `--config FILE`), then `MINATO_…` environment variables, then CLI
/// flags — each layer overriding the one before. Every key is listed in `ConfigKey.all`, and
/// `config/minato.yaml` documents each one; unknown keys are an error.
public struct ServerConfiguration: Sendable {
    /// `server.host`: the HTTP/WebSocket listen address.
    public var host = "127.0.0.1"
    /// `server.port`: the HTTP/WebSocket listen port.
    public var port = 7880
    /// `server.maxFrameBytes`: the largest WebSocket message accepted (larger: close 1009).
    public var maxFrameBytes = 256 * 1024
    /// `server.maxInFlightRequests`: requests of one connection being handled at once; one
    /// more is answered `limitExceeded` at once.
    public var maxInFlightRequests = 16
    /// `server.maxOutgoingBytes`: bytes of responses and notifications queued for one
    /// connection and not yet written to its socket; over it the connection is closed (4008).
    public var maxOutgoingBytes = 4 * 1024 * 1024
    /// `server.idleTimeoutSec`: an HTTP connection that has not sent a whole request head this
    /// many seconds after it opened or after its last response is closed (slow or half-sent
    /// headers, idle keep-alive). WebSockets are not: they have their own pings.
    public var idleTimeoutSec = 30
    /// `server.maxConnections`: open HTTP and WebSocket connections on the whole server; one
    /// more is answered 503 and closed.
    public var maxConnections = 10_000
    /// `server.maxConnectionsPerAddress`: the same, from one client IP address.
    public var maxConnectionsPerAddress = 1000
    /// `server.allowedOrigins`: origins (`scheme://host[:port]`) of web pages, besides the
    /// server's own, that may open `/ws` and call WHIP/WHEP (with CORS); empty = none.
    /// Requests with no `Origin` (non-browser clients) are always allowed.
    public var allowedOrigins: [String] = []
    /// `server.webRoot`: folder served at `/` (demo page) and `/sdk/` (browser SDK); empty
    /// means the copy bundled with the binary.
    public var webRoot = ""
    /// `log.level`: trace, debug, info, notice, warning, error, critical.
    public var logLevel = "info"
    /// `media.workers`: media worker threads; 0 means one per active core.
    public var mediaWorkers = 0
    /// `media.ice.*`.
    public var ice = IceConfiguration()
    /// `media.transportTimeoutSec`: a connected transport that carried media and then hears
    /// nothing (no media, RTCP or ICE consent check) for this long is closed and its member
    /// removed with reason `transportClosed` (0 = never).
    public var transportTimeoutSec = 10
    /// `media.consentTimeoutSec`: the same for a connected transport that never carried media
    /// (RFC 7675's consent lifetime; 0 = never).
    public var consentTimeoutSec = 30
    /// `media.connectTimeoutSec`: a transport whose ICE and DTLS have not connected this many
    /// seconds after it was made is closed and its member removed (`transportClosed`).
    public var connectTimeoutSec = 20
    /// `media.retransmissionBufferPackets`: packets kept per video publication for answering
    /// subscribers' NACKs (1.5 KiB each, preallocated; rounded up to a power of two).
    public var retransmissionBufferPackets = 512
    /// `media.retransmissionMaxAgeMs`: how long a kept packet may be resent.
    public var retransmissionMaxAgeMs = 2000
    /// `media.bandwidth.initialKbps` / `minKbps` / `maxKbps`: a subscriber connection's
    /// bandwidth estimate before its first transport-wide feedback, and the range it stays in
    /// (simulcast layers are chosen to fit it).
    public var bandwidthInitialKbps = 2000
    public var bandwidthMinKbps = 30
    public var bandwidthMaxKbps = 20_000
    /// `media.rtcp.maxPacketsPerSec` / `maxWorkPerSec`: RTCP one transport's peer may send,
    /// in compound packets and in work units (one per RTCP packet, report block, FIR entry,
    /// NACK pair or transport-wide packet status) per second; beyond either it is dropped and
    /// counted (`rtcp_over_budget`).
    public var rtcpMaxPacketsPerSec = 1000
    public var rtcpMaxWorkPerSec = 20_000
    /// `rooms.speakerEventIntervalMs`: `activeSpeakersChanged` events of one room at most
    /// this far apart (0: none sent; the speakers are still tracked for the admin stats).
    public var speakerEventIntervalMs = 300
    /// `rooms.audio.forwardLoudest`: each subscriber gets audio only from the N loudest
    /// publications of its room (plus those it pinned); 0: all of them.
    public var forwardLoudest = 0
    /// The media engine's loss-recovery and bandwidth settings from the keys above.
    public var engineTuning: EngineTuning {
        var t = EngineTuning()
        t.retransmissionPackets = retransmissionBufferPackets
        t.retransmissionMaxAge = UInt64(retransmissionMaxAgeMs) * 1_000_000
        t.minSubscriberBitrate = bandwidthMinKbps * 1000
        t.maxSubscriberBitrate = max(bandwidthMaxKbps, bandwidthMinKbps) * 1000
        t.initialSubscriberBitrate = bandwidthInitialKbps * 1000
        t.rtcpPacketsPerSecond = rtcpMaxPacketsPerSec
        t.rtcpWorkPerSecond = rtcpMaxWorkPerSec
        t.speakers.eventInterval = UInt64(speakerEventIntervalMs) * 1_000_000
        t.speakers.forwardLoudest = forwardLoudest
        return t
    }
    /// `media.dtls.certificateFile` / `media.dtls.privateKeyFile`: a PEM certificate and
    /// key for DTLS; both empty = a fresh ECDSA P-256 certificate made at start.
    public var dtlsCertificateFile = ""
    public var dtlsPrivateKeyFile = ""
    /// `rooms.*`.
    public var rooms = RoomConfiguration()
    /// `auth.secret`: the HS256 secret client tokens are signed with; empty = auth off.
    public var authSecret = ""
    /// `admin.apiSecret`: a bearer secret for the admin API (an admin-scoped JWT works too).
    public var adminApiSecret = ""
    /// `admin.corsOrigins`: origins allowed to call `/v1` from a browser (CORS); empty = none.
    public var adminCorsOrigins: [String] = []
    /// `media.clientIceServers`: STUN/TURN URLs offered to WHIP and WHEP clients in `Link:
    /// <url>; rel="ice-server"` headers (and its `stun:` ones in `join`'s `iceServers`); empty =
    /// none (the server is reachable without them when it announces a public address).
    public var clientIceServers: [String] {
        get { rooms.iceServers.staticUrls }
        set { rooms.iceServers.staticUrls = newValue }
    }
    /// `media.turn.*`: the TURN server (coturn) clients are given per-member credentials for;
    /// the values live in `rooms.iceServers` (MinatoRooms' IceServers.swift).
    public var turn: IceServerConfiguration {
        get { rooms.iceServers }
        set { rooms.iceServers = newValue }
    }
    /// `cluster.*`: several nodes sharing one Redis (empty `cluster.redisUrl` = one node).
    public var cluster = ClusterConfiguration()

    public init() {}

    /// The largest node-link frame in a cluster (see `ClusterConfiguration.linkMaxFrameBytes`).
    public var linkMaxFrameBytes: Int {
        ClusterConfiguration.linkMaxFrameBytes(maxFrameBytes: maxFrameBytes, maxOutgoingBytes: maxOutgoingBytes)
    }

    /// The server listens on a loopback address only (then the admin API may be open without a secret).
    public var listensOnLoopbackOnly: Bool { ["127.0.0.1", "::1", "localhost"].contains(host) || host.hasPrefix("127.") }

    /// Who may use the admin API `/v1`, and why.
    public var adminAccess: AdminAccess {
        if !adminApiSecret.isEmpty { return .secret(tokensToo: !authSecret.isEmpty) }
        if !authSecret.isEmpty { return .adminTokens }
        return listensOnLoopbackOnly ? .openOnLoopback : .closed
    }

    public var resolvedWorkerCount: Int {
        mediaWorkers > 0 ? mediaWorkers : max(1, ProcessInfo.processInfo.activeProcessorCount)
    }

    /// Loads `file` (when given) over the defaults, then applies `environment`.
    public static func load(file: String?, environment: [String: String]) throws(ConfigurationError) -> ServerConfiguration {
        var config = ServerConfiguration()
        if let file {
            let text: String
            do { text = try String(contentsOfFile: file, encoding: .utf8) } catch {
                throw ConfigurationError(message: "cannot read configuration file '\(file)': \(error.localizedDescription)")
            }
            try config.apply(yaml: text, source: file)
        }
        try config.apply(environment: environment)
        try config.validate()
        return config
    }

    /// Applies a YAML document; every key must be one of `ConfigKey.all`.
    public mutating func apply(yaml text: String, source: String) throws(ConfigurationError) {
        let root: Node?
        do { root = try Yams.compose(yaml: text) } catch {
            throw ConfigurationError(message: "\(source) is not valid YAML: \(error)")
        }
        guard let root else { return }
        guard case .mapping = root else { throw ConfigurationError(message: "\(source): the top level must be a mapping of sections") }
        var flat: [(String, Node)] = []
        Self.flatten(root, prefix: "", into: &flat)
        for (path, node) in flat {
            guard let key = ConfigKey.all.first(where: { $0.path == path }) else {
                let known = ConfigKey.all.map(\.path).joined(separator: ", ")
                throw ConfigurationError(message: "\(source): unknown key '\(path)'. Known keys: \(known)")
            }
            let value: String
            switch node {
            case .scalar(let s): value = s.string
            case .sequence(let seq):
                value = seq.compactMap { n -> String? in if case .scalar(let s) = n { return s.string }; return nil }
                    .joined(separator: ",")
            default: throw ConfigurationError(message: "\(source): '\(path)' must be a value or a list")
            }
            try key.apply(&self, value, "\(source): \(path)")
        }
    }

    /// Applies `MINATO_…` variables; a `MINATO_` variable that names no key is an error.
    public mutating func apply(environment: [String: String]) throws(ConfigurationError) {
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("MINATO_") {
            // The test harness's own variables (which binaries to run), not configuration.
            if name == "MINATO_BIN" || name == "MINATO_CLIENT_BIN" || name == "MINATO_CONFIG" { continue }
            guard let key = ConfigKey.all.first(where: { $0.environmentName == name }) else {
                throw ConfigurationError(message: "environment variable \(name) names no configuration key; "
                    + "known: \(ConfigKey.all.map(\.environmentName).joined(separator: ", "))")
            }
            try key.apply(&self, value, name)
        }
    }

    public func validate() throws(ConfigurationError) {
        guard (1...65535).contains(port) else { throw ConfigurationError(message: "server.port must be 1...65535") }
        guard ice.portMin >= 1024, ice.portMin <= ice.portMax, ice.portMax <= 65535 else {
            throw ConfigurationError(message: "media.ice.portMin/portMax must be a range within 1024...65535")
        }
        guard !ice.localAddresses.isEmpty else {
            throw ConfigurationError(message: "media.ice.localAddresses must name at least one address")
        }
        guard dtlsCertificateFile.isEmpty == dtlsPrivateKeyFile.isEmpty else {
            throw ConfigurationError(message: "media.dtls.certificateFile and media.dtls.privateKeyFile must be set together")
        }
        guard rooms.defaultKeepaliveIntervalSec <= rooms.maxKeepaliveIntervalSec,
              rooms.defaultKeepaliveIntervalGapSec <= rooms.maxKeepaliveIntervalGapSec else {
            throw ConfigurationError(message: "rooms.keepaliveIntervalSec/GapSec must not exceed rooms.maxKeepaliveIntervalSec/GapSec")
        }
        guard rooms.data.maxBufferedBytes >= rooms.data.maxMessageBytes else {
            throw ConfigurationError(message: "rooms.data.maxBufferedBytes must be at least rooms.data.maxMessageBytes (one message must fit)")
        }
        guard rooms.defaultMaxSubscribers <= rooms.maxSubscribersCap else {
            throw ConfigurationError(message: "rooms.defaultMaxSubscribers must not exceed rooms.maxSubscribersCap")
        }
        if let problem = cluster.problem() { throw ConfigurationError(message: problem) }
        if let problem = turn.problem { throw ConfigurationError(message: problem) }
    }

    private static func flatten(_ node: Node, prefix: String, into out: inout [(String, Node)]) {
        guard case .mapping(let mapping) = node else {
            out.append((prefix, node))
            return
        }
        for (k, v) in mapping {
            let name = k.string ?? ""
            let path = prefix.isEmpty ? name : prefix + "." + name
            if case .mapping = v { flatten(v, prefix: path, into: &out) } else { out.append((path, v)) }
        }
    }
}

extension ServerConfiguration {
    /// Every key with its effective value, in `ConfigKey.all` order (secrets only as set / not set).
    public var effectiveValues: [(key: String, value: String)] { ConfigKey.all.map { ($0.path, $0.value(self)) } }
}

/// Access to the admin API, decided from the configuration at start.
public enum AdminAccess: Sendable, Equatable, CustomStringConvertible {
    case secret(tokensToo: Bool)
    case adminTokens
    case openOnLoopback
    case closed

    public var description: String {
        switch self {
        case .secret(let tokens): return "open to 'Authorization: Bearer <admin.apiSecret>'" + (tokens ? " and to tokens with admin:true" : "")
        case .adminTokens: return "open to tokens with admin:true (auth.secret is set, admin.apiSecret is not)"
        case .openOnLoopback: return "open without a secret, because server.host is a loopback address and no admin.apiSecret or auth.secret is set; requests must name a loopback Host"
        case .closed: return "closed: no admin.apiSecret or auth.secret is set and server.host is not a loopback address"
        }
    }
}

public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { message }
}

/// One configuration key: its dotted path, environment variable and parser.
struct ConfigKey: Sendable {
    let path: String
    /// The effective value as text (secrets are shown as set / not set).
    let value: @Sendable (ServerConfiguration) -> String
    let apply: @Sendable (inout ServerConfiguration, String, String) throws(ConfigurationError) -> Void

    init(path: String, value: @escaping @Sendable (ServerConfiguration) -> String,
         apply: @escaping @Sendable (inout ServerConfiguration, String, String) throws(ConfigurationError) -> Void) {
        self.path = path; self.value = value; self.apply = apply
    }
    var environmentName: String {
        "MINATO_" + path.split(separator: ".").map { part in
            // camelCase -> CAMEL_CASE
            var s = ""
            for ch in part {
                if ch.isUppercase { s += "_" }
                s += ch.uppercased()
            }
            return s
        }.joined(separator: "_")
    }

    static func int(_ path: String, _ range: ClosedRange<Int>, _ get: @escaping @Sendable (ServerConfiguration) -> Int,
                    _ set: @escaping @Sendable (inout ServerConfiguration, Int) -> Void) -> ConfigKey {
        ConfigKey(path: path, value: { String(get($0)) }) { (config: inout ServerConfiguration, value: String, source: String) throws(ConfigurationError) in
            guard let v = Int(value.trimmingCharacters(in: .whitespaces)), range.contains(v) else {
                throw ConfigurationError(message: "\(source): '\(value)' must be an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            set(&config, v)
        }
    }
    static func bool(_ path: String, _ get: @escaping @Sendable (ServerConfiguration) -> Bool,
                     _ set: @escaping @Sendable (inout ServerConfiguration, Bool) -> Void) -> ConfigKey {
        ConfigKey(path: path, value: { String(get($0)) }) { (config: inout ServerConfiguration, value: String, source: String) throws(ConfigurationError) in
            switch value.lowercased() {
            case "true", "yes", "on", "1": set(&config, true)
            case "false", "no", "off", "0": set(&config, false)
            default: throw ConfigurationError(message: "\(source): '\(value)' must be true or false")
            }
        }
    }

    static let all: [ConfigKey] = [
        ConfigKey(path: "server.host", value: { $0.host }) { (c: inout ServerConfiguration, v: String, _: String) throws(ConfigurationError) in c.host = v },
        .int("server.port", 1...65535, { $0.port }) { $0.port = $1 },
        ConfigKey(path: "server.webRoot", value: { $0.webRoot.isEmpty ? "(bundled)" : $0.webRoot }) { (c: inout ServerConfiguration, v: String, _: String) throws(ConfigurationError) in c.webRoot = v },
        .int("server.maxFrameBytes", 1024...(16 << 20), { $0.maxFrameBytes }) { $0.maxFrameBytes = $1 },
        .int("server.maxInFlightRequests", 1...1024, { $0.maxInFlightRequests }) { $0.maxInFlightRequests = $1 },
        .int("server.maxOutgoingBytes", 65536...(1 << 30), { $0.maxOutgoingBytes }) { $0.maxOutgoingBytes = $1 },
        .int("server.maxSdpBytes", 4096...(1 << 20), { $0.rooms.maxSdpBytes }) { $0.rooms.maxSdpBytes = $1 },
        .int("server.idleTimeoutSec", 1...86_400, { $0.idleTimeoutSec }) { $0.idleTimeoutSec = $1 },
        .int("server.maxConnections", 1...10_000_000, { $0.maxConnections }) { $0.maxConnections = $1 },
        .int("server.maxConnectionsPerAddress", 1...10_000_000, { $0.maxConnectionsPerAddress }) { $0.maxConnectionsPerAddress = $1 },
        ConfigKey(path: "server.allowedOrigins", value: { $0.allowedOrigins.isEmpty ? "(none)" : $0.allowedOrigins.joined(separator: ",") }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            c.allowedOrigins = try originList(v, s)
        },
        ConfigKey(path: "log.level", value: { $0.logLevel }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
            guard levels.contains(v.lowercased()) else {
                throw ConfigurationError(message: "\(s): '\(v)' must be one of \(levels.joined(separator: ", "))")
            }
            c.logLevel = v.lowercased()
        },
        .int("media.workers", 0...256, { $0.mediaWorkers }) { $0.mediaWorkers = $1 },
        ConfigKey(path: "media.ice.localAddresses", value: { $0.ice.localAddresses.joined(separator: ",") }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            let list = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            for a in list where !isNumericAddress(a) {
                throw ConfigurationError(message: "\(s): '\(a)' is not a numeric IPv4 or IPv6 address")
            }
            c.ice.localAddresses = list
        },
        .int("media.ice.portMin", 1024...65535, { Int($0.ice.portMin) }) { $0.ice.portMin = UInt32($1) },
        .int("media.ice.portMax", 1024...65535, { Int($0.ice.portMax) }) { $0.ice.portMax = UInt32($1) },
        .bool("media.ice.lite", { $0.ice.lite }) { $0.ice.lite = $1 },
        .bool("media.ice.tcp", { $0.ice.tcp }) { $0.ice.tcp = $1 },
        .bool("media.ice.directReceive", { $0.ice.directReceive }) { $0.ice.directReceive = $1 },
        .int("media.transportTimeoutSec", 0...3600, { $0.transportTimeoutSec }) { $0.transportTimeoutSec = $1 },
        .int("media.consentTimeoutSec", 0...3600, { $0.consentTimeoutSec }) { $0.consentTimeoutSec = $1 },
        .int("media.connectTimeoutSec", 1...600, { $0.connectTimeoutSec }) { $0.connectTimeoutSec = $1 },
        .int("media.retransmissionBufferPackets", 16...32_768, { $0.retransmissionBufferPackets }) { $0.retransmissionBufferPackets = $1 },
        .int("media.retransmissionMaxAgeMs", 100...10_000, { $0.retransmissionMaxAgeMs }) { $0.retransmissionMaxAgeMs = $1 },
        .int("media.bandwidth.initialKbps", 50...1_000_000, { $0.bandwidthInitialKbps }) { $0.bandwidthInitialKbps = $1 },
        .int("media.bandwidth.minKbps", 10...1_000_000, { $0.bandwidthMinKbps }) { $0.bandwidthMinKbps = $1 },
        .int("media.bandwidth.maxKbps", 10...1_000_000, { $0.bandwidthMaxKbps }) { $0.bandwidthMaxKbps = $1 },
        .int("media.rtcp.maxPacketsPerSec", 10...1_000_000, { $0.rtcpMaxPacketsPerSec }) { $0.rtcpMaxPacketsPerSec = $1 },
        .int("media.rtcp.maxWorkPerSec", 100...10_000_000, { $0.rtcpMaxWorkPerSec }) { $0.rtcpMaxWorkPerSec = $1 },
        .int("media.maxTransports", 1...1_000_000, { $0.rooms.maxTransports }) { $0.rooms.maxTransports = $1 },
        .int("media.maxRemoteCandidates", 1...1000, { $0.rooms.maxRemoteCandidates }) { $0.rooms.maxRemoteCandidates = $1 },
        .int("media.maxPendingCandidateBytes", 1024...(1 << 20), { $0.rooms.maxPendingCandidateBytes }) { $0.rooms.maxPendingCandidateBytes = $1 },
        .int("media.sdp.maxMediaSections", 2...1024, { $0.rooms.maxSdpMediaSections }) { $0.rooms.maxSdpMediaSections = $1 },
        .int("media.sdp.maxCodecsPerSection", 8...128, { $0.rooms.maxSdpCodecsPerSection }) { $0.rooms.maxSdpCodecsPerSection = $1 },
        ConfigKey(path: "media.dtls.certificateFile", value: { $0.dtlsCertificateFile.isEmpty ? "(generated at start)" : $0.dtlsCertificateFile }) { (c: inout ServerConfiguration, v: String, _: String) throws(ConfigurationError) in c.dtlsCertificateFile = v },
        ConfigKey(path: "media.dtls.privateKeyFile", value: { $0.dtlsPrivateKeyFile.isEmpty ? "(generated at start)" : $0.dtlsPrivateKeyFile }) { (c: inout ServerConfiguration, v: String, _: String) throws(ConfigurationError) in c.dtlsPrivateKeyFile = v },
        .int("rooms.maxMembersPerRoom", 1...10_000, { $0.rooms.maxMembersPerRoom }) { $0.rooms.maxMembersPerRoom = $1 },
        .int("rooms.maxPublicationsPerMember", 1...64, { $0.rooms.maxPublicationsPerMember }) { $0.rooms.maxPublicationsPerMember = $1 },
        .int("rooms.maxSubscriptionsPerMember", 1...1024, { $0.rooms.maxSubscriptionsPerMember }) { $0.rooms.maxSubscriptionsPerMember = $1 },
        .int("rooms.defaultMaxSubscribers", 1...10_000, { $0.rooms.defaultMaxSubscribers }) { $0.rooms.defaultMaxSubscribers = $1 },
        .int("rooms.maxSubscribersCap", 1...10_000, { $0.rooms.maxSubscribersCap }) { $0.rooms.maxSubscribersCap = $1 },
        .int("rooms.keepaliveIntervalSec", 1...3600, { $0.rooms.defaultKeepaliveIntervalSec }) { $0.rooms.defaultKeepaliveIntervalSec = $1 },
        .int("rooms.keepaliveIntervalGapSec", 0...3600, { $0.rooms.defaultKeepaliveIntervalGapSec }) { $0.rooms.defaultKeepaliveIntervalGapSec = $1 },
        .int("rooms.maxEventLog", 100...1_000_000, { $0.rooms.maxEventLog }) { $0.rooms.maxEventLog = $1 },
        .int("rooms.maxEventLogBytes", 65536...(1 << 30), { $0.rooms.maxEventLogBytes }) { $0.rooms.maxEventLogBytes = $1 },
        .int("rooms.maxEventsPerPage", 1...10_000, { $0.rooms.maxEventsPerPage }) { $0.rooms.maxEventsPerPage = $1 },
        .int("rooms.maxRooms", 1...1_000_000, { $0.rooms.maxRooms }) { $0.rooms.maxRooms = $1 },
        .int("rooms.maxRoomsCreatedPerConnection", 1...1_000_000, { $0.rooms.maxRoomsCreatedPerConnection }) { $0.rooms.maxRoomsCreatedPerConnection = $1 },
        .int("rooms.maxMembers", 1...1_000_000, { $0.rooms.maxMembers }) { $0.rooms.maxMembers = $1 },
        .int("rooms.maxMembersPerConnection", 1...10_000, { $0.rooms.maxMembersPerConnection }) { $0.rooms.maxMembersPerConnection = $1 },
        .int("rooms.speakerEventIntervalMs", 0...60_000, { $0.speakerEventIntervalMs }) { $0.speakerEventIntervalMs = $1 },
        .int("rooms.audio.forwardLoudest", 0...100, { $0.forwardLoudest }) { $0.forwardLoudest = $1 },
        .int("rooms.emptyTimeoutSec", 0...86_400, { $0.rooms.emptyTimeoutSec }) { $0.rooms.emptyTimeoutSec = $1 },
        .int("whip.maxSessions", 0...1_000_000, { $0.rooms.maxMediaSessions }) { $0.rooms.maxMediaSessions = $1 },
        .int("whip.maxNewSessionsPerSecPerAddress", 1...100_000, { $0.rooms.maxNewMediaSessionsPerSecPerAddress }) { $0.rooms.maxNewMediaSessionsPerSecPerAddress = $1 },
        .int("rooms.maxEncodings", 1...16, { $0.rooms.maxEncodings }) { $0.rooms.maxEncodings = $1 },
        .int("rooms.data.maxMessageBytes", 1024...(1 << 20), { $0.rooms.data.maxMessageBytes }) { $0.rooms.data.maxMessageBytes = $1 },
        .int("rooms.data.maxBufferedBytes", 65536...(1 << 28), { $0.rooms.data.maxBufferedBytes }) { $0.rooms.data.maxBufferedBytes = $1 },
        .int("rooms.data.maxMessagesPerSec", 1...1_000_000, { $0.rooms.data.maxMessagesPerSec }) { $0.rooms.data.maxMessagesPerSec = $1 },
        .int("rooms.data.maxChannelsPerTransport", 2...1024, { $0.rooms.data.maxChannelsPerTransport }) { $0.rooms.data.maxChannelsPerTransport = $1 },
        ConfigKey(path: "media.plain.allowedAddresses", value: { $0.rooms.plainAllowedAddresses.joined(separator: ",") }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            let list = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            for a in list where !isNumericAddress(a) {
                throw ConfigurationError(message: "\(s): '\(a)' is not a numeric IPv4 or IPv6 address")
            }
            c.rooms.plainAllowedAddresses = list
        },
        .int("media.plain.maxTransports", 0...10_000, { $0.rooms.plainMaxTransports }) { $0.rooms.plainMaxTransports = $1 },
        ConfigKey(path: "recording.directory", value: { $0.rooms.recording.directory }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard !v.isEmpty, !v.utf8.contains(0) else { throw ConfigurationError(message: "\(s): a directory path is needed") }
            c.rooms.recording.directory = v
        },
        .int("recording.maxConcurrent", 0...1000, { $0.rooms.recording.maxConcurrent }) { $0.rooms.recording.maxConcurrent = $1 },
        .int("recording.maxDurationSec", 1...(7 * 86_400), { $0.rooms.recording.maxDurationSec }) { $0.rooms.recording.maxDurationSec = $1 },
        .int("recording.minFreeBytes", 0...(1 << 50), { Int($0.rooms.recording.minFreeBytes) }) { $0.rooms.recording.minFreeBytes = Int64($1) },
        .int("recording.latencyMs", 20...5000, { $0.rooms.recording.latencyMs }) { $0.rooms.recording.latencyMs = $1 },
        .int("recording.stopTimeoutSec", 1...600, { $0.rooms.recording.stopTimeoutSec }) { $0.rooms.recording.stopTimeoutSec = $1 },
        ConfigKey(path: "recording.gstLaunch", value: { $0.rooms.recording.gstLaunch }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard !v.isEmpty, !v.utf8.contains(where: { $0 <= 0x20 }) else { throw ConfigurationError(message: "\(s): a program name or path without spaces is needed") }
            c.rooms.recording.gstLaunch = v
        },
        ConfigKey(path: "recording.gstDiscoverer", value: { $0.rooms.recording.gstDiscoverer }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard !v.isEmpty, !v.utf8.contains(where: { $0 <= 0x20 }) else { throw ConfigurationError(message: "\(s): a program name or path without spaces is needed") }
            c.rooms.recording.gstDiscoverer = v
        },
        .int("rooms.maxKeepaliveIntervalSec", 1...86_400, { $0.rooms.maxKeepaliveIntervalSec }) { $0.rooms.maxKeepaliveIntervalSec = $1 },
        .int("rooms.maxKeepaliveIntervalGapSec", 0...86_400, { $0.rooms.maxKeepaliveIntervalGapSec }) { $0.rooms.maxKeepaliveIntervalGapSec = $1 },
        ConfigKey(path: "auth.secret", value: { $0.authSecret.isEmpty ? "(not set: auth off)" : "(set)" }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            // HS256 keys shorter than the hash output (32 bytes) are weak; JWTKit refuses them.
            guard v.isEmpty || v.utf8.count >= 32 else {
                throw ConfigurationError(message: "\(s): the secret must be at least 32 bytes (or empty for auth off)")
            }
            c.authSecret = v
        },
        .int("auth.tokenExpiringNoticeSec", 1...3600, { $0.rooms.tokenExpiringNoticeSec }) { $0.rooms.tokenExpiringNoticeSec = $1 },
        ConfigKey(path: "admin.apiSecret", value: { $0.adminApiSecret.isEmpty ? "(not set)" : "(set)" }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard v.isEmpty || v.utf8.count >= 32 else {
                throw ConfigurationError(message: "\(s): the secret must be at least 32 bytes (or empty)")
            }
            c.adminApiSecret = v
        },
        ConfigKey(path: "admin.corsOrigins", value: { $0.adminCorsOrigins.isEmpty ? "(none)" : $0.adminCorsOrigins.joined(separator: ",") }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            c.adminCorsOrigins = try originList(v, s)
        },
        ConfigKey(path: "media.clientIceServers", value: { $0.clientIceServers.isEmpty ? "(none)" : $0.clientIceServers.joined(separator: ",") }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            let list = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            for u in list where !(u.hasPrefix("stun:") || u.hasPrefix("turn:") || u.hasPrefix("turns:"))
                || u.utf8.contains(where: { $0 <= 0x20 || $0 == UInt8(ascii: ">") || $0 >= 0x7F }) {
                throw ConfigurationError(message: "\(s): '\(u)' is not a stun:, turn: or turns: URL")
            }
            c.clientIceServers = list
        },
        ConfigKey(path: "media.turn.urls", value: { $0.turn.turnUrls.isEmpty ? "(none: no TURN)" : $0.turn.turnUrls.joined(separator: ",") }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            let list = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            for u in list { if let problem = IceServerConfiguration.urlProblem(u) { throw ConfigurationError(message: "\(s): \(problem)") } }
            c.turn.turnUrls = list
        },
        ConfigKey(path: "media.turn.secret", value: { $0.turn.turnSecret.isEmpty ? "(not set)" : "(set)" }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard v.isEmpty || v.utf8.count >= IceServerConfiguration.minSecretBytes else {
                throw ConfigurationError(message: "\(s): the secret must be at least \(IceServerConfiguration.minSecretBytes) bytes (or empty)")
            }
            c.turn.turnSecret = v
        },
        .int("media.turn.ttlSec", IceServerConfiguration.ttlRange, { $0.turn.turnTtlSec }) { $0.turn.turnTtlSec = $1 },
        ConfigKey(path: "cluster.redisUrl", value: { $0.cluster.redisUrl.isEmpty ? "(none: single node)" : $0.cluster.redisUrl }) { (c: inout ServerConfiguration, v: String, _: String) throws(ConfigurationError) in
            c.cluster.redisUrl = v.trimmingCharacters(in: .whitespaces)
        },
        ConfigKey(path: "cluster.nodeId", value: { $0.cluster.nodeId.isEmpty ? "(generated at start)" : $0.cluster.nodeId }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard v.isEmpty || ClusterConfiguration.isValidNodeId(v) else {
                throw ConfigurationError(message: "\(s): '\(v.prefix(40))' must be 1 to 32 letters, digits or '-'")
            }
            c.cluster.nodeId = v
        },
        ConfigKey(path: "cluster.advertiseUrl", value: { $0.cluster.advertiseUrl.isEmpty ? "(none)" : $0.cluster.advertiseUrl }) { (c: inout ServerConfiguration, v: String, _: String) throws(ConfigurationError) in
            c.cluster.advertiseUrl = v.trimmingCharacters(in: .whitespaces)
        },
        ConfigKey(path: "cluster.secret", value: { $0.cluster.secret.isEmpty ? "(not set)" : "(set)" }) { (c: inout ServerConfiguration, v: String, s: String) throws(ConfigurationError) in
            guard v.isEmpty || v.utf8.count >= 32 else {
                throw ConfigurationError(message: "\(s): the secret must be at least 32 bytes (or empty)")
            }
            c.cluster.secret = v
        },
        .int("cluster.leaseMs", 300...600_000, { $0.cluster.leaseMs }) { $0.cluster.leaseMs = $1 },
        .int("cluster.drainTimeoutSec", 0...86_400, { $0.cluster.drainTimeoutSec }) { $0.cluster.drainTimeoutSec = $1 },
        .int("cluster.storeTimeoutMs", 50...60_000, { $0.cluster.storeTimeoutMs }) { $0.cluster.storeTimeoutMs = $1 },
        .bool("cluster.cascade", { $0.cluster.cascade }) { $0.cluster.cascade = $1 },
        .int("cluster.maxNodesPerRoom", 1...64, { $0.cluster.maxNodesPerRoom }) { $0.cluster.maxNodesPerRoom = $1 },
        .int("cluster.relayLingerMs", 0...600_000, { $0.cluster.relayLingerMs }) { $0.cluster.relayLingerMs = $1 },
        .int("cluster.loadLimitPercent", 1...100, { $0.cluster.loadLimitPercent }) { $0.cluster.loadLimitPercent = $1 },
    ]
}

/// A comma-separated list of web origins (`scheme://host[:port]`, no path), lowercased as
/// browsers send them in `Origin`.
func originList(_ value: String, _ source: String) throws(ConfigurationError) -> [String] {
    let list = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
    for o in list {
        let rest = o.hasPrefix("http://") ? o.dropFirst(7) : o.hasPrefix("https://") ? o.dropFirst(8) : nil
        guard let rest, !rest.isEmpty, !rest.contains("/"), !rest.contains(where: { $0 == " " || $0 == "*" }) else {
            throw ConfigurationError(message: "\(source): '\(o)' is not an origin (scheme://host[:port], with no path or trailing slash)")
        }
    }
    return list
}

func isNumericAddress(_ s: String) -> Bool {
    var v4 = in_addr(), v6 = in6_addr()
    return inet_pton(AF_INET, s, &v4) == 1 || inet_pton(AF_INET6, s, &v6) == 1
}
