// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "RichPush",
    platforms: [.macOS(.v13), .iOS(.v15)],
    products: [
        .library(name: "RichPushCore", targets: ["RichPushCore"]),
        .library(name: "RichPushCharts", targets: ["RichPushCharts"]),
        .library(name: "RichPushMedia", targets: ["RichPushMedia"]),
        .library(name: "RichPushNotificationService", targets: ["RichPushNotificationService"]),
        .library(name: "RichPushSandbox", targets: ["RichPushSandbox"]),
        .executable(name: "richpush", targets: ["richpush"]),
        .executable(name: "richpush-bench", targets: ["richpush-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // Foundation only: must keep building for iOS extensions.
        .target(name: "RichPushCore"),
        .target(name: "RichPushCharts", dependencies: ["RichPushCore"]),
        // The service extension's pipeline: Foundation and URLSession only, never NIO or a database.
        .target(name: "RichPushMedia", dependencies: ["RichPushCore", "RichPushCharts"]),
        // The thin Apple adapter; every file is inside `#if canImport(UserNotifications)`.
        .target(name: "RichPushNotificationService", dependencies: ["RichPushMedia"]),
        .target(
            name: "RichPushSandbox",
            dependencies: [
                "RichPushCore",
                "RichPushMedia",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "richpush",
            dependencies: [
                "RichPushCore",
                "RichPushCharts",
                "RichPushMedia",
                "RichPushSandbox",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "richpush-bench",
            dependencies: [
                "RichPushCore",
                "RichPushCharts",
                "RichPushMedia",
                "RichPushSandbox",
                "RichPushTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Sample media built from the formats' specifications, for tests and benchmarks only.
        .target(name: "RichPushTestSupport"),
        .testTarget(name: "RichPushCoreTests", dependencies: ["RichPushCore", "RichPushTestSupport"]),
        .testTarget(name: "RichPushChartsTests", dependencies: ["RichPushCharts", "RichPushCore"]),
        .testTarget(name: "RichPushMediaTests", dependencies: ["RichPushMedia", "RichPushSandbox", "RichPushCore", "RichPushTestSupport"]),
        .testTarget(name: "richpushTests", dependencies: ["richpush", "RichPushCore", "RichPushSandbox", "RichPushTestSupport"]),
    ]
)
