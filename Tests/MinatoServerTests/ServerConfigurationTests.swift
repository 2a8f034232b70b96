import Foundation
import Testing
@testable import MinatoServer

@Suite struct ServerConfigurationTests {
    static let repoConfig = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("config/minato.yaml").path

    @Test func embeddedDefaultsAreLoopbackOnly() throws {
        let c = try ServerConfiguration.load(file: nil, environment: [:])
        #expect(c.host == "127.0.0.1" && c.port == 7880)
        #expect(c.ice.localAddresses == ["127.0.0.1"] && c.ice.lite)
        #expect(c.ice.portMin == 40000 && c.ice.portMax == 40999)
        #expect(c.maxFrameBytes == 262_144)
        #expect(c.rooms.maxMembersPerRoom == 100 && c.rooms.maxPublicationsPerMember == 8)
        #expect(c.rooms.defaultMaxSubscribers == 50)
    }

    /// The documented file states every key with its default: loading it changes nothing, and
    /// every key the server knows appears in it.
    @Test func documentedFileMatchesEmbeddedDefaultsAndListsEveryKey() throws {
        let fromFile = try ServerConfiguration.load(file: Self.repoConfig, environment: [:])
        let defaults = ServerConfiguration()
        #expect(fromFile.host == defaults.host && fromFile.port == defaults.port)
        #expect(fromFile.ice.localAddresses == defaults.ice.localAddresses)
        #expect(fromFile.ice.portMin == defaults.ice.portMin && fromFile.ice.portMax == defaults.ice.portMax)
        #expect(fromFile.transportTimeoutSec == defaults.transportTimeoutSec)
        #expect(fromFile.rooms.defaultKeepaliveIntervalGapSec == defaults.rooms.defaultKeepaliveIntervalGapSec)
        #expect(fromFile.rooms.maxEventLog == defaults.rooms.maxEventLog)
        // Every key, by its effective value: the file documents exactly the embedded defaults.
        for (file, embedded) in zip(fromFile.effectiveValues, defaults.effectiveValues) {
            #expect(file.value == embedded.value, "config/minato.yaml says \(file.key): \(file.value), the default is \(embedded.value)")
        }
        let text = try String(contentsOfFile: Self.repoConfig, encoding: .utf8)
        for key in ConfigKey.all {
            let leaf = String(key.path.split(separator: ".").last!)
            #expect(text.contains("\n  \(leaf):") || text.contains("\n    \(leaf):"), "config/minato.yaml lacks \(key.path)")
        }
    }

    @Test func environmentOverridesFile() throws {
        let c = try ServerConfiguration.load(file: Self.repoConfig, environment: [
            "MINATO_SERVER_PORT": "9000", "MINATO_MEDIA_ICE_LOCAL_ADDRESSES": "127.0.0.1, ::1",
            "MINATO_MEDIA_ICE_LITE": "false", "MINATO_ROOMS_KEEPALIVE_INTERVAL_GAP_SEC": "5", "PATH": "/bin",
        ])
        #expect(c.port == 9000)
        #expect(c.ice.localAddresses == ["127.0.0.1", "::1"])
        #expect(!c.ice.lite)
        #expect(c.rooms.defaultKeepaliveIntervalGapSec == 5)
    }

    @Test func unknownKeysAndBadValuesAreErrorsThatNameTheKey() {
        func message(_ yaml: String) -> String? {
            var c = ServerConfiguration()
            do { try c.apply(yaml: yaml, source: "test.yaml"); try c.validate(); return nil } catch { return error.message }
        }
        #expect(message("server:\n  prot: 1\n")?.contains("unknown key 'server.prot'") == true)
        #expect(message("server:\n  port: seventy\n")?.contains("server.port") == true)
        #expect(message("media:\n  ice:\n    localAddresses: [eth0]\n")?.contains("not a numeric") == true)
        #expect(message("media:\n  ice:\n    portMin: 50000\n    portMax: 40000\n")?.contains("portMin/portMax") == true)
        #expect(message("log:\n  level: loud\n")?.contains("log.level") == true)
        #expect(message(": : :\n  - [") != nil)
        var c = ServerConfiguration()
        #expect(throws: ConfigurationError.self) { try c.apply(environment: ["MINATO_NO_SUCH_KEY": "1"]) }
    }

    /// The HTTP listener's limits and origins: defaults, environment names, and what is refused.
    @Test func connectionLimitsAndAllowedOrigins() throws {
        let d = try ServerConfiguration.load(file: nil, environment: [:])
        #expect(d.idleTimeoutSec == 30 && d.maxConnections == 10_000 && d.maxConnectionsPerAddress == 1000)
        #expect(d.allowedOrigins.isEmpty)
        let c = try ServerConfiguration.load(file: nil, environment: [
            "MINATO_SERVER_IDLE_TIMEOUT_SEC": "3", "MINATO_SERVER_MAX_CONNECTIONS": "20",
            "MINATO_SERVER_MAX_CONNECTIONS_PER_ADDRESS": "5",
            "MINATO_SERVER_ALLOWED_ORIGINS": "http://App.example, https://app.example:8443",
        ])
        #expect(c.idleTimeoutSec == 3 && c.maxConnections == 20 && c.maxConnectionsPerAddress == 5)
        #expect(c.allowedOrigins == ["http://app.example", "https://app.example:8443"])
        func message(_ yaml: String) -> String? {
            var c = ServerConfiguration()
            do { try c.apply(yaml: yaml, source: "test.yaml"); return nil } catch { return error.message }
        }
        #expect(message("server:\n  idleTimeoutSec: 0\n")?.contains("server.idleTimeoutSec") == true)
        #expect(message("server:\n  maxConnections: 0\n")?.contains("server.maxConnections") == true)
        #expect(message("server:\n  maxConnectionsPerAddress: -1\n")?.contains("server.maxConnectionsPerAddress") == true)
        for bad in ["app.example", "http://app.example/", "http://app.example/path", "*", "https://*.example", "ftp://x"] {
            #expect(message("server:\n  allowedOrigins: [\"\(bad)\"]\n")?.contains("is not an origin") == true, "\(bad)")
        }
        #expect(message("admin:\n  corsOrigins: [\"http://app.example/\"]\n")?.contains("is not an origin") == true)
    }

    /// Who passes `OriginPolicy`: no Origin, the server's own origin (http or https + Host), a
    /// listed one; not another site, not `null`, not a listed origin's look-alike.
    @Test func originPolicyVerdicts() {
        let none = OriginPolicy(listed: [])
        #expect(none.verdict(origin: nil, host: "127.0.0.1:7880") == .noOrigin)
        #expect(none.verdict(origin: "http://127.0.0.1:7880", host: "127.0.0.1:7880") == .sameOrigin)
        #expect(none.verdict(origin: "https://sfu.example", host: "SFU.example") == .sameOrigin)
        #expect(none.verdict(origin: "http://evil.example", host: "127.0.0.1:7880") == .refused)
        #expect(none.verdict(origin: "null", host: "127.0.0.1:7880") == .refused)
        // The Swift SDK's WebSocket client (Hummingbird's) sends `Origin: ws://HOST`: no page has it.
        #expect(none.verdict(origin: "ws://127.0.0.1", host: "127.0.0.1:7880") == .noOrigin)
        #expect(none.verdict(origin: "http://127.0.0.1:7881", host: "127.0.0.1:7880") == .refused)
        #expect(none.verdict(origin: "http://127.0.0.1:7880", host: nil) == .refused)
        let app = OriginPolicy(listed: ["http://app.example"])
        #expect(app.verdict(origin: "http://app.example", host: "127.0.0.1:7880") == .listed)
        #expect(app.verdict(origin: "http://APP.example", host: "127.0.0.1:7880") == .listed)
        #expect(app.verdict(origin: "https://app.example", host: "127.0.0.1:7880") == .refused)
        #expect(app.verdict(origin: "http://app.example.evil", host: "127.0.0.1:7880") == .refused)
        #expect(app.isListed("http://app.example") && !app.isListed("http://127.0.0.1:7880"))
    }

    /// The connection gate counts per address and in total, refuses past either limit, and
    /// admits again once a slot is released.
    @Test func connectionGateCountsAndReleases() {
        let gate = ConnectionGate(maxConnections: 3, maxConnectionsPerAddress: 2)
        #expect(gate.admit("198.18.0.1") == nil && gate.admit("198.18.0.1") == nil)
        #expect(gate.admit("198.18.0.1") == .maxConnectionsPerAddress)
        #expect(gate.admit("198.18.0.2") == nil)
        #expect(gate.admit("198.18.0.3") == .maxConnections)
        #expect(gate.openConnections == 3 && gate.openConnections(from: "198.18.0.1") == 2)
        gate.release("198.18.0.1")
        #expect(gate.admit("198.18.0.3") == nil)
        #expect(gate.admit("198.18.0.1") == .maxConnections)
        gate.release("198.18.0.2")
        gate.release("198.18.0.3")
        #expect(gate.admit("198.18.0.1") == nil)
        #expect(gate.openConnections(from: "198.18.0.1") == 2 && gate.openConnections == 2)
        #expect(gate.refusalText(.maxConnectionsPerAddress).contains("server.maxConnectionsPerAddress"))
        #expect(gate.refusalText(.maxConnections).contains("server.maxConnections"))
    }
}
