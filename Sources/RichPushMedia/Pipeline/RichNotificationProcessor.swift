import Foundation
import RichPushCharts
import RichPushCore

/// Turns a received payload into the notification to show: fetches every provider's media in parallel
/// within a deadline, stages files Apple will attach, draws the payload's chart, applies text overrides, and
/// always delivers a best attempt exactly once.
///
/// ```swift
/// let processor = RichNotificationProcessor()
/// let session = processor.start(payload: userInfo, text: original, deadline: .now + 25) { enriched in
///     contentHandler(makeContent(enriched))          // called exactly once
/// }
/// // from serviceExtensionTimeWillExpire(): session.expire()
/// ```
public struct RichNotificationProcessor: Sendable {
    public struct Configuration: Sendable {
        public var fetch: FetchPolicy
        /// Seconds kept back from Apple's ~30 s so that staging and the hand-over finish in time.
        public var safetyMargin: TimeInterval
        /// The folder attachments are staged under (each notification gets a folder of its own in it).
        public var stagingBase: URL
        /// Stage straight into this folder instead (the simulator's `--out`).
        public var stagingDirectory: URL?
        /// At most this many attachments per notification.
        public var maxAttachments: Int
        /// Draw the payload's chart as an image attachment.
        public var rendersCharts: Bool
        /// Post the delivery report to the payload's receipt address before handing the content over.
        public var receipts = ReceiptPolicy()

        public init(
            fetch: FetchPolicy = FetchPolicy(),
            safetyMargin: TimeInterval = 5,
            stagingBase: URL = FileManager.default.temporaryDirectory,
            maxAttachments: Int = 8,
            rendersCharts: Bool = true
        ) {
            self.fetch = fetch
            self.safetyMargin = safetyMargin
            self.stagingBase = stagingBase
            self.maxAttachments = maxAttachments
            self.rendersCharts = rendersCharts
        }
    }

    /// Apple's budget for a service extension.
    public static let systemBudget: TimeInterval = 30

    public var configuration: Configuration

    public init(configuration: Configuration = Configuration()) { self.configuration = configuration }

    /// The default deadline for a notification received now.
    public func defaultDeadline(from start: Date = Date()) -> Date {
        start.addingTimeInterval(Self.systemBudget - configuration.safetyMargin)
    }

    /// Asked for each staged file before it counts as attached: the Apple adapter creates the system's attachment
    /// here, so that a file the system refuses is reported as skipped (with the system's reason) in the receipt
    /// and the report, instead of being listed as attached and then dropped. `nil` accepts the file.
    public typealias Admission = @Sendable (StagedAttachment) -> SkipReason?

    /// Starts processing; `deliver` is called exactly once, when everything is done, at the deadline, or on
    /// ``ProcessingSession/expire()``, whichever comes first.
    public func start(
        payload: JSONValue,
        text: NotificationText,
        deadline: Date? = nil,
        admit: Admission? = nil,
        deliver: @escaping @Sendable (EnrichedNotification) -> Void
    ) -> ProcessingSession {
        let session = ProcessingSession(
            configuration: configuration,
            payload: payload,
            text: text,
            deadline: deadline ?? defaultDeadline(),
            admit: admit,
            deliver: deliver
        )
        session.begin()
        return session
    }

    /// Processes and waits for the result (the simulator and tests use this).
    public func process(
        payload: JSONValue,
        text: NotificationText? = nil,
        deadline: Date? = nil
    ) async -> EnrichedNotification {
        let original = text ?? NotificationText(aps: payload)
        let box = ResultBox()
        return await withCheckedContinuation { continuation in
            box.continuation = continuation
            _ = start(payload: payload, text: original, deadline: deadline) { box.resume($0) }
        }
    }
}

private final class ResultBox: @unchecked Sendable {
    // Set once before the session starts; resumed once (the gate guarantees a single call).
    var continuation: CheckedContinuation<EnrichedNotification, Never>?
    func resume(_ n: EnrichedNotification) { continuation?.resume(returning: n) }
}

/// One notification being processed.
public final class ProcessingSession: Sendable {
    let configuration: RichNotificationProcessor.Configuration
    let payload: JSONValue
    let text: NotificationText
    let deadline: Date
    let started = Date()
    let gate: DeliveryGate
    let content: ReceivedRichContent
    let admit: RichNotificationProcessor.Admission?
    private let work = TaskHolder()

    init(
        configuration: RichNotificationProcessor.Configuration,
        payload: JSONValue,
        text: NotificationText,
        deadline: Date,
        admit: RichNotificationProcessor.Admission? = nil,
        deliver: @escaping @Sendable (EnrichedNotification) -> Void
    ) {
        self.configuration = configuration
        self.payload = payload
        self.text = text
        self.deadline = deadline
        self.admit = admit
        gate = DeliveryGate(handler: deliver)
        content = ReceivedPayloadDecoder.decode(payload)
    }

    /// Delivers what is staged now and cancels the rest: for `serviceExtensionTimeWillExpire()`.
    public func expire() {
        // Deliver first: cancelling first would let the unwinding pipeline deliver its own, later answer.
        finish(deadlineHit: true)
        work.cancel()
    }

    /// True once the content has been handed over.
    public var isDelivered: Bool { gate.isDelivered }

    /// How many attachments are staged so far.
    public var stagedCount: Int { gate.snapshot.attached.count }

    func milliseconds() -> Int { Int(Date().timeIntervalSince(started) * 1000) }

    func begin() {
        let task = Task { [self] in
            await run()
        }
        work.set(task)
        // The hand-over at the deadline does not wait for the pipeline's task to be run: a busy task pool would
        // hold it (see PipelineClock). The watcher in `run()` still cancels the work when it gets its turn.
        let wait = min(max(deadline.timeIntervalSinceNow, 0), 86_400)
        PipelineClock.queue.asyncAfter(deadline: .now() + wait) { [weak self] in self?.finish(deadlineHit: true) }
    }

    private func run() async {
        let media = content.media
        let limit = configuration.maxAttachments
        let staging: StagingDirectory
        do {
            if let exact = configuration.stagingDirectory {
                try FileManager.default.createDirectory(at: exact, withIntermediateDirectories: true)
                staging = StagingDirectory(root: exact)
            } else {
                staging = try StagingDirectory.create(under: configuration.stagingBase)
            }
        } catch {
            for (i, m) in media.enumerated() {
                gate.record(SkippedMedia(url: m.url, reason: .stagingFailed("\(error)")), at: i)
            }
            finish(deadlineHit: false)
            return
        }
        for (i, m) in media.enumerated() where i >= limit {
            gate.record(SkippedMedia(url: m.url, reason: .limitReached(limit)), at: i)
        }
        let downloader = MediaDownloader(policy: configuration.fetch)
        defer { downloader.invalidate() }

        let deadlineHit = await withTaskGroup(of: Bool.self) { group -> Bool in
            // The deadline watcher: when it wins, everything else is cancelled.
            group.addTask { [deadline] in
                // Held to a day: the deadline may come from a caller's number, and the conversion must not trap.
                let wait = min(deadline.timeIntervalSinceNow, 86_400)
                if wait > 0 { try? await Task.sleep(nanoseconds: UInt64(wait * 1_000_000_000)) }
                return !Task.isCancelled
            }
            group.addTask { [self] in
                await fetchAll(Array(media.prefix(limit)), staging: staging, downloader: downloader)
                if let chart = content.chart, configuration.rendersCharts {
                    stageChart(chart, index: media.count, staging: staging)
                }
                return false
            }
            let first = await group.next() ?? false
            // At the deadline, hand over what is staged now; cancelled downloads unwind afterwards.
            if first { finish(deadlineHit: true) }
            group.cancelAll()
            return first
        }
        let late = deadlineHit || Task.isCancelled || Date() >= deadline
        guard let address = content.receiptURL, configuration.receipts.enabled else { return finish(deadlineHit: late) }
        func postReceipt(timeout: TimeInterval) async -> ReceiptOutcome {
            let (attached, skipped) = gate.snapshot
            let report = makeReport(attached: attached, skippedByIndex: skipped, deadlineHit: late)
            return await ReceiptPoster.post(
                report,
                to: address,
                policy: configuration.receipts,
                allowInsecureHTTP: configuration.fetch.allowInsecureHTTP,
                timeout: timeout,
                // When the server does not answer in time, the content is handed over from the timer itself.
                onTimeout: { [self] outcome in finish(deadlineHit: Date() >= deadline, receipt: outcome) }
            )
        }
        if late {
            // Delivered already (or now): the receipt follows on a best-effort basis, as the system may end the
            // extension as soon as the content is handed over.
            finish(
                deadlineHit: true,
                receipt: .notSent("the deadline came first; posted after the hand-over, best effort")
            )
            _ = await postReceipt(timeout: configuration.receipts.timeout)
            return
        }
        // The receipt goes before the hand-over, so it is not lost when the system ends the extension after it.
        let outcome = await postReceipt(timeout: min(configuration.receipts.timeout, deadline.timeIntervalSinceNow))
        finish(deadlineHit: Date() >= deadline, receipt: outcome)
    }

    private func fetchAll(_ media: [ReceivedMedia], staging: StagingDirectory, downloader: MediaDownloader) async {
        await withTaskGroup(of: Void.self) { group in
            var next = 0
            func add() {
                guard next < media.count else { return }
                let index = next
                next += 1
                group.addTask { [self] in
                    await fetchOne(media[index], index: index, staging: staging, downloader: downloader)
                }
            }
            for _ in 0..<max(1, configuration.fetch.maxConcurrentDownloads) { add() }
            while await group.next() != nil { add() }
        }
    }

    private func fetchOne(
        _ media: ReceivedMedia,
        index: Int,
        staging: StagingDirectory,
        downloader: MediaDownloader
    ) async {
        // The decoder read the URL already; a payload built by hand may hold anything.
        let target: MediaURL
        do { target = try MediaURL(media.url) } catch {
            let scheme = media.url.prefix { $0 != ":" }.lowercased()
            let reason: SkipReason = error.rule == .scheme ? .unsupportedScheme(String(scheme.prefix(32))) : .badURL
            return gate.record(SkippedMedia(url: media.url, reason: reason), at: index)
        }
        let fetched = target.isRewritten ? target.fetched : nil
        func skip(_ reason: SkipReason) {
            gate.record(SkippedMedia(url: media.url, fetched: fetched, reason: reason), at: index)
        }
        if target.scheme == "http" && !configuration.fetch.allowInsecureHTTP { return skip(.insecureURL) }
        let result = await downloader.download(
            target.url,
            to: staging.partialFile(index: index),
            hint: media.hintedType,
            kindHint: media.kindHint
        )
        switch result {
        case .failure(let reason):
            skip(Task.isCancelled && reason.code == "network" ? .deadline : reason)
        case .success(let file):
            let final = staging.finalFile(
                index: index,
                sourceURL: target.fetched,
                fileExtension: file.type.fileExtension
            )
            do {
                // An exact staging folder may hold the same file from an earlier notification: replace it.
                if FileManager.default.fileExists(atPath: final.path) { try FileManager.default.removeItem(at: final) }
                try FileManager.default.moveItem(at: file.file, to: final)
                record(
                    StagedAttachment(
                        identifier: "media-\(index)",
                        file: final,
                        type: file.type,
                        bytes: file.bytes,
                        sourceURL: media.url,
                        fetchedURL: fetched,
                        typeSource: file.typeSource,
                        thumbnail: media.thumbnail,
                        stagedAfterMilliseconds: milliseconds()
                    ),
                    at: index
                )
            } catch {
                skip(.stagingFailed(error.localizedDescription))
            }
        }
    }

    private func stageChart(_ chart: ChartSpec, index: Int, staging: StagingDirectory) {
        let png = ChartRenderer.render(chart).png
        let file = staging.root.appendingPathComponent("\(index)-chart.png")
        do {
            try Data(png).write(to: file)
            record(
                StagedAttachment(
                    identifier: "chart",
                    file: file,
                    type: .png,
                    bytes: png.count,
                    sourceURL: "chart:",
                    typeSource: "rendered",
                    thumbnail: nil,
                    stagedAfterMilliseconds: milliseconds()
                ),
                at: index
            )
        } catch {
            gate.record(SkippedMedia(url: "chart:", reason: .stagingFailed(error.localizedDescription)), at: index)
        }
    }

    /// Records a staged file as attached once the admission (the system) accepts it, else as skipped.
    private func record(_ staged: StagedAttachment, at index: Int) {
        if let reason = admit?(staged) {
            try? FileManager.default.removeItem(at: staged.file)  // not attached: nothing will read it
            gate.record(SkippedMedia(url: staged.sourceURL, fetched: staged.fetchedURL, reason: reason), at: index)
        } else {
            gate.record(staged, at: index)
        }
    }

    private func finish(deadlineHit: Bool, receipt: ReceiptOutcome? = nil) {
        gate.deliver { attached, skippedByIndex in
            var report = makeReport(attached: attached, skippedByIndex: skippedByIndex, deadlineHit: deadlineHit)
            report.receipt =
                receipt
                ?? (content.receiptURL == nil
                    ? nil : .notSent(configuration.receipts.enabled ? "the deadline came first" : "receipts are off"))
            return EnrichedNotification(
                text: text.applying(content.contentOverride),
                attachments: attached,
                report: report
            )
        }
    }

    private func makeReport(
        attached: [StagedAttachment],
        skippedByIndex: [Int: SkippedMedia],
        deadlineHit: Bool
    ) -> DeliveryReport {
        var skipped = skippedByIndex.sorted { $0.key < $1.key }.map(\.value)
        // Media neither staged nor skipped when time ran out.
        let done = Set(attached.map(\.sourceURL)).union(skipped.map(\.url))
        for m in content.media where !done.contains(m.url) {
            skipped.append(SkippedMedia(url: m.url, reason: .deadline))
        }
        if let _ = content.chart, configuration.rendersCharts, !done.contains("chart:") {
            skipped.append(SkippedMedia(url: "chart:", reason: .deadline))
        }
        return DeliveryReport(
            notificationID: content.notificationID,
            sources: content.sources,
            attached: attached,
            skipped: skipped,
            payloadProblems: content.problems,
            elapsedMilliseconds: milliseconds(),
            deadlineHit: deadlineHit
        )
    }
}

/// Holds the processing task so that `expire()` can cancel it from any thread.
private final class TaskHolder: @unchecked Sendable {
    // @unchecked: `task` is read and written under `lock`.
    private let lock = NSLock()
    private var task: Task<Void, Never>?
    func set(_ t: Task<Void, Never>) { lock.withLock { task = t } }
    func cancel() { lock.withLock { task }?.cancel() }
}
