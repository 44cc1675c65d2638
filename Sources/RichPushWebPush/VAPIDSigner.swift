import Crypto
import Foundation

/// Signs VAPID headers for one key, once per push service origin for `lifetime` seconds: a token says only who
/// sends and to which origin until when (RFC 8292 §2), so every push to that service within its lifetime carries
/// the same one. A token is made again when less than a quarter of its lifetime is left, so none is sent close to
/// its end. At most `capacity` origins are kept (there are a handful of push services; the bound is for endpoints a
/// user chose).
public final class VAPIDSigner: Sendable {
    public let key: P256.Signing.PrivateKey
    public let subject: String
    public let lifetime: TimeInterval
    public let capacity: Int
    private let tokens = Locked<[String: (header: String, expires: Date)]>([:])

    public init(
        key: P256.Signing.PrivateKey,
        subject: String,
        lifetime: TimeInterval = 12 * 3600,
        capacity: Int = 1000
    )
        throws
    {
        try VAPID.checkSubject(subject)
        self.key = key
        self.subject = subject
        self.lifetime = min(max(lifetime, 60), VAPID.maxLifetime)
        self.capacity = max(1, capacity)
    }

    /// The `Authorization` header for a push to `endpoint`.
    public func authorization(for endpoint: URL, now: Date = Date()) throws -> String {
        guard let origin = VAPID.audience(of: endpoint) else {
            throw VAPID.Failure("endpoint", "the subscription's endpoint has no origin to sign for")
        }
        if let cached = tokens.withLockedValue({ $0[origin] }), cached.expires.timeIntervalSince(now) > lifetime / 4 {
            return cached.header
        }
        let expires = now.addingTimeInterval(lifetime)
        let header = try VAPID.authorization(endpoint: endpoint, key: key, subject: subject, expires: expires, now: now)
        tokens.withLockedValue { all in
            if all.count >= capacity, all[origin] == nil {
                // The token nearest its end goes first.
                if let oldest = all.min(by: { $0.value.expires < $1.value.expires })?.key { all[oldest] = nil }
            }
            all[origin] = (header, expires)
        }
        return header
    }

    /// Origins with a token kept.
    public var cachedOrigins: Int { tokens.withLockedValue { $0.count } }
}

/// A value behind a lock (this library needs nothing more, and no event-loop library for it).
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLockedValue<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
