// swift-tools-version:6.1
// The wire, engine and transport unit tests, built on their own so `make sanitize` can run them under
// AddressSanitizer and ThreadSanitizer without compiling the server's dependencies (NIO,
// Hummingbird, swift-crypto) with instrumentation. The test sources are the main package's
// (Tests/MinatoWireTests, Tests/MinatoMediaTests, Tests/MinatoTransportTests, linked here).
import PackageDescription

let package = Package(
    name: "minato-sanitize",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "minato", path: ".."),
                   .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0")],
    targets: [
        .testTarget(name: "MinatoWireTests", dependencies: [.product(name: "MinatoWire", package: "minato")],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "MinatoMediaTests", dependencies: [.product(name: "MinatoMedia", package: "minato"),
                                                             .product(name: "MinatoWire", package: "minato")]),
        // DTLS + SRTP over memory, the kernel send path and the worker's inbox: under TSan the
        // only code here that runs on more than one thread.
        .testTarget(name: "MinatoTransportTests", dependencies: [.product(name: "MinatoTransport", package: "minato"),
                                                                 .product(name: "MinatoMedia", package: "minato"),
                                                                 .product(name: "MinatoWire", package: "minato"),
                                                                 .product(name: "Logging", package: "swift-log")]),
    ],
    swiftLanguageModes: [.v6]
)
