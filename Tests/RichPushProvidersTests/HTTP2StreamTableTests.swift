import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing

@testable import RichPushTransport

/// The table of a connection's streams, on its own: ids, answers, windows given back, resets, and what a request
/// that ends with the connection learns of GOAWAY.
@Suite struct HTTP2StreamTableTests {
    struct Setup {
        let channel = EmbeddedChannel()
        let state = NIOLockedValueBox(HTTP2ConnectionState())
        let table: HTTP2StreamTable

        init(resets: ResetBudget = ResetBudget()) throws {
            table = HTTP2StreamTable(connectionState: state, resets: resets)
            try channel.pipeline.syncOperations.addHandler(table)
            _ = state.withLockedValue { $0.settingsReceived(maxConcurrentStreams: 100) }
        }

        /// A request as the connection sends one: admitted (counted in flight), then opened in the table.
        func send(timeout: TimeAmount = .seconds(30)) -> EventLoopFuture<H2Response> {
            let promise = channel.eventLoop.makePromise(of: H2Response.self)
            switch state.withLockedValue({ $0.admit() }) {
            case .success(.send): break
            case .success(.goingAway(let reason)):
                promise.fail(TransportError.goingAway(reason: reason, processed: false))
                return promise.futureResult
            default:
                promise.fail(TransportError.connectionClosed)
                return promise.futureResult
            }
            var headers = HPACKHeaders()
            headers.add(name: ":method", value: "POST")
            table.open(
                headers: headers,
                body: ByteBuffer(string: "{}"),
                timeout: timeout,
                promise: promise
            )
            return promise.futureResult
        }

        /// The frames written since the last look.
        func written() throws -> [HTTP2Frame] {
            var frames: [HTTP2Frame] = []
            while let f = try channel.readOutbound(as: HTTP2Frame.self) { frames.append(f) }
            return frames
        }

        func answer(_ id: Int, status: String = "200", data: ByteBuffer? = nil, end: Bool = true) throws {
            var h = HPACKHeaders()
            h.add(name: ":status", value: status)
            try channel.writeInbound(
                HTTP2Frame(
                    streamID: HTTP2StreamID(id),
                    payload: .headers(.init(headers: h, endStream: data == nil && end))
                )
            )
            if let data {
                try channel.writeInbound(
                    HTTP2Frame(
                        streamID: HTTP2StreamID(id),
                        payload: .data(.init(data: .byteBuffer(data), endStream: end))
                    )
                )
            }
        }
    }

    @Test func requestsTakeOddIdsInOrderAndEachGetsItsOwnAnswer() throws {
        let s = try Setup()
        let a = s.send()
        let b = s.send()
        let frames = try s.written()
        #expect(frames.map { Int($0.streamID) } == [1, 1, 3, 3])  // HEADERS and DATA of each
        try s.answer(3, status: "410", data: ByteBuffer(string: #"{"reason":"Unregistered"}"#))
        try s.answer(1)
        #expect(try a.wait().status == 200)
        let second = try b.wait()
        #expect(second.status == 410 && second.body.map { String(buffer: $0) } == #"{"reason":"Unregistered"}"#)
    }

    /// Windows are given back on the HTTP/2 handler's window events: the connection's once half is spent, on any
    /// stream; a stream's while its answer is read. An answer past the 64 KB bound is abandoned, its stream reset.
    @Test func windowsAreGivenBackOnTheHandlersCountAndAnAnswerPastTheBoundResetsItsStream() throws {
        let s = try Setup()
        let big = s.send()
        _ = try s.written()
        try s.answer(1, data: ByteBuffer(repeating: 0x61, count: 40_000), end: false)
        // The handler's count after those 40,000 bytes: both windows at 25,535.
        for id in [HTTP2StreamID.rootStream, 1] {
            s.channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: id, inboundWindowSize: 25_535, outboundWindowSize: 65_535)
            )
        }
        // Above half: nothing to give back.
        s.channel.pipeline.fireUserInboundEventTriggered(
            NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 40_000, outboundWindowSize: 65_535)
        )
        #expect(try Self.updates(s) == [0: 40_000, 1: 40_000])
        // 30,000 more passes the 64 KB bound: abandoned, its stream reset; its window is no longer given back, the
        // connection's still is.
        try s.channel.writeInbound(
            HTTP2Frame(
                streamID: 1,
                payload: .data(.init(data: .byteBuffer(ByteBuffer(repeating: 0x61, count: 30_000))))
            )
        )
        #expect(throws: TransportError.responseTooLarge(limit: HTTP2ClientConnection.maxResponseBytes)) {
            try big.wait()
        }
        #expect(
            try s.written().contains { f in if case .rstStream(.cancel) = f.payload { f.streamID == 1 } else { false } }
        )
        for id in [HTTP2StreamID.rootStream, 1] {
            s.channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: id, inboundWindowSize: 1_000, outboundWindowSize: 65_535)
            )
        }
        #expect(try Self.updates(s) == [0: 64_535])
    }

    /// The WINDOW_UPDATE frames written since the last look: their increments by stream.
    static func updates(_ s: Setup) throws -> [Int: Int] {
        var byStream: [Int: Int] = [:]
        for f in try s.written() {
            if case .windowUpdate(let n) = f.payload { byStream[Int(f.streamID), default: 0] += n }
        }
        return byStream
    }

    /// A real HTTP/2 handler under the table, a real one at the server: a body the server sent before it heard of a
    /// reset arrives after it, and the handler charges the connection's window for it and drops it. The window is
    /// given back all the same (counted from the DATA that reached the table, it was not: a service that answered a
    /// reset stream with a body wedged the connection for good).
    @Test func aBodyAfterAResetStillGivesTheConnectionsWindowBack() throws {
        let state = NIOLockedValueBox(HTTP2ConnectionState())
        let client = EmbeddedChannel()
        let table = HTTP2StreamTable(connectionState: state)
        try client.pipeline.syncOperations.addHandlers([
            NIOHTTP2Handler(mode: .client, connectionConfiguration: HTTP2ClientConnection.clientConfiguration),
            table,
        ])
        let server = EmbeddedChannel()
        try server.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server))
        try client.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try server.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        /// Moves what each side wrote to the other until neither writes more; the frames the server read.
        func shuttle() throws -> [HTTP2Frame] {
            var read: [HTTP2Frame] = []
            var moved = true
            while moved {
                moved = false
                while let b = try client.readOutbound(as: ByteBuffer.self) {
                    try server.writeInbound(b)
                    moved = true
                }
                while let f = try server.readInbound(as: HTTP2Frame.self) { read.append(f) }
                while let b = try server.readOutbound(as: ByteBuffer.self) {
                    try client.writeInbound(b)
                    moved = true
                }
            }
            return read
        }
        _ = try shuttle()
        _ = state.withLockedValue { $0.settingsReceived(maxConcurrentStreams: 100) }
        _ = state.withLockedValue { $0.admit() }
        let promise = client.eventLoop.makePromise(of: H2Response.self)
        var headers = HPACKHeaders()
        for (n, v) in [(":method", "POST"), (":scheme", "https"), (":path", "/"), (":authority", "x")] {
            headers.add(name: n, value: v)
        }
        client.eventLoop.execute { table.open(headers: headers, body: nil, timeout: .seconds(30), promise: promise) }
        client.embeddedEventLoop.run()
        #expect(try shuttle().contains { if case .headers = $0.payload { $0.streamID == 1 } else { false } })
        // The answer's head is malformed (the client resets the stream), and 60,000 bytes of body follow it, sent
        // before the server hears of the reset.
        var status = HPACKHeaders()
        status.add(name: ":status", value: "abc")
        server.write(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: status))), promise: nil)
        for _ in 0..<4 {
            let data = ByteBuffer(repeating: 0x61, count: 15_000)
            server.write(HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(data)))), promise: nil)
        }
        server.flush()
        let heard = try shuttle()
        #expect(throws: TransportError.malformedResponse(":status abc")) { try promise.futureResult.wait() }
        #expect(heard.contains { if case .rstStream = $0.payload { $0.streamID == 1 } else { false } })
        let given = heard.reduce(0) { sum, f in
            if case .windowUpdate(let n) = f.payload, f.streamID == .rootStream { sum + n } else { sum }
        }
        // What the server may still send: more than half the window (it is given back once half is spent).
        #expect(65_535 - 60_000 + given > 65_535 / 2, "the connection's window given back: \(given) of 60,000 charged")
        #expect(state.withLockedValue { $0.inFlight } == 0)
    }

    /// A request that times out fails at once; its stream stays in the table, counted in flight, for its answer:
    /// one that comes within the grace ends it with no reset, and one that does not come has the stream reset then.
    @Test func aTimedOutRequestsStreamWaitsForItsAnswerThenIsReset() throws {
        let s = try Setup()
        let answeredLate = s.send(timeout: .milliseconds(100))
        let neverAnswered = s.send(timeout: .milliseconds(100))
        _ = try s.written()
        s.channel.embeddedEventLoop.advanceTime(by: .milliseconds(150))
        #expect(throws: TransportError.timedOut) { try answeredLate.wait() }
        #expect(throws: TransportError.timedOut) { try neverAnswered.wait() }
        // No reset yet: both streams wait, still in flight.
        #expect(try s.written().isEmpty)
        #expect(s.table.count == 2 && s.state.withLockedValue { $0.inFlight } == 2)
        // The late answer, HEADERS then DATA: the stream leaves at its end.
        try s.answer(1, data: ByteBuffer(string: "{}"), end: true)
        #expect(s.table.count == 1 && s.state.withLockedValue { $0.inFlight } == 1)
        s.channel.embeddedEventLoop.advanceTime(by: HTTP2StreamTable.lateAnswerGrace)
        let resets = try s.written().filter { f in if case .rstStream(.cancel) = f.payload { true } else { false } }
        #expect(resets.map { Int($0.streamID) } == [3])
        #expect(s.table.count == 0 && s.state.withLockedValue { $0.inFlight } == 0)
        try s.answer(3)  // after the reset: dropped
    }

    /// Every request admitted gives its place back once, however it ends: answered, refused by a closed table.
    @Test func eachRequestGivesItsPlaceBackOnce() throws {
        let s = try Setup()
        let answered = s.send()
        _ = try s.written()
        #expect(s.state.withLockedValue { $0.inFlight } == 1)
        try s.answer(1)
        #expect(try answered.wait().status == 200)
        #expect(s.state.withLockedValue { $0.inFlight } == 0)
        s.channel.pipeline.fireChannelInactive()
        #expect(throws: TransportError.notSent) { try s.send().wait() }
        #expect(s.state.withLockedValue { $0.inFlight } == 0)
    }

    @Test func closedStreamsAndTheConnectionsEndSayWhetherTheServerProcessedTheRequest() throws {
        let s = try Setup()
        let refused = s.send()
        let reset = s.send()
        let processed = s.send()
        let notProcessed = s.send()
        _ = try s.written()
        s.channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: 1, reason: .refusedStream))
        try s.channel.writeInbound(HTTP2Frame(streamID: 3, payload: .rstStream(.internalError)))
        #expect(throws: TransportError.streamRefused) { try refused.wait() }
        #expect(throws: TransportError.streamReset(code: 2)) { try reset.wait() }
        // GOAWAY with stream 5 the last processed, then the connection ends.
        s.state.withLockedValue { $0.goAwayReceived(lastStreamID: 5, reason: "Shutdown") }
        s.channel.pipeline.fireChannelInactive()
        #expect(throws: TransportError.goingAway(reason: "Shutdown", processed: true)) { try processed.wait() }
        #expect(throws: TransportError.goingAway(reason: "Shutdown", processed: false)) { try notProcessed.wait() }
        // Nothing is sent on a table whose connection ended.
        #expect(throws: TransportError.goingAway(reason: "Shutdown", processed: false)) { try s.send().wait() }
    }

    /// A path that names one device is sent without entering the connection's HPACK table; the rest of the
    /// request's headers (the provider token, the topic: the same on every request) may enter it.
    @Test func aDevicesPathIsNotIndexed() {
        let request = H2Request(
            path: "/3/device/abc",
            headers: [("apns-topic", "com.example.app")],
            body: nil,
            indexesPath: false
        )
        let headers = HTTP2ClientConnection.headers(of: request, authority: "api.push.apple.com")
        let indexing = Dictionary(uniqueKeysWithValues: headers.map { ($0.name, $0.indexable) })
        #expect(indexing[":path"] == .nonIndexable)
        #expect(indexing["apns-topic"] == .indexable && indexing[":authority"] == .indexable)
        #expect(headers.map(\.name) == [":method", ":scheme", ":path", ":authority", "apns-topic"])
        let shared = HTTP2ClientConnection.headers(
            of: H2Request(path: "/v1/projects/p/messages:send", headers: [], body: nil),
            authority: "x"
        )
        #expect(shared.first { $0.name == ":path" }?.indexable == .indexable)
    }

    /// A few informational answers before the final one are read past; a stream of them without end is abandoned
    /// and reset.
    @Test func informationalAnswersAreBounded() throws {
        let s = try Setup()
        let some = s.send()
        let endless = s.send()
        _ = try s.written()
        for id in [1, 3] {
            for _ in 0..<(id == 1 ? 3 : 9) { try s.answer(id, status: "103", end: false) }
        }
        try s.answer(1)
        #expect(try some.wait().status == 200)
        #expect(throws: TransportError.malformedResponse("more than 8 informational answers")) { try endless.wait() }
        #expect(try s.written().contains { f in if case .rstStream = f.payload { f.streamID == 3 } else { false } })
    }

    /// At most `limit` resets in any window: the next is refused until the oldest of them is a window old.
    @Test func theResetBudgetTakesLimitResetsInAnyWindow() {
        var budget = ResetBudget(limit: 3, window: .seconds(30))
        let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)
        // Seconds after t0, and whether a reset was taken then.
        let taken = [0, 10, 20, 29, 30, 39, 40, 50, 59, 60].map { (at: $0, taken: budget.take(now: t0 + .seconds($0))) }
        // 29 s: three in the window already; 30 s: the one at 0 s has left it; 39 s: the one at 10 s has not yet;
        // 59 s: 30, 40 and 50 are in it.
        #expect(taken.filter(\.taken).map(\.at) == [0, 10, 20, 30, 40, 50, 60])
    }

    /// Streams that time out and are never answered are reset up to the budget; past it they are dropped unreset and
    /// the connection retires: new requests are refused as not sent (another connection takes them), the request
    /// still awaiting its answer gets it, and then the connection closes.
    @Test func pastTheResetBudgetTheConnectionRetiresAndClosesOnceItsAnswersAreIn() throws {
        let s = try Setup(resets: ResetBudget(limit: 2, window: .seconds(30)))
        try s.channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        let stalled = (0..<4).map { _ in s.send(timeout: .milliseconds(100)) }
        let live = s.send(timeout: .seconds(60))  // stream 9
        _ = try s.written()
        s.channel.embeddedEventLoop.advanceTime(by: .milliseconds(150))
        for f in stalled { #expect(throws: TransportError.timedOut) { try f.wait() } }
        s.channel.embeddedEventLoop.advanceTime(by: HTTP2StreamTable.lateAnswerGrace)
        let resets = try s.written().filter { f in if case .rstStream(.cancel) = f.payload { true } else { false } }
        #expect(resets.map { Int($0.streamID) } == [1, 3])
        #expect(s.state.withLockedValue { $0.retiredBecause } == HTTP2StreamTable.resetBudgetSpent)
        #expect(s.table.count == 1 && s.state.withLockedValue { $0.inFlight } == 1)
        #expect(s.channel.isActive)
        #expect(throws: TransportError.goingAway(reason: HTTP2StreamTable.resetBudgetSpent, processed: false)) {
            try s.send().wait()
        }
        try s.answer(7)  // a dropped stream's late answer: nothing
        try s.answer(9)
        #expect(try live.wait().status == 200)
        #expect(!s.channel.isActive)
        #expect(try s.written().isEmpty)
    }

    /// After the server's GOAWAY, the connection closes once the requests it may still answer are in, without
    /// waiting for the server to close it.
    @Test func afterGoAwayTheConnectionClosesOnceItsAnswersAreIn() throws {
        let s = try Setup()
        try s.channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        let live = s.send()
        _ = try s.written()
        s.state.withLockedValue { $0.goAwayReceived(lastStreamID: 1, reason: "Shutdown") }
        try s.channel.writeInbound(
            HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: 1, errorCode: .noError, opaqueData: nil))
        )
        #expect(s.channel.isActive)
        try s.answer(1)
        #expect(try live.wait().status == 200)
        #expect(!s.channel.isActive)
    }

    /// An answer abandoned on the frame that ends its stream (a status no service gives, with END_STREAM) leaves
    /// nothing to reset: no reset is sent and none is counted, so a server cannot make the client retire its
    /// connection with answers alone.
    @Test func anAnswerAbandonedAsItsStreamEndsSpendsNoReset() throws {
        let s = try Setup(resets: ResetBudget(limit: 1, window: .seconds(30)))
        let abandoned = (0..<3).map { _ in s.send() }
        _ = try s.written()
        for id in [1, 3, 5] { try s.answer(id, status: "600") }
        for f in abandoned { #expect(throws: TransportError.malformedResponse(":status 600")) { try f.wait() } }
        #expect(try s.written().isEmpty)
        #expect(s.state.withLockedValue { $0.retiredBecause } == nil)
        let next = s.send()
        _ = try s.written()
        try s.answer(7)
        #expect(try next.wait().status == 200)
    }

    /// A connection whose stream ids are spent takes no more requests and closes once its answers are in, as after
    /// a GOAWAY (the pool no longer closes it).
    @Test func aConnectionWhoseStreamIDsAreSpentClosesOnceItsAnswersAreIn() throws {
        let s = try Setup()
        try s.channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        s.table.nextStreamID = Int(Int32.max)
        let last = s.send()  // stream 2,147,483,647, the last a client may open
        _ = try s.written()
        let refused = s.send()
        #expect(throws: TransportError.goingAway(reason: nil, processed: false)) { try refused.wait() }
        #expect(s.channel.isActive)
        try s.answer(Int(Int32.max))
        #expect(try last.wait().status == 200)
        #expect(!s.channel.isActive)
        #expect(s.state.withLockedValue { $0.inFlight } == 0)
    }
}
