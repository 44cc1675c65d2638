import Foundation
import RichPushTestSupport
import Testing

/// The tests' own process launcher: what a child gets, and how its end is seen.
@Suite struct SpawnTests {
    /// With over a thousand descriptors open here (as in a full test run, where Foundation's launcher crashed
    /// reading /proc/self/fd), the child holds only its three streams.
    @Test func aChildHoldsOnlyItsStreamsWhateverThisProcessHasOpen() async throws {
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<1_200 {
            let fd = open("/dev/null", O_RDONLY)
            try #require(fd >= 0)
            held.append(fd)
        }
        // The shell's own descriptors, listed by its child `ls`.
        let r = try await ChildProcess.run(URL(fileURLWithPath: "/bin/sh"), ["-c", "ls /proc/$$/fd"])
        let listed = r.output.split(separator: "\n").compactMap { Int32($0) }.sorted()
        #expect(listed == [0, 1, 2], "\(r.output)")
        #expect(r.status == 0)
    }

    @Test func theFolderTheEnvironmentTheInputAndTheStatusReachTheChild() async throws {
        let r = try await ChildProcess.run(
            URL(fileURLWithPath: "/bin/sh"),
            ["-c", "pwd; echo \"$GREETING\"; cat; echo problem >&2; exit 7"],
            environment: ["GREETING": "hello"],
            directory: URL(fileURLWithPath: "/usr"),
            stdin: Data("from the test\n".utf8)
        )
        #expect(r.output == "/usr\nhello\nfrom the test\n")
        #expect(r.errors == "problem\n")
        #expect(r.status == 7)
    }

    @Test func aSignalledChildReadsAsSignalledAndIgnoresNothingThisProcessIgnores() async throws {
        let p = Spawn()
        p.executableURL = URL(fileURLWithPath: "/bin/sleep")
        p.arguments = ["30"]
        p.standardOutput = .null
        try p.run()
        #expect(p.isRunning)
        p.terminate()
        await p.exited()
        #expect(!p.isRunning)
        #expect(p.terminationReason == .uncaughtSignal && p.terminationStatus == SIGTERM)

        // This process ignores SIGPIPE (a server library asks for that); the child has the default again.
        signal(SIGPIPE, SIG_IGN)
        let q = Spawn()
        q.executableURL = URL(fileURLWithPath: "/bin/sh")
        q.arguments = ["-c", "kill -PIPE $$; exit 0"]
        try q.run()
        await q.exited()
        #expect(q.terminationReason == .uncaughtSignal && q.terminationStatus == SIGPIPE)
    }

    /// Several threads asking at once whether it runs, and waiting for it, all see the same end.
    @Test func everyWaiterSeesTheOneEnd() async throws {
        let p = Spawn()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "sleep 0.3; exit 5"]
        try p.run()
        let box = UncheckedBox(p)
        let statuses = await withTaskGroup(of: Int32.self) { group in
            for i in 0..<8 {
                group.addTask {
                    await offThePool {
                        if i % 2 == 0 {
                            while box.value.isRunning { usleep(1_000) }
                        } else {
                            box.value.waitUntilExit()
                        }
                        return box.value.terminationStatus
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 5, count: 8))
    }

    @Test func aMissingExecutableIsNamed() throws {
        let p = Spawn()
        p.executableURL = URL(fileURLWithPath: "/nonexistent/tool")
        #expect { try p.run() } throws: { "\($0)".contains("/nonexistent/tool") }
    }
}
