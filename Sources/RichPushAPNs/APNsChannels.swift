import Foundation
import NIOCore
import RichPushCore

/// A broadcast channel as APNs describes it.
public struct APNsChannel: Sendable, Hashable {
    public enum StoragePolicy: Int, Sendable, Hashable {
        /// A device that is offline when an update goes out never gets it.
        case noMessageStored = 0
        /// APNs keeps the most recent update for a device that is offline.
        case mostRecentMessageStored = 1
    }

    public var id: String
    public var storagePolicy: StoragePolicy
}

extension APNsClient {
    // Channel management goes to its own host (`Endpoint.channelManagement`): use a client configured for it.

    /// Creates a Live Activity broadcast channel for an app; APNs answers with its id.
    public func createChannel(
        bundleID: String,
        storagePolicy: APNsChannel.StoragePolicy
    ) async throws(APNsFailure)
        -> APNsChannel
    {
        let body: JSONValue = [
            "message-storage-policy": .int(Int64(storagePolicy.rawValue)), "push-type": "LiveActivity",
        ]
        let response = try await perform(
            method: "POST",
            path: Self.channelsPath(bundleID),
            headers: [],
            body: ByteBuffer(bytes: body.serialized())
        )
        guard let id = response.headers.first(name: "apns-channel-id"), !id.isEmpty else {
            throw APNsFailure(transport: .malformedResponse("no apns-channel-id in the answer"), retry: .never)
        }
        return APNsChannel(id: id, storagePolicy: storagePolicy)
    }

    /// A channel's settings; `ChannelNotRegistered` when APNs does not know it.
    public func channel(bundleID: String, id: String) async throws(APNsFailure) -> APNsChannel {
        let response = try await perform(
            method: "GET",
            path: Self.channelsPath(bundleID),
            headers: [("apns-channel-id", id)],
            body: nil
        )
        let json = (try? JSONValue.parse(response.bodyBytes)) ?? .null
        guard let raw = json["message-storage-policy"]?.intValue,
            let policy = APNsChannel.StoragePolicy(rawValue: Int(clamping: raw))
        else {
            throw APNsFailure(transport: .malformedResponse("no message-storage-policy in the answer"), retry: .never)
        }
        return APNsChannel(id: id, storagePolicy: policy)
    }

    public func deleteChannel(bundleID: String, id: String) async throws(APNsFailure) {
        _ = try await perform(
            method: "DELETE",
            path: Self.channelsPath(bundleID),
            headers: [("apns-channel-id", id)],
            body: nil
        )
    }

    /// The ids of every channel the app has (APNs allows 10,000 per app and environment).
    public func allChannels(bundleID: String) async throws(APNsFailure) -> [String] {
        let response = try await perform(
            method: "GET",
            path: "/1/apps/\(bundleID)/all-channels",
            headers: [],
            body: nil
        )
        guard case .array(let list)? = (try? JSONValue.parse(response.bodyBytes))?["channels"] else {
            throw APNsFailure(transport: .malformedResponse("no channels list in the answer"), retry: .never)
        }
        return list.compactMap(\.stringValue)
    }

    /// Sends one Live Activity push to every device listening to a channel: the request ``APNsRenderer``
    /// made (its `apns-topic` is dropped: the path names the app).
    public func broadcast(
        _ request: APNsRequest,
        bundleID: String,
        channelID: String
    ) async throws(APNsFailure)
        -> APNsDelivery
    {
        let headers =
            request.headers.filter { $0.name != "apns-topic" && $0.name != "apns-collapse-id" && $0.name != "apns-id" }
            .map { ($0.name, $0.value) } + [("apns-channel-id", channelID)]
        let response = try await perform(
            method: "POST",
            path: "/4/broadcasts/apps/\(bundleID)",
            headers: headers,
            body: ByteBuffer(bytes: request.body)
        )
        return APNsDelivery(
            apnsID: response.headers.first(name: "apns-request-id"),
            uniqueID: response.headers.first(name: "apns-unique-id")
        )
    }

    static func channelsPath(_ bundleID: String) -> String { "/1/apps/\(bundleID)/channels" }
}
