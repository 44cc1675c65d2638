import ArgumentParser

@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "richpush-bench",
        abstract: "RichPush benchmarks. Run them in a release build: swift run -c release richpush-bench …",
        subcommands: [
            ChartBench.self, DeviceBench.self, APNsBench.self, FCMBench.self, SendBench.self, FanOutBench.self,
            FanOutProbe.self, SeedDevices.self, SandboxServer.self, ChartMemoryProbe.self, ChartProfile.self,
            DeviceMemoryProbe.self, ServeMedia.self, WebPushEncryptBench.self, WebPushSendBench.self,
            LiveUpdatesBench.self, UpdatesBench.self,
        ]
    )
}
