// swift-tools-version:6.1
// libFuzzer targets for Minato's parsers and packet path (scripts/fuzz.sh builds and runs them).
// Each target is a thin LLVMFuzzerTestOneInput calling the library's own functions.
import PackageDescription

let fuzz: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "minato-fuzz",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "minato", path: "..")],
    targets: [
        .executableTarget(name: "FuzzRtp", dependencies: [.product(name: "MinatoWire", package: "minato")], swiftSettings: fuzz),
        .executableTarget(name: "FuzzRtcp", dependencies: [.product(name: "MinatoWire", package: "minato")], swiftSettings: fuzz),
        .executableTarget(name: "FuzzSdp", dependencies: [.product(name: "MinatoWire", package: "minato")], swiftSettings: fuzz),
        .executableTarget(name: "FuzzDemux", dependencies: [.product(name: "MinatoWire", package: "minato")], swiftSettings: fuzz),
        .executableTarget(name: "FuzzRouter", dependencies: [.product(name: "MinatoMedia", package: "minato"),
                                                             .product(name: "MinatoWire", package: "minato")], swiftSettings: fuzz),
        .executableTarget(name: "FuzzDataChannel", dependencies: [.product(name: "MinatoTransport", package: "minato")], swiftSettings: fuzz),
        .executableTarget(name: "FuzzJsonRpc", dependencies: [.product(name: "MinatoRooms", package: "minato"),
                                                              .product(name: "MinatoSignaling", package: "minato")], swiftSettings: fuzz),
    ],
    swiftLanguageModes: [.v6]
)
