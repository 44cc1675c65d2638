import Foundation
import Testing

@testable import RichPushServer

/// The worker's wake-up: a signal ends a wait at once (or the next one, if nobody waits), a wait ends by its
/// limit without one, and the timer armed for one wait serves the next ones whose limits are later.
@Suite struct WakeSignalTests {
    func seconds(_ body: () async -> Void) async -> Double {
        let start = ContinuousClock.now
        await body()
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    @Test func aSignalEndsTheWaitAndAKeptOneTheNext() async {
        let signal = WakeSignal()
        signal.signal()
        // Kept for the next wait: it returns without waiting out its limit.
        #expect(await seconds { await signal.wait(upTo: 30) } < 10)
        // A signal given while the wait runs ends it (given before it starts, it is kept, and ends it as well).
        let waiting = Task { await seconds { await signal.wait(upTo: 30) } }
        try? await Task.sleep(nanoseconds: 50_000_000)
        signal.signal()
        #expect(await waiting.value < 10)
    }

    @Test func aWaitEndsByItsLimitAndArmedTimersAreShared() async {
        let signal = WakeSignal()
        // Without a signal the wait ends by its limit, never before it.
        let one = await seconds { await signal.wait(upTo: 0.05) }
        #expect(one >= 0.045)
        // Many waits in a row, each woken by a signal, each with a later limit than the last: one armed timer serves
        // them all, and a wait left alone after them still ends by the timer.
        for _ in 0..<1_000 {
            signal.signal()
            await signal.wait(upTo: 0.2)
        }
        // What is checked is that it ends: a wait left without a timer would never end. How soon measures the
        // machine too (the timer resumes the wait on the task pool, which a loaded fresh clone's suite kept busy:
        // 6.0 s for a 0.2 s limit), so the bound is 30 s.
        let last = await seconds { await signal.wait(upTo: 0.2) }
        #expect(last <= 0.2 + 30, "\(last) s")
        // A shorter limit than the armed timer's gets a timer of its own.
        let short = await seconds { await signal.wait(upTo: 0.01) }
        #expect(short >= 0.009)
        #expect(short < 0.2 + 30, "\(short) s")
    }

    @Test func cancellationEndsAWaitThatAllowsIt() async {
        let signal = WakeSignal()
        let waiting = Task { await seconds { await signal.waitUnlessCancelled(upTo: 30) } }
        try? await Task.sleep(nanoseconds: 50_000_000)
        waiting.cancel()
        #expect(await waiting.value < 10)
        // Cancelled before it starts, it returns at once.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await seconds { await signal.waitUnlessCancelled(upTo: 30) }
        }
        #expect(await early.value < 10)
    }
}
