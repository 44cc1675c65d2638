// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "RichPush",
    platforms: [.macOS(.v13), .iOS(.v15)],
    products: [
        .library(name: "RichPushCore", targets: ["RichPushCore"]),
        .library(name: "RichPushCharts", targets: ["RichPushCharts"]),
        .executable(name: "richpush", targets: ["richpush"]),
        .executable(name: "richpush-bench", targets: ["richpush-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // Foundation only: must keep building for iOS extensions.
        .target(name: "RichPushCore"),
        .target(name: "RichPushCharts", dependencies: ["RichPushCore"]),
        .executableTarget(
            name: "richpush",
            dependencies: [
                "RichPushCore",
                "RichPushCharts",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "richpush-bench",
            dependencies: [
                "RichPushCore",
                "RichPushCharts",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "RichPushCoreTests", dependencies: ["RichPushCore"]),
        .testTarget(name: "RichPushChartsTests", dependencies: ["RichPushCharts", "RichPushCore"]),
        .testTarget(name: "richpushTests", dependencies: ["richpush", "RichPushCore"]),
    ]
)
