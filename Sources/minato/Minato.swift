import ArgumentParser
import Logging
import MinatoServer
import Foundation

/// `minato`: the Minato SFU. `minato serve` (the default) runs the server; `minato check-config`
/// validates a configuration without starting anything.
@main
struct Minato: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "minato",
        abstract: "Minato, a WebRTC SFU with the SkyWay room model.",
        subcommands: [Serve.self, CheckConfig.self],
        defaultSubcommand: Serve.self)
}

/// Options every subcommand that reads configuration shares.
struct ConfigOptions: ParsableArguments {
    @Option(name: .long, help: "YAML configuration file (see config/minato.yaml). Default: $MINATO_CONFIG, else embedded defaults.")
    var config: String?
    @Option(name: .long, help: "HTTP/WebSocket listen address (server.host).")
    var host: String?
    @Option(name: .long, help: "HTTP/WebSocket listen port (server.port).")
    var port: Int?
    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical (log.level).")
    var logLevel: String?
    @Option(name: .long, help: "Media worker threads, 0 = one per core (media.workers).")
    var workers: Int?

    func load() throws -> ServerConfiguration {
        let env = ProcessInfo.processInfo.environment
        var c = try ServerConfiguration.load(file: config ?? env["MINATO_CONFIG"], environment: env)
        var flags: [String] = []
        if let host { flags.append("server:\n  host: \"\(host)\"") }
        if let port { flags.append("server:\n  port: \(port)") }
        if let logLevel { flags.append("log:\n  level: \(logLevel)") }
        if let workers { flags.append("media:\n  workers: \(workers)") }
        for f in flags { try c.apply(yaml: f, source: "command line") }
        try c.validate()
        return c
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the server (the default).")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let config: ServerConfiguration
        do { config = try options.load() } catch {
            FileHandle.standardError.write(Data("minato: configuration error: \(error)\n".utf8))
            throw ExitCode(2)
        }
        let level = Logger.Level(rawValue: config.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "minato")
        let server = try MinatoServer(configuration: config, logger: logger)
        try await server.run()
    }
}

struct CheckConfig: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config",
                                                    abstract: "Validate the configuration and print the effective values.")
    @OptionGroup var options: ConfigOptions

    func run() async throws {
        do {
            let c = try options.load()
            print("""
            configuration ok
            server.host: \(c.host)
            server.port: \(c.port)
            server.maxFrameBytes: \(c.maxFrameBytes)
            server.webRoot: \(c.webRoot.isEmpty ? "(bundled)" : c.webRoot)
            log.level: \(c.logLevel)
            media.workers: \(c.mediaWorkers) (\(c.resolvedWorkerCount) threads)
            media.ice.localAddresses: \(c.ice.localAddresses.joined(separator: ","))
            media.ice.portMin: \(c.ice.portMin)
            media.ice.portMax: \(c.ice.portMax)
            media.ice.lite: \(c.ice.lite)
            media.transportTimeoutSec: \(c.transportTimeoutSec)
            rooms.maxMembersPerRoom: \(c.rooms.maxMembersPerRoom)
            rooms.maxPublicationsPerMember: \(c.rooms.maxPublicationsPerMember)
            rooms.maxSubscriptionsPerMember: \(c.rooms.maxSubscriptionsPerMember)
            rooms.defaultMaxSubscribers: \(c.rooms.defaultMaxSubscribers)
            rooms.maxSubscribersCap: \(c.rooms.maxSubscribersCap)
            rooms.keepaliveIntervalSec: \(c.rooms.defaultKeepaliveIntervalSec)
            rooms.keepaliveIntervalGapSec: \(c.rooms.defaultKeepaliveIntervalGapSec)
            rooms.maxEventLog: \(c.rooms.maxEventLog)
            """)
        } catch {
            FileHandle.standardError.write(Data("minato: configuration error: \(error)\n".utf8))
            throw ExitCode(2)
        }
    }
}
