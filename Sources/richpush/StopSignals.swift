import Foundation

/// SIGINT and SIGTERM as a stream, in place of their default (ending the process at once): a command stops
/// cleanly on them instead. `cancel()` stops listening (the signals stay ignored).
final class StopSignals {
    let stream: AsyncStream<Int32>
    private let sources: [DispatchSourceSignal]

    init() {
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        self.stream = stream
        sources = [SIGINT, SIGTERM].map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { continuation.yield(sig) }
            source.resume()
            return source
        }
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}
