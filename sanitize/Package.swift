// swift-tools-version:6.1
// The wire and engine unit tests, built on their own so `make sanitize` can run them under
// AddressSanitizer and ThreadSanitizer without compiling the server's dependencies (NIO,
// Hummingbird, swift-crypto) with instrumentation. The test sources are the main package's
// (Tests/MinatoWireTests, Tests/MinatoMediaTests, linked here).
import PackageDescription

let package = Package(
    name: "minato-sanitize",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "minato", path: "..")],
    targets: [
        .testTarget(name: "MinatoWireTests", dependencies: [.product(name: "MinatoWire", package: "minato")],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "MinatoMediaTests", dependencies: [.product(name: "MinatoMedia", package: "minato"),
                                                             .product(name: "MinatoWire", package: "minato")]),
    ],
    swiftLanguageModes: [.v6]
)
