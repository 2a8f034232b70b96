// swift-tools-version:6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "minato",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "minato", targets: ["minato"]),
        .library(name: "MinatoWire", targets: ["MinatoWire"]),
        .library(name: "MinatoMedia", targets: ["MinatoMedia"]),
        .library(name: "MinatoTransport", targets: ["MinatoTransport"]),
        .library(name: "MinatoRooms", targets: ["MinatoRooms"]),
        .library(name: "MinatoSignaling", targets: ["MinatoSignaling"]),
        .library(name: "MinatoCluster", targets: ["MinatoCluster"]),
        .library(name: "MinatoServer", targets: ["MinatoServer"]),
        .library(name: "MinatoClient", targets: ["MinatoClient"]),
        .executable(name: "minato-client", targets: ["minato-client"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0"),
    ],
    targets: [
        // C libraries, found with pkg-config.
        .systemLibrary(name: "CNice", pkgConfig: "nice", providers: [.apt(["libnice-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // libsrtp2 from Debian's source package built on OpenSSL (scripts/build-libsrtp.sh; the
        // Makefile puts its .pc on PKG_CONFIG_PATH), never Debian's NSS build.
        .systemLibrary(name: "CSRTP", pkgConfig: "libsrtp2-openssl"),
        .systemLibrary(name: "CHiredis", pkgConfig: "hiredis", providers: [.apt(["libhiredis-dev"])]),
        // SCTP in user space for WebRTC data channels (run on the media workers' threads).
        .systemLibrary(name: "CUsrsctp", pkgConfig: "usrsctp", providers: [.apt(["libusrsctp-dev"])]),
        // Macros and variadic C calls Swift cannot import.
        .target(name: "CMinatoShims", dependencies: ["CNice", "COpenSSL", "CSRTP"]),

        // Wire: RTP/RTCP views and builders, RFC 7983 demux, SDP. Pure Swift, no I/O.
        .target(name: "MinatoWire", swiftSettings: strict),
        // Media engine: Router / Producer / Consumer. Sans-IO.
        .target(name: "MinatoMedia", dependencies: ["MinatoWire"], swiftSettings: strict),
        // Transport: libnice ICE, OpenSSL DTLS, libsrtp2 SRTP, usrsctp data channels, media worker threads.
        .target(
            name: "MinatoTransport",
            dependencies: ["MinatoWire", "MinatoMedia", "CNice", "COpenSSL", "CSRTP", "CMinatoShims", "CUsrsctp",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        // Rooms: the SkyWay room model over the engine.
        .target(
            name: "MinatoRooms",
            dependencies: ["MinatoWire", "MinatoMedia", "MinatoTransport",
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           // HMAC-SHA1 of TURN credentials (IceServers.swift).
                           .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strict),
        // Signaling: the JSON-RPC front door of the room core (docs/protocol.md). No I/O.
        .target(
            name: "MinatoSignaling",
            dependencies: ["MinatoRooms", .product(name: "Metrics", package: "swift-metrics")],
            swiftSettings: strict),
        // Cluster: the shared store (Redis through hiredis), leases, placement, node-to-node
        // links and request routing. The room core knows nothing of it.
        .target(
            name: "MinatoCluster",
            dependencies: ["MinatoRooms", "MinatoSignaling", "CHiredis",
                           .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                           .product(name: "HTTPTypes", package: "swift-http-types"),
                           .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "JWTKit", package: "jwt-kit"),
                           .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "Metrics", package: "swift-metrics")],
            swiftSettings: strict),
        // Server: JSON-RPC over WebSocket, config.
        .target(
            name: "MinatoServer",
            dependencies: ["MinatoRooms", "MinatoSignaling", "MinatoTransport", "MinatoCluster",
                           .product(name: "Hummingbird", package: "hummingbird"),
                           .product(name: "HummingbirdCore", package: "hummingbird"),
                           .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                           .product(name: "HTTPTypes", package: "swift-http-types"),
                           .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOHTTP1", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "Yams", package: "Yams"),
                           .product(name: "JWTKit", package: "jwt-kit"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           .product(name: "Prometheus", package: "swift-prometheus")],
            resources: [.copy("Resources/web"), .copy("Resources/openapi.yaml")],
            swiftSettings: strict),
        // Client SDK: SkyWay iOS names over PROTOCOL.md, client-side ICE/DTLS/SRTP (bots, load).
        .target(
            name: "MinatoClient",
            dependencies: ["MinatoWire", "MinatoTransport",
                           .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        // A command-line bot on the client SDK (also what the SDK's interop tests drive).
        .executableTarget(
            name: "minato-client",
            dependencies: ["MinatoClient", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strict),
        // The RTP load generator (bench/run.sh): Minato through the client SDK and Janus through its
        // HTTP API, the same packets. In the root package so `make test`'s build also builds it
        // (CI's `make bench-smoke` needs no build of its own).
        .executableTarget(
            name: "minato-bench",
            dependencies: ["MinatoClient", "MinatoTransport", "MinatoWire",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .executableTarget(
            name: "minato",
            dependencies: ["MinatoServer", "MinatoRooms", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           .product(name: "Prometheus", package: "swift-prometheus")],
            swiftSettings: strict),

        .testTarget(name: "MinatoWireTests", dependencies: ["MinatoWire"], resources: [.copy("Fixtures")]),
        .testTarget(name: "MinatoMediaTests", dependencies: ["MinatoMedia", "MinatoWire"]),
        .testTarget(name: "MinatoServerTests", dependencies: ["MinatoServer", "MinatoRooms", "MinatoSignaling",
                                                              .product(name: "NIOEmbedded", package: "swift-nio"),
                                                              .product(name: "NIOHTTP1", package: "swift-nio")]),
        .testTarget(name: "MinatoClusterTests", dependencies: ["MinatoCluster", "MinatoSignaling", "MinatoRooms"]),
        .testTarget(name: "MinatoTransportTests", dependencies: ["MinatoTransport", "MinatoMedia", "MinatoWire",
                                                                 .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "MinatoClientTests", dependencies: ["MinatoClient", "MinatoTransport", "MinatoWire"]),
    ],
    swiftLanguageModes: [.v6]
)
