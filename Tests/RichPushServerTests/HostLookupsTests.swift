import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import RichPushServer

/// The shared resolver's bounds, with lookups that block as each test chooses: a zone whose DNS never answers
/// stalls only its own names, nobody waits past the deadline, a name is looked up once however many ask, and
/// answers are kept.
@Suite struct HostLookupsTests {
    /// A lookup per name: those in `stalled` block until `release()`; the others answer 192.0.2.1 at once.
    final class Names: Sendable {
        let stalled: Set<String>
        private let gate = NIOLockedValueBox(false)
        private let counts = NIOLockedValueBox<[String: Int]>([:])
        init(stalled: Set<String> = []) { self.stalled = stalled }

        func lookup(_ host: String) -> Result<[IPAddress], FetchFailure> {
            counts.withLockedValue { $0[host, default: 0] += 1 }
            if stalled.contains(host) {
                while !gate.withLockedValue({ $0 }) { usleep(10_000) }
            }
            return host.hasPrefix("missing") ? .failure(.dns(host: host)) : .success([.v4(0xC000_0201)])
        }
        func release() { gate.withLockedValue { $0 = true } }
        func count(_ host: String) -> Int { counts.withLockedValue { $0[host, default: 0] } }
    }

    /// Runs `body` with a resolver over `names`, then lets every stalled lookup end and stops the resolver's threads.
    static func using(
        _ names: Names,
        wait: TimeAmount = .seconds(5),
        threads: Int = 4,
        pending: Int? = nil,
        _ body: (HostLookups) async throws -> Void
    ) async throws {
        var limits = HostLookups.Limits()
        limits.threads = threads
        limits.wait = wait
        if let pending { limits.pending = pending }
        let lookups = HostLookups(limits: limits) { names.lookup($0) }
        do {
            try await body(lookups)
        } catch {
            names.release()
            try await lookups.shutdown()
            throw error
        }
        names.release()
        try await lookups.shutdown()
    }

    @Test func aStalledZoneHoldsTwoThreadsAndNobodyElseWaits() async throws {
        // Six names of one zone that never answer, on four threads: two run, four wait their zone's turn.
        let slow = (1...6).map { "h\($0).slow.example" }
        let names = Names(stalled: Set(slow))
        try await Self.using(names, wait: .seconds(30)) { lookups in
            let stuck = Task {
                await withTaskGroup(of: Void.self) { group in
                    for name in slow { group.addTask { _ = try? await lookups.resolve(name) } }
                }
            }
            defer { stuck.cancel() }
            while lookups.running < 2 { try await Task.sleep(for: .milliseconds(10)) }
            // Another zone's names answer, several at a time, while the stalled zone still stalls (a caller waits
            // 30 s here, so an answer at all is one that did not wait for the stalled zone; no clock is read, so a
            // busy machine cannot fail this).
            try await withThrowingTaskGroup(of: [IPAddress].self) { group in
                for i in 1...8 { group.addTask { try await lookups.resolve("push\(i).fast.example") } }
                for try await answer in group { #expect(answer == [.v4(0xC000_0201)]) }
            }
            #expect(lookups.running == 2, "the stalled zone runs two lookups, not six")
            #expect(slow.map(names.count).reduce(0, +) == 2)
        }
    }

    @Test func nobodyWaitsPastTheDeadlineAndTheLateAnswerIsKept() async throws {
        let names = Names(stalled: ["late.example.org"])
        try await Self.using(names, wait: .milliseconds(300)) { lookups in
            // The lookup answers only once released, after this: the failure is the deadline's.
            let started = ContinuousClock.now
            do {
                _ = try await lookups.resolve("late.example.org")
                Issue.record("a stalled lookup answered")
            } catch let failure as FetchFailure {
                #expect(failure.rule == "dns-failed")
                #expect(failure.description == "late.example.org did not resolve within 0.3 s", "\(failure)")
            }
            #expect(ContinuousClock.now - started >= .milliseconds(300))
            names.release()
            // The lookup went on; its answer is kept and given without a second lookup.
            var answer: [IPAddress] = []
            while answer.isEmpty {
                answer = (try? await lookups.resolve("late.example.org")) ?? []
            }
            #expect(answer == [.v4(0xC000_0201)])
            #expect(names.count("late.example.org") == 1)
        }
    }

    @Test func oneLookupPerNameHoweverManyAskAndAnswersAreKept() async throws {
        let names = Names(stalled: ["busy.example.net"])
        try await Self.using(names) { lookups in
            let asking = Task {
                try await withThrowingTaskGroup(of: [IPAddress].self) { group in
                    for _ in 0..<50 { group.addTask { try await lookups.resolve("BUSY.example.net") } }
                    var answers = 0
                    for try await a in group where a == [.v4(0xC000_0201)] { answers += 1 }
                    return answers
                }
            }
            while lookups.running < 1 { try await Task.sleep(for: .milliseconds(10)) }
            try await Task.sleep(for: .milliseconds(100))
            names.release()
            #expect(try await asking.value == 50)
            #expect(names.count("busy.example.net") == 1)
            // Kept: asked again, nothing is looked up. A failure is kept too (for less long).
            _ = try await lookups.resolve("busy.example.net")
            #expect(names.count("busy.example.net") == 1)
            for _ in 0..<3 { _ = try? await lookups.resolve("missing.example.net") }
            #expect(names.count("missing.example.net") == 1)
        }
    }

    @Test func beyondThePendingBoundANewNameFailsAtOnce() async throws {
        let slow = (1...3).map { "n\($0).zone\($0).example" }
        let names = Names(stalled: Set(slow))
        try await Self.using(names, wait: .seconds(30), threads: 2, pending: 3) { lookups in
            let stuck = Task {
                await withTaskGroup(of: Void.self) { group in
                    for name in slow { group.addTask { _ = try? await lookups.resolve(name) } }
                }
            }
            defer { stuck.cancel() }
            while lookups.running < 3 { try await Task.sleep(for: .milliseconds(10)) }
            // Refused at once: a caller waits 30 s here, so a failure that is not the deadline's is the bound's.
            do {
                _ = try await lookups.resolve("fourth.example")
                Issue.record("a name past the pending bound was looked up")
            } catch let failure as FetchFailure {
                #expect(failure == .dns(host: "fourth.example"), "\(failure)")
            }
        }
    }

    @Test func zonesAreTheRegistrablePartRoughly() {
        #expect(HostLookups.zone(of: "a.b.push.example.com") == "example.com")
        #expect(HostLookups.zone(of: "cdn.example.co.uk") == "example.co.uk")
        #expect(HostLookups.zone(of: "example.com") == "example.com")
        #expect(HostLookups.zone(of: "localhost") == "localhost")
        #expect(HostLookups.zone(of: "Push.Example.COM.") == "example.com")
    }
}
