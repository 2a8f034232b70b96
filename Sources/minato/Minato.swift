import ArgumentParser
import Logging
import MinatoServer
import MinatoRooms
import Foundation
import Metrics
import Prometheus

/// `minato`: the Minato SFU. `minato serve` (the default) runs the server; `minato check-config`
/// validates a configuration without starting anything.
@main
struct Minato: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "minato",
        abstract: "Minato, a WebRTC SFU with the SkyWay room model.",
        subcommands: [Serve.self, CheckConfig.self, MintToken.self],
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
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let server: MinatoServer
        do { server = try await MinatoServer(configuration: config, logger: logger, registry: registry) } catch {
            FileHandle.standardError.write(Data("minato: cannot start: \(error)\n".utf8))
            throw ExitCode(2)
        }
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
            print("configuration ok")
            for (key, value) in c.effectiveValues { print("\(key): \(value)") }
            print("media.workers threads: \(c.resolvedWorkerCount)")

        } catch {
            FileHandle.standardError.write(Data("minato: configuration error: \(error)\n".utf8))
            throw ExitCode(2)
        }
    }
}

/// `minato token`: mints a development client token (HS256, SkyWay v3 scope) with the
/// configured `auth.secret` (or `--secret`).
struct MintToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "token", abstract: "Mint a client token (JWT) for development.")
    @OptionGroup var options: ConfigOptions
    @Option(help: "The signing secret (default: auth.secret from the configuration / MINATO_AUTH_SECRET).")
    var secret: String?
    @Option(help: "scope.appId.") var app = "minato-dev"
    @Option(help: "Room name glob (scope.rooms[].name); '*' = every room.") var room = "*"
    @Option(help: "Room methods, comma-separated: create,close,updateMetadata.") var roomMethods = "create,close,updateMetadata"
    @Option(help: "Member name glob (scope.rooms[].member.name).") var member = "*"
    @Option(help: "Member methods, comma-separated: publish,subscribe,updateMetadata.") var methods = "publish,subscribe,updateMetadata"
    @Option(help: "sfu.maxSubscribersLimit.") var maxSubscribers: Int?
    @Flag(help: "Let the token use the admin API (scope.admin).") var admin = false
    @Option(help: "Lifetime: a number with s, m, h or d (e.g. 90s, 30m, 1h, 7d).") var ttl = "1h"

    func run() async throws {
        let key: String
        if let secret { key = secret } else {
            let config: ServerConfiguration
            do { config = try options.load() } catch {
                FileHandle.standardError.write(Data("minato: configuration error: \(error)\n".utf8))
                throw ExitCode(2)
            }
            key = config.authSecret
        }
        guard key.utf8.count >= 32 else {
            FileHandle.standardError.write(Data("minato: no signing secret: set auth.secret (MINATO_AUTH_SECRET) or pass --secret (32+ bytes)\n".utf8))
            throw ExitCode(2)
        }
        guard let seconds = Self.seconds(ttl), seconds > 0 else {
            FileHandle.standardError.write(Data("minato: --ttl '\(ttl)' is not a duration like 90s, 30m, 1h or 7d\n".utf8))
            throw ExitCode(2)
        }
        func list(_ s: String) -> Set<String> { Set(s.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }) }
        let rule = AuthGrant.RoomRule(name: room, methods: list(roomMethods),
                                      member: AuthGrant.MemberRule(name: member, methods: list(methods)),
                                      sfuEnabled: true, maxSubscribersLimit: maxSubscribers)
        let authority = await TokenAuthority(secret: key)
        print(try await authority.mint(appId: app, rooms: [rule], admin: admin, ttl: .seconds(seconds)))
    }

    static func seconds(_ text: String) -> Int? {
        guard let unit = text.last, let n = Int(text.dropLast()) else { return Int(text) }
        switch unit {
        case "s": return n
        case "m": return n * 60
        case "h": return n * 3600
        case "d": return n * 86400
        default: return nil
        }
    }
}
