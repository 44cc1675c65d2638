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

    static let files: [String: ByteBuffer] = {
        guard let folder = Bundle.module.resourceURL?.appendingPathComponent("console"),
            // The package ships the folder; without it every console file answers 404 (the console tests would fail).
            let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path)
        else { return [:] }
        var out: [String: ByteBuffer] = [:]
        for name in names where types[(name as NSString).pathExtension] != nil {
            if let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) {
                out[name] = ByteBuffer(bytes: data)
            }
        }
        return out
    }()

    /// The web SDK's files (`Resources/sdk/web`): the page script and the service worker.
    static let sdkFiles: [String: ByteBuffer] = {
        guard let folder = Bundle.module.resourceURL?.appendingPathComponent("sdk/web"),
            let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path)
        else { return [:] }
        var out: [String: ByteBuffer] = [:]
        for name in names where name.hasSuffix(".js") {
            if let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) {
                out[name] = ByteBuffer(bytes: data)
            }
        }
        return out
    }()

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
        var headers: HTTPFields = [.contentType: "text/javascript; charset=utf-8", .cacheControl: "max-age=300"]
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
