import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The console (`/console`: a page of this server's, nothing to install, talking to the API with a key) and the
/// API's OpenAPI document. The console's files are read once from the package's resources. Every answer carries a strict
/// Content-Security-Policy: scripts and styles from this origin only, nothing inline, no third-party origin, no
/// framing; images may come from the media the sender names (that is what a preview shows).
enum ConsoleController {
    static func addRoutes(to router: Router<APIRequestContext>) {
        router.get("/console") { _, _ in response("index.html") }
        router.get("/console/:file") { _, context in response(context.parameters.get("file") ?? "") }
        router.get("/sdk/web/:file") { _, context in sdkResponse(context.parameters.get("file") ?? "") }
        router.get("/openapi.yaml") { _, _ -> Response in
            Response(
                status: .ok,
                headers: [.contentType: "application/yaml"],
                body: .init(byteBuffer: ByteBuffer(string: RichPushAPI.openAPIDocument))
            )
        }
    }

    static let types = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
    ]

    static let files = load("console")

    /// The files of a resource folder whose type is one of ``types``, by name, read once. The package ships the
    /// folders; without one every file of it answers 404 (its tests would fail).
    static func load(_ folder: String) -> [String: ByteBuffer] {
        guard let url = Bundle.module.resourceURL?.appendingPathComponent(folder),
            let names = try? FileManager.default.contentsOfDirectory(atPath: url.path)
        else { return [:] }
        var out: [String: ByteBuffer] = [:]
        for name in names where types[(name as NSString).pathExtension] != nil {
            if let data = FileManager.default.contents(atPath: url.appendingPathComponent(name).path) {
                out[name] = ByteBuffer(bytes: data)
            }
        }
        return out
    }

    /// The web SDK's files (`Resources/sdk/web`): the page script and the service worker.
    static let sdkFiles = load("sdk/web")

    /// A web SDK file, loadable from any site: pages load the script, and a site's worker imports ours
    /// (`importScripts`), both across origins.
    static func sdkResponse(_ name: String) -> Response {
        guard let body = sdkFiles[name] else {
            return Response(
                status: .notFound,
                headers: [.contentType: "text/plain"],
                body: .init(byteBuffer: ByteBuffer(string: "no such SDK file"))
            )
        }
        var headers: HTTPFields = [.contentType: types["js"]!, .cacheControl: "max-age=300"]
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Cross-Origin-Resource-Policy")!] = "cross-origin"
        headers[.accessControlAllowOrigin] = "*"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }

    static let policy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' https: http: data: blob:; connect-src 'self'; "
        + "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

    static func response(_ name: String) -> Response {
        guard let body = files[name], let type = types[(name as NSString).pathExtension] else {
            return Response(
                status: .notFound,
                headers: [.contentType: "text/plain"],
                body: .init(byteBuffer: ByteBuffer(string: "no such console file"))
            )
        }
        var headers: HTTPFields = [.contentType: type, .cacheControl: "no-cache"]
        headers[HTTPField.Name("Content-Security-Policy")!] = policy
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }
}
