// swift-tools-version:6.1
// Minato's benchmarks: the RTP load generator `minato-bench` (Minato vs Janus, bench/run.sh) and
// micro benchmarks of the packet path (ordo-one/benchmark, with malloc counting). Run: cd bench && swift package benchmark   (see the README's "Benchmarks").
import PackageDescription

let package = Package(
    name: "minato-bench",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "minato", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
    ],
    targets: [
        // The load generator: Minato (Swift client SDK) and Janus (HTTP API), same packets.
        .executableTarget(
            name: "minato-bench",
            dependencies: [
                .product(name: "MinatoClient", package: "minato"),
                .product(name: "MinatoTransport", package: "minato"),
                .product(name: "MinatoWire", package: "minato"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/minato-bench"),
        .executableTarget(
            name: "Forwarding",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "MinatoMedia", package: "minato"),
                .product(name: "MinatoWire", package: "minato"),
                .product(name: "MinatoTransport", package: "minato"),
            ],
            path: "Benchmarks/Forwarding",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]),
    ],
    swiftLanguageModes: [.v6]
)
