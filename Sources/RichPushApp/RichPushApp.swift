import Foundation

#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app's side of RichPush: asks permission and tells the server where it stands, registers the device with the
/// server (token, user, tags, locale), and reports what people did with notifications (opened, with the action
/// chosen and the deep link followed, or dismissed). Reports wait in a file while the device is offline and go when
/// ``flush()`` next reaches the server; each is idempotent (a registration is an upsert, an open counts once per
/// delivery), so a report sent twice counts once.
///
/// ```swift
/// let push = RichPushApp(configuration: .init(server: URL(string: "https://push.example.com")!, appID: "app_…",
///                                            key: "rp_…" /* a key with the register scope only */))
/// _ = await push.requestPermission()
/// await push.register(deviceToken: token)            // from application(_:didRegisterForRemoteNotifications…)
/// let opened = await push.handle(response)           // from userNotificationCenter(_:didReceive:)
/// if let link = opened?.deepLink { /* go there */ }
/// await push.flush()
/// ```
///
/// The key it ships with registers devices and reports opens only: anyone who reads it from the app can do no more
/// (and an open counts only for a delivery the server made to that device). Which user a device belongs to is
/// proved, not claimed: the app's backend signs a short-lived identity proof for its signed-in user, and the
/// library asks the app for one (``Configuration/identity``) each time it registers a device with a user
/// (docs/identity.md):
///
/// ```swift
/// var configuration = RichPushApp.Configuration(server: server, appID: "app_…", key: "rp_…")
/// configuration.identity = { userID in try? await myBackend.pushIdentityProof(for: userID) }
/// ```
public actor RichPushApp {
    /// Asks the app's backend for an identity proof of the signed-in user (a JWT it signs; docs/identity.md), or
    /// nil when it has none now. Called each time a registration naming the user is sent, and once more when the
    /// server refuses the proof (it expired, or the backend's key changed).
    public typealias IdentityProvider = @Sendable (_ userID: String) async -> String?

    public struct Configuration: Sendable {
        /// The RichPush server.
        public var server: URL
        public var appID: String
        /// A key with the `register` scope.
        public var key: String
        /// Where waiting reports are kept.
        public var directory: URL
        /// Reports kept while the server cannot be reached (the oldest go past it).
        public var maxPending: Int
        /// The longest wait between tries.
        public var maxBackoff: TimeInterval
        /// Whether receipt addresses and the server may be plain http (a local sandbox only).
        public var allowInsecureHTTP: Bool
        /// Where the proof of the signed-in user comes from. Without one (or when it answers nil) a registration
        /// goes without its user id: the device is registered, anonymous, and tied to its user by a later
        /// registration that has a proof.
        public var identity: IdentityProvider?

        public init(
            server: URL,
            appID: String,
            key: String,
            directory: URL = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask)[0]
                .appendingPathComponent("RichPush"),
            maxPending: Int = 500,
            maxBackoff: TimeInterval = 3600,
            allowInsecureHTTP: Bool = false,
            identity: IdentityProvider? = nil
        ) {
            self.server = server
            self.appID = appID
            self.key = key
            self.directory = directory
            self.maxPending = maxPending
            self.maxBackoff = maxBackoff
            self.allowInsecureHTTP = allowInsecureHTTP
            self.identity = identity
        }
    }

    /// Sends one request: the status and the `Retry-After` header, or a thrown error when nothing came back.
    public typealias Transport = @Sendable (URLRequest) async throws -> (status: Int, retryAfter: String?)

    /// What the person opened.
    public struct Opened: Sendable, Hashable {
        /// The RichPush notification's id.
        public var notificationID: String?
        /// The action chosen, nil for the notification itself.
        public var action: String?
        /// The notification's deep link, when it has one.
        public var deepLink: URL?
        public var dismissed: Bool

        public init(notificationID: String?, action: String?, deepLink: URL?, dismissed: Bool) {
            self.notificationID = notificationID
            self.action = action
            self.deepLink = deepLink
            self.dismissed = dismissed
        }
    }

    /// What a flush did.
    public struct FlushResult: Sendable, Hashable {
        /// Reports the server took (or already had).
        public var sent = 0
        /// Reports the server refused for good (a bad key, a delivery it does not know): dropped.
        public var refused = 0
        /// Reports still waiting (the server was not reached, or asked to wait).
        public var waiting = 0

        public init(sent: Int = 0, refused: Int = 0, waiting: Int = 0) {
            self.sent = sent
            self.refused = refused
            self.waiting = waiting
        }
    }

    public let configuration: Configuration
    let transport: Transport
    let center: UNUserNotificationCenter
    var outbox: Outbox
    /// The device as last registered.
    var token: String?
    var userID: String?
    var tags: [String] = []
    var locale: String?
    /// Where notification permission stood when last read (the server's spelling), sent with registrations.
    var permissionState: String?
    let now: @Sendable () -> Date

    public init(
        configuration: Configuration,
        center: UNUserNotificationCenter = .current(),
        transport: Transport? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.configuration = configuration
        self.center = center
        self.transport = transport ?? Self.urlSession
        self.now = now
        outbox = Outbox(
            file: configuration.directory.appendingPathComponent("outbox.json"),
            limit: configuration.maxPending
        )
        let state = Self.readState(configuration.directory)
        token = state["token"] as? String
        userID = state["user_id"] as? String
        tags = state["tags"] as? [String] ?? []
        locale = state["locale"] as? String
        permissionState = state["permission"] as? String
    }

    // MARK: Permission

    /// Asks the person (once; later calls answer as the first did) and returns where permission stands.
    public func requestPermission(
        _ options: UNAuthorizationOptions = [.alert, .sound, .badge]
    ) async -> UNAuthorizationStatus {
        _ = try? await center.requestAuthorization(options: options)
        return await permission()
    }

    /// Where permission stands now. When it changed since it was last read (the person turned notifications off in
    /// Settings, say), the device is registered again so that the server knows: call it when the app comes to the
    /// foreground.
    @discardableResult
    public func permission() async -> UNAuthorizationStatus {
        let status = await center.notificationSettings().authorizationStatus
        let name = Self.name(of: status)
        if name != permissionState {
            permissionState = name
            queueRegistration()
        }
        return status
    }

    /// The server's name for a status (`Device.Permission`).
    static func name(of status: UNAuthorizationStatus) -> String {
        switch status {
        case .notDetermined: return "not_determined"
        case .denied: return "denied"
        case .authorized: return "authorized"
        case .provisional: return "provisional"
        case .ephemeral: return "ephemeral"
        @unknown default: return "not_determined"
        }
    }

    // MARK: The device

    /// The token APNs gave (`didRegisterForRemoteNotificationsWithDeviceToken`), as bytes.
    public func register(deviceToken: Data) async {
        await register(token: deviceToken.map { String(format: "%02x", $0) }.joined())
    }

    /// The token as text (hex for APNs).
    public func register(token: String) async {
        self.token = token
        queueRegistration()
    }

    /// The signed-in user (nil: signed out); sent with the next registration.
    public func setUser(_ id: String?) {
        userID = id
        queueRegistration()
    }

    public func setTags(_ tags: [String]) {
        self.tags = Array(Set(tags)).sorted()
        queueRegistration()
    }

    /// A BCP 47 language tag (`en-GB`).
    public func setLocale(_ locale: String?) {
        self.locale = locale
        queueRegistration()
    }

    func queueRegistration() {
        saveState()
        guard let token else { return }
        var body: [String: Any] = ["token": token, "platform": "ios", "tags": tags]
        if let userID { body["user_id"] = userID }
        if let locale { body["locale"] = locale }
        if let permissionState { body["permission"] = permissionState }
        queue(.registration, "POST", "/v1/apps/\(Self.pathPart(configuration.appID))/devices", body, keyed: true)
    }

    // MARK: Opens

    /// Reads a response to a notification, queues its report, and says what was opened (the action and the deep
    /// link). Nil for a notification that is not RichPush's. `following` is the deep link the app goes to when it
    /// is not the notification's own (an action's, say); the report names the link followed.
    @discardableResult
    public func handle(_ response: UNNotificationResponse, following link: URL? = nil) -> Opened? {
        report(
            userInfo: response.notification.request.content.userInfo,
            actionIdentifier: response.actionIdentifier,
            following: link
        )
    }

    /// The same from a notification's `userInfo` and the action's identifier.
    @discardableResult
    public func report(userInfo: [AnyHashable: Any], actionIdentifier: String, following: URL? = nil) -> Opened? {
        guard let rp = userInfo["rp"] as? [String: Any] else { return nil }
        let id = rp["id"] as? String
        let dismissed = actionIdentifier == UNNotificationDismissActionIdentifier
        let action = actionIdentifier == UNNotificationDefaultActionIdentifier || dismissed ? nil : actionIdentifier
        let own = (rp["l"] as? String).flatMap(URL.init(string:))
        let link = following ?? own
        var body: [String: Any] = ["event": dismissed ? "dismissed" : "opened"]
        if let action { body["action"] = Self.prefix(action, bytes: 64) }
        // The server keeps an absolute link of up to 1,024 characters; another is not reported (the open still is).
        if !dismissed, let link, link.scheme != nil, link.absoluteString.unicodeScalars.count <= 1024 {
            body["link"] = link.absoluteString
        }
        if let address = rp["r"] as? String, let url = URL(string: address), isAllowed(url) {
            // The delivery's own address: it names the delivery and needs no key.
            queue(.open, "POST", address + "/opens", body, keyed: false)
        } else if let id, let token {
            body["token"] = token
            queue(
                .open,
                "POST",
                "/v1/apps/\(Self.pathPart(configuration.appID))/notifications/\(Self.pathPart(id))/opens",
                body,
                keyed: true
            )
        }
        return Opened(notificationID: id, action: action, deepLink: own, dismissed: dismissed)
    }

    // MARK: Sending

    /// Reports waiting.
    public var pending: Int { outbox.items.count }

    /// Sends what is waiting and due, oldest first. A report the server took, or already had (409), goes; one it
    /// refused for good (another 4xx) goes too, counted as refused; on a 429 or 5xx, or no answer, the rest waits
    /// for the next flush, after a backoff (the server's `Retry-After` at least). A 409 with `Retry-After` is an
    /// open that came before the push service's answer was recorded (`delivery-not-accepted`): it waits too.
    @discardableResult
    public func flush() async -> FlushResult {
        var result = FlushResult()
        guard outbox.notBefore <= now() else { return finish(result) }
        for item in outbox.items {
            guard var request = request(for: item) else {
                outbox.remove(item.id)
                result.refused += 1
                continue
            }
            do {
                let user = item.kind == .registration ? Self.userID(in: item.body) : nil
                if let user { await prove(&request, user: user) }
                var (status, retryAfter) = try await transport(request)
                // A proof refused (expired, or signed with a key the server no longer has): one more, once.
                if status == 401, let user, request.value(forHTTPHeaderField: Self.identityHeader) != nil {
                    await prove(&request, user: user)
                    (status, retryAfter) = try await transport(request)
                }
                switch status {
                case 409 where retryAfter != nil, 429, 500..<600:
                    outbox.wait(until: now().addingTimeInterval(backoff(outbox.failures, retryAfter)))
                    return finish(result)
                case 200..<300, 409:
                    outbox.remove(item.id)
                    result.sent += 1
                default:
                    outbox.remove(item.id)
                    result.refused += 1
                }
            } catch {
                outbox.wait(until: now().addingTimeInterval(backoff(outbox.failures, nil)))
                return finish(result)
            }
        }
        return finish(result)
    }

    /// The header an identity proof travels in.
    static let identityHeader = "RichPush-Identity"

    /// The user id a registration's body names.
    static func userID(in body: Data) -> String? {
        ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any])?["user_id"] as? String
    }

    /// Puts a fresh proof of the user on a registration; without one, sends it without its user id (anonymous:
    /// the device is registered all the same, and a later registration with a proof ties it to its user).
    func prove(_ request: inout URLRequest, user: String) async {
        if let proof = await configuration.identity?(user), !proof.isEmpty {
            request.setValue(proof, forHTTPHeaderField: Self.identityHeader)
            return
        }
        request.setValue(nil, forHTTPHeaderField: Self.identityHeader)
        guard let body = request.httpBody,
            var o = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
        else { return }
        o["user_id"] = nil
        request.httpBody = try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])
    }

    func finish(_ r: FlushResult) -> FlushResult {
        var out = r
        out.waiting = outbox.items.count
        return out
    }

    /// 1 s doubling per attempt up to ``Configuration/maxBackoff``; never sooner than the server asked. A
    /// `Retry-After` from outside is held to 0…maxBackoff before it becomes a number of seconds.
    func backoff(_ attempts: Int, _ retryAfter: String?) -> TimeInterval {
        let exponential = min(configuration.maxBackoff, pow(2, Double(min(attempts, 30))))
        guard let text = retryAfter, let asked = Double(text), asked.isFinite, asked >= 0 else { return exponential }
        return max(exponential, min(asked, configuration.maxBackoff))
    }

    // MARK: Internals

    func isAllowed(_ url: URL) -> Bool {
        let scheme = url.scheme?.lowercased()
        return scheme == "https" || (scheme == "http" && configuration.allowInsecureHTTP)
    }

    func queue(_ kind: Outbox.Item.Kind, _ method: String, _ url: String, _ body: [String: Any], keyed: Bool) {
        guard let data = try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]) else { return }
        outbox.add(
            .init(
                id: UUID(),
                kind: kind,
                method: method,
                url: url,
                body: data,
                keyed: keyed
            )
        )
    }

    func request(for item: Outbox.Item) -> URLRequest? {
        let url: URL?
        if item.url.hasPrefix("/") {
            url = URL(string: item.url, relativeTo: configuration.server)?.absoluteURL
        } else {
            url = URL(string: item.url)
        }
        guard let url, isAllowed(url) else { return nil }
        var r = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: 15)
        r.httpMethod = item.method
        r.httpBody = item.body
        r.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if item.keyed { r.setValue("Bearer \(configuration.key)", forHTTPHeaderField: "Authorization") }
        r.httpShouldHandleCookies = false
        return r
    }

    /// The longest start of `s` within `bytes` UTF-8 bytes, cut between characters.
    static func prefix(_ s: String, bytes: Int) -> String {
        var out = ""
        var used = 0
        for c in s {
            let n = c.utf8.count
            if used + n > bytes { break }
            out.append(c)
            used += n
        }
        return out
    }

    static func pathPart(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? s
    }

    var stateFile: URL { configuration.directory.appendingPathComponent("device.json") }

    func saveState() {
        var o: [String: Any] = ["tags": tags]
        if let token { o["token"] = token }
        if let userID { o["user_id"] = userID }
        if let locale { o["locale"] = locale }
        if let permissionState { o["permission"] = permissionState }
        try? FileManager.default.createDirectory(at: configuration.directory, withIntermediateDirectories: true)
        if let data = try? JSONSerialization.data(withJSONObject: o) {
            try? data.write(to: stateFile, options: .atomic)
        }
    }

    static func readState(_ directory: URL) -> [String: Any] {
        guard let data = try? Data(contentsOf: directory.appendingPathComponent("device.json")),
            let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return [:] }
        return o
    }

    /// The default transport: an ephemeral URLSession (no cookies, no cache).
    static let urlSession: Transport = { request in
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(for: request)
        let http = response as? HTTPURLResponse
        return (http?.statusCode ?? 0, http?.value(forHTTPHeaderField: "Retry-After"))
    }
}
