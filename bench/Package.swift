// swift-tools-version:6.1
// Minato's micro benchmarks of the packet path (ordo-one/benchmark, with malloc counting).
// Run: cd bench && swift package benchmark (see the README's "Benchmarks"). The RTP load
// generator `minato-bench` (bench/run.sh) is a product of the root package.
import PackageDescription

let package = Package(
    name: "minato-bench",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "minato", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
    ],
    targets: [
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
