import Crypto
import Foundation
import RichPushCore
import RichPushWebPush

/// libFuzzer entry: the bytes a Web Push receiver, a push service and our sender read from outside. The first byte
/// picks the parser: a message body opened with a fixed subscription's keys (RFC 8188 header, record, padding), a
/// subscription in its token form, a subscription's JSON, a VAPID Authorization header, or a push service's answer
/// as the sender reads it (any status, any `Retry-After`). Each must answer with a value or a named refusal, never
/// trap.
let receiver = P256.KeyAgreement.PrivateKey()
let auth = [UInt8](repeating: 7, count: 16)
let endpoint = URL(string: "https://push.example.net/push/abc")!
let vapidKey = P256.Signing.PrivateKey()
let sealed: [UInt8] =
    (try? WebPushEncryption.encrypt(
        Array("{\"notification\":{\"title\":\"T\"}}".utf8),
        p256dh: receiver.publicKey,
        auth: auth
    ))
    ?? []

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let mode = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    switch mode % 6 {
    case 0:
        _ = try? WebPushEncryption.decrypt(rest, privateKey: receiver, auth: auth)
    case 1:
        // A real body with the input written over part of it: reaches the record and its padding.
        var body = sealed
        for (i, b) in rest.prefix(body.count).enumerated() where i % 2 == 1 {
            body[(Int(rest[i - 1]) * 7 + i) % body.count] = b
        }
        _ = try? WebPushEncryption.decrypt(body, privateKey: receiver, auth: auth)
    case 2:
        // A subscription that reads encrypts with the key and bytes it read (the sender's own path).
        if let s = try? WebPushSubscription(token: String(decoding: rest, as: UTF8.self), allowHTTP: true) {
            guard (try? s.encrypt([1, 2, 3])) != nil else { fatalError("a subscription that read does not encrypt") }
        }
    case 3:
        if let json = try? JSONValue.parse(rest) { _ = try? WebPushSubscription(json: json) }
    case 4:
        _ = try? VAPID.verify(String(decoding: rest, as: UTF8.self), endpoint: endpoint, subscribedWith: nil)
    default:
        // Two bytes of status (any number, not only HTTP's), the rest as the Retry-After header's text.
        let status = rest.count >= 2 ? Int(rest[0]) << 8 | Int(rest[1]) : 0
        let decision = WebPushRequest.decision(
            status: status - 0x4000,
            retryAfter: String(decoding: rest.dropFirst(2), as: UTF8.self)
        )
        if case .retryAfter(let seconds)? = decision, !(0...86_400).contains(seconds) {
            fatalError("a Retry-After outside 0...86400 s passed: \(seconds)")
        }
    }
    return 0
}
