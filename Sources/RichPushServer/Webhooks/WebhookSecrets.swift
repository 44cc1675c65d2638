import Foundation

/// Endpoints' signing secrets as the databases keep them: sealed with the credentials key when the server has one
/// (as provider credentials are), never shown again after the answer that made them.
struct WebhookSecrets: Sendable {
    let sealer: CredentialSealer?

    func seal(_ secret: String) throws -> String { try sealer?.seal(secret) ?? secret }

    func open(_ stored: String) throws -> String {
        if let sealer { return try sealer.open(stored) }
        guard !CredentialSealer.isSealed(stored) else {
            throw CredentialSealer.Problem(
                description: "a webhook secret is sealed and this server has no credentials key"
            )
        }
        return stored
    }

    /// An endpoint read from its row, its secrets opened.
    func opened(_ s: WebhookEndpoint.Stored) throws -> WebhookEndpoint {
        var e = WebhookEndpoint(
            id: s.id,
            appID: s.appID,
            url: s.url,
            types: WebhookEndpoint.parse(types: s.types),
            description: s.description,
            batchSize: s.batchSize,
            secret: try open(s.secret),
            createdAt: s.createdAt,
            cursor: s.cursor
        )
        e.previousSecret = try s.previousSecret.map(open)
        e.previousUntil = s.previousUntil
        e.disabledAt = s.disabledAt
        e.disabledReason = s.disabledReason
        e.failures = s.failures
        e.failingSince = s.failingSince
        e.lastError = s.lastError
        e.lastAttemptAt = s.lastAttemptAt
        e.lastSuccessAt = s.lastSuccessAt
        e.nextAttemptAt = s.nextAttemptAt
        e.batchEnd = s.batchEnd
        if let from = s.replayFrom, let to = s.replayTo {
            e.replay = WebhookReplay(from: from, to: to, cursor: s.replayCursor ?? .start)
        }
        return e
    }
}

extension WebhookEndpoint {
    /// A row of `webhook_endpoints` as read, before its secrets are opened.
    struct Stored {
        var id: String
        var appID: String
        var url: String
        var types: String
        var description: String
        var batchSize: Int
        var secret: String
        var previousSecret: String?
        var previousUntil: Date?
        var createdAt: Date
        var disabledAt: Date?
        var disabledReason: String?
        var failures: Int
        var failingSince: Date?
        var lastError: String?
        var lastAttemptAt: Date?
        var lastSuccessAt: Date?
        var nextAttemptAt: Date
        var cursor: WebhookCursor
        var batchEnd: WebhookCursor?
        var replayFrom: Date?
        var replayTo: Date?
        var replayCursor: WebhookCursor?
    }
}
