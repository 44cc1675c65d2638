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
        .library(name: "RichPushApp", targets: ["RichPushApp"]),
        .library(name: "RichPushSandbox", targets: ["RichPushSandbox"]),
        .library(name: "RichPushAPNs", targets: ["RichPushAPNs"]),
        .library(name: "RichPushFCM", targets: ["RichPushFCM"]),
        .library(name: "RichPushWebPush", targets: ["RichPushWebPush"]),
        .library(name: "RichPushServer", targets: ["RichPushServer"]),
        .executable(name: "richpush", targets: ["richpush"]),
        .executable(name: "richpush-bench", targets: ["richpush-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // Foundation only: must keep building for iOS extensions.
        .target(name: "RichPushCore"),
        .target(name: "RichPushCharts", dependencies: ["RichPushCore"]),
        // The service extension's pipeline: Foundation and URLSession only, never NIO or a database.
        .target(name: "RichPushMedia", dependencies: ["RichPushCore", "RichPushCharts"]),
        // The thin Apple adapter. On Apple platforms it builds against UserNotifications; on Linux against a
        // stand-in with Apple's documented API, so that CI compiles and tests it in Swift 6 mode.
        .target(
            name: "RichPushNotificationService",
            dependencies: [
                "RichPushMedia", .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
            ]
        ),
        // The app's side: permission, the device's registration, opens; Foundation and UserNotifications only.
        .target(
            name: "RichPushApp",
            dependencies: [.target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux]))]
        ),
        // Test-only: never linked on Apple platforms (its sources are empty where UserNotifications exists).
        .target(name: "UserNotificationsStandIn"),
        // The examples in Examples/ compile as part of every build.
        .target(
            name: "RichPushExamples",
            dependencies: [
                "RichPushMedia", "RichPushNotificationService",
                .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
            ],
            path: "Examples/NotificationServiceExtension"
        ),
        .target(
            name: "RichPushAppExample",
            dependencies: [
                "RichPushApp", .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
            ],
            path: "Examples/App"
        ),
        // The app backend's side of identity proofs: swift-crypto only.
        .target(
            name: "RichPushBackendExample",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            path: "Examples/Backend"
        ),
        // What both provider clients share: HTTP/2 connections, the retry classification, JWT helpers.
        .target(
            name: "RichPushTransport",
            dependencies: [
                "RichPushCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "RichPushAPNs",
            dependencies: ["RichPushCore", "RichPushTransport", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "RichPushFCM",
            dependencies: ["RichPushCore", "RichPushTransport", .product(name: "Logging", package: "swift-log")]
        ),
        // Web Push (RFC 8030): message encryption (RFC 8291 over RFC 8188) and VAPID (RFC 8292).
        .target(
            name: "RichPushWebPush",
            dependencies: [
                "RichPushCore", "RichPushTransport", .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The service: HTTP API, storage (SQLite, or PostgreSQL for several nodes), queue and workers.
        .target(
            name: "RichPushServer",
            dependencies: [
                "RichPushCore",
                "RichPushTransport",
                "RichPushAPNs",
                "RichPushFCM",
                "RichPushCharts",
                "RichPushMedia",
                "RichPushSandbox",
                "RichPushWebPush",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            resources: [.copy("Resources/openapi.yaml"), .copy("Resources/console"), .copy("Resources/sdk")]
        ),
        .target(
            name: "RichPushSandbox",
            dependencies: [
                "RichPushCore",
                "RichPushMedia",
                "RichPushTransport",
                "RichPushWebPush",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "richpush",
            dependencies: [
                "RichPushCore",
                "RichPushCharts",
                "RichPushMedia",
                "RichPushSandbox",
                "RichPushAPNs",
                "RichPushFCM",
                "RichPushTransport",
                "RichPushServer",
                "RichPushWebPush",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
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
                "RichPushAPNs",
                "RichPushFCM",
                "RichPushServer",
                "RichPushWebPush",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // Sample media built from the formats' specifications, for tests and benchmarks only.
        .target(
            name: "RichPushTestSupport",
            dependencies: [
                "RichPushCore", "RichPushMedia", "RichPushServer", "RichPushSandbox", "RichPushAPNs", "RichPushFCM",
                "RichPushCharts",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(name: "RichPushCoreTests", dependencies: ["RichPushCore", "RichPushTestSupport"]),
        .testTarget(
            name: "RichPushChartsTests",
            dependencies: ["RichPushCharts", "RichPushCore", "RichPushTestSupport"]
        ),
        .testTarget(
            name: "RichPushMediaTests",
            dependencies: ["RichPushMedia", "RichPushSandbox", "RichPushCore", "RichPushTestSupport"]
        ),
        .testTarget(
            name: "RichPushProvidersTests",
            dependencies: [
                "RichPushTestSupport", "RichPushAPNs", "RichPushFCM", "RichPushSandbox", "RichPushCore",
                "RichPushTransport", "RichPushWebPush", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
        .testTarget(
            name: "RichPushAppTests",
            dependencies: [
                "RichPushApp", .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "RichPushServerTests",
            dependencies: [
                "RichPushServer", "RichPushMedia", "RichPushTestSupport", "RichPushCore", "RichPushTransport",
                "RichPushAPNs", "RichPushFCM", "RichPushSandbox", "RichPushApp", "RichPushBackendExample",
                .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "RichPushNotificationServiceTests",
            dependencies: [
                "RichPushNotificationService", "RichPushMedia", "RichPushCore", "RichPushSandbox",
                "RichPushTestSupport",
                .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
            ]
        ),
        .testTarget(
            name: "richpushTests",
            dependencies: [
                "richpush", "RichPushCore", "RichPushSandbox", "RichPushTestSupport", "RichPushWebPush",
                "RichPushTransport", "RichPushApp", "RichPushMedia", "RichPushServer",
                .target(name: "UserNotificationsStandIn", condition: .when(platforms: [.linux])),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ]
)
