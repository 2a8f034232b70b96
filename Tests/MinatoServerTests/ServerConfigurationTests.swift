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
}
