import Hummingbird
import NIOCore

/// The context of one API request: Hummingbird's core context and the client's address, which failed
/// authentication is limited by (an unknown key has no bucket of its own).
public struct APIRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// The client's address without its port: the key failed authentications are counted under.
    var clientKey: String { remoteAddress?.ipAddress ?? "unknown" }
}
