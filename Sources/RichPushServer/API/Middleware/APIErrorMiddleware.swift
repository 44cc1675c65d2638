import Foundation
import Hummingbird
import Logging
import NIOCore

/// The one place an API route's failure becomes an answer. In front of every `/v1` route: while the database is
/// away nothing is tried (503 at once: every route needs it, a key is looked up there); an ``APIError`` answers for
/// itself; a body over its limit is 413; a database that went away mid-request is 503; anything else is logged
/// where it is caught, with a request id that the 500 answer carries too (the error, never a body or a key).
struct APIErrorMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    let health: DatabaseHealth
    let isUnavailable: @Sendable (any Error) -> Bool
    let maxBodyBytes: Int
    /// Refuses requests that store something while the disk is low (nil: no floor).
    var diskFloor: DiskFloor? = nil

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var response = try await answer(request, context: context, next: next)
        // A page on another origin registers devices: it may read every answer of that route, refusals included
        // (keys are bearer tokens, never cookies, so nothing rides along that the page did not put there).
        if request.method == .post, Self.isDeviceRegistration(request.uri.path) {
            response.headers[.accessControlAllowOrigin] = "*"
        }
        return response
    }

    /// Whether a request of this method may store something (reads and deletions go on below the disk floor).
    static func stores(_ method: HTTPRequest.Method) -> Bool {
        method != .get && method != .head && method != .options && method != .delete
    }

    /// `/v1/apps/{app}/devices`, read without allocating the parts.
    static func isDeviceRegistration(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 5 && parts[0].isEmpty && parts[1] == "v1" && parts[2] == "apps" && parts[4] == "devices"
    }

    private func answer(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard health.isUp else { return APIError.databaseUnavailable.response }
        if let diskFloor, Self.stores(request.method), let refusal = diskFloor.refusal() {
            return refusal.response
        }
        do {
            return try await next(request, context)
        } catch let error as APIError {
            return error.response
        } catch is NIOTooManyBytesError {
            return APIError.bodyTooLarge(maxBodyBytes).response
        } catch  where DiskFloor.isDiskFull(error) {
            context.logger.error("the database's disk is full", metadata: ["error": .string(String(describing: error))])
            return APIError.diskFull.response
        } catch  where isUnavailable(error) {
            context.logger.warning("database unavailable", metadata: ["error": .string(String(describing: error))])
            return APIError.databaseUnavailable.response
        } catch let error as HTTPResponseError {
            // Hummingbird's own answers (a malformed request it refused) stay as they are.
            throw error
        } catch {
            let requestID = String(UUID().uuidString.lowercased().prefix(18))
            context.logger.error(
                "request failed",
                metadata: ["request_id": .string(requestID), "error": .string(String(describing: error))]
            )
            return APIError(.internal, "internal error", requestID: requestID).response
        }
    }
}
