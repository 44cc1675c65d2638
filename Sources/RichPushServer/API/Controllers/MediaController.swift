import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import RichPushCore

/// Hosted media: `/media/{name}` for anyone (devices fetch it), `/v1/media` to upload and `/v1/media/check` to
/// preflight, with a `send` key of any app.
struct MediaController: APIController {
    /// Preflight, hosting and charts; nil turns media checks and `/media` off.
    let media: MediaService?
    let quotas: Quotas
    let maxBodyBytes: Int

    /// `/media/{name}`: no key, no database.
    func addPublicRoutes(to router: Router<APIRequestContext>) {
        router.get("/media/:name") { request, context in await serveMedia(request, context, head: false) }
        router.head("/media/:name") { request, context in await serveMedia(request, context, head: true) }
    }

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        group.post("media", use: uploadMedia)
        group.post("media/check", use: checkMedia)
    }

    /// `/media/<hash>.<ext>`: public, immutable, with the true Content-Type, a strong ETag, Range and HEAD.
    /// (Every request, pipelined or not, is answered by ``MediaFastPath`` before it reaches the router; this is the
    /// way when that could not be put in place, counted and logged. From the memory cache when the file is in it,
    /// otherwise from disk: HEAD, 304 and 416 read nothing, and the bytes are read in chunks of
    /// ``streamChunk`` as the client takes them, so an answer holds at most one chunk whatever the file's size.)
    func serveMedia(_ request: Request, _ context: APIRequestContext, head: Bool) async -> Response {
        guard let media, let name = context.parameters.get("name") else {
            return APIError(.notFound, "no such media").response
        }
        // Stored by another node: fetched to this node's disk once, then served from there.
        _ = await media.store.materialize(name)
        if let (buffer, type) = media.store.cached(name) {
            let (response, body) = Self.mediaResponse(
                buffer,
                name: name,
                type: type,
                head: head,
                headers: request.headers
            )
            return Response(
                status: response.status,
                headers: response.headerFields,
                body: body.map { .init(byteBuffer: $0) } ?? .init()
            )
        }
        guard let file = media.store.file(name) else { return Self.notFoundResponse(head: head) }
        let (response, range) = Self.mediaAnswer(name: name, type: file.type, size: file.size, headers: request.headers)
        guard let range, !head else { return Response(status: response.status, headers: response.headerFields) }
        // The first chunk is read before answering: a file removed between the stat and the read (a sweep) is
        // answered 404, as if it had never been.
        let first = range.lowerBound...min(range.upperBound, range.lowerBound + Self.streamChunk - 1)
        guard let bytes = media.store.read(name, range: first) else { return Self.notFoundResponse(head: head) }
        if first == range {
            return Response(status: response.status, headers: response.headerFields, body: .init(byteBuffer: bytes))
        }
        let store = media.store
        let body = ResponseBody(contentLength: range.count) { writer in
            try await writer.write(bytes)
            var offset = first.upperBound + 1
            while offset <= range.upperBound {
                let chunk = offset...min(range.upperBound, offset + Self.streamChunk - 1)
                // Gone mid-answer (a sweep): the answer cannot be taken back, so the connection is dropped.
                guard let more = store.read(name, range: chunk) else { throw MediaGone() }
                try await writer.write(more)
                offset = chunk.upperBound + 1
            }
            try await writer.finish(nil)
        }
        return Response(status: response.status, headers: response.headerFields, body: body)
    }

    /// The most bytes of a file an answer through the router holds at once.
    static let streamChunk = 1 << 20

    struct MediaGone: Error {}

    static func notFoundResponse(head: Bool) -> Response {
        let (response, body) = notFound(head: head)
        return Response(
            status: response.status,
            headers: response.headerFields,
            body: .init(byteBuffer: body ?? .init())
        )
    }

    /// The answer for stored bytes: status, headers and body (nil for none).
    static func mediaResponse(
        _ buffer: ByteBuffer,
        name: String,
        type: RichPushCore.MediaType,
        head: Bool,
        headers requestHeaders: HTTPFields
    ) -> (HTTPResponse, ByteBuffer?) {
        let (response, range) = mediaAnswer(name: name, type: type, size: buffer.readableBytes, headers: requestHeaders)
        guard let range, !head else { return (response, nil) }
        return (response, buffer.getSlice(at: buffer.readerIndex + range.lowerBound, length: range.count) ?? buffer)
    }

    static func notFound(head: Bool) -> (HTTPResponse, ByteBuffer?) {
        let body = ByteBuffer(
            bytes: (["error": ["code": "not-found", "message": "no such media"]] as JSONValue).serialized()
        )
        var headers: HTTPFields = [.contentType: "application/json", .contentLength: String(body.readableBytes)]
        addMediaSafetyHeaders(&headers)
        return (HTTPResponse(status: .notFound, headerFields: headers), head ? nil : body)
    }

    /// On every answer from `/media/`: the type is the one we decided (no sniffing by the browser), and a page
    /// opened from there runs in a sandbox without our origin, so a file cannot run script against the API or
    /// the console.
    static func addMediaSafetyHeaders(_ headers: inout HTTPFields) {
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Content-Security-Policy")!] = "sandbox; default-src 'none'"
    }

    /// Status and headers for stored media of this size, and the bytes to send (nil: none).
    static func mediaAnswer(
        name: String,
        type: RichPushCore.MediaType,
        size: Int,
        headers requestHeaders: HTTPFields
    ) -> (HTTPResponse, ClosedRange<Int>?) {
        let etag = "\"" + name.prefix(64) + "\""
        var headers: HTTPFields = [
            .contentType: type.mimeType, .eTag: etag, .cacheControl: "public, max-age=31536000, immutable",
            .acceptRanges: "bytes",
        ]
        addMediaSafetyHeaders(&headers)
        if let match = requestHeaders[.ifNoneMatch],
            match == "*"
                || match.split(separator: ",").contains(where: {
                    $0.trimmingCharacters(in: .whitespaces) == etag
                        || $0.trimmingCharacters(in: .whitespaces) == "W/" + etag
                })
        {
            return (HTTPResponse(status: .notModified, headerFields: headers), nil)
        }
        var range: ClosedRange<Int>?
        if let value = requestHeaders[.range], requestHeaders[.ifRange].map({ $0 == etag }) ?? true {
            switch byteRange(value, size: size) {
            case .whole: break
            case .part(let r): range = r
            case .unsatisfiable:
                headers[.contentRange] = "bytes */\(size)"
                headers[.contentLength] = "0"
                return (HTTPResponse(status: .rangeNotSatisfiable, headerFields: headers), nil)
            }
        }
        if let r = range {
            headers[.contentRange] = "bytes \(r.lowerBound)-\(r.upperBound)/\(size)"
            headers[.contentLength] = String(r.count)
            return (HTTPResponse(status: .partialContent, headerFields: headers), r)
        }
        headers[.contentLength] = String(size)
        return (HTTPResponse(status: .ok, headerFields: headers), size > 0 ? 0...(size - 1) : nil)
    }

    enum ByteRange: Equatable {
        case whole
        case part(ClosedRange<Int>)
        case unsatisfiable
    }

    /// One `bytes=` range (RFC 9110): `a-b`, `a-`, `-n`. Several ranges, or another unit, get the whole body.
    static func byteRange(_ header: String, size: Int) -> ByteRange {
        let h = header.trimmingCharacters(in: .whitespaces)
        guard h.lowercased().hasPrefix("bytes="), !h.contains(",") else { return .whole }
        let spec = h.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard parts.count == 2 else { return .whole }
        if parts[0].isEmpty {
            guard let n = Int(parts[1]), n > 0, size > 0 else { return .unsatisfiable }
            return .part(max(0, size - n)...(size - 1))
        }
        guard let start = Int(parts[0]), start >= 0 else { return .whole }
        guard start < size else { return .unsatisfiable }
        if parts[1].isEmpty { return .part(start...(size - 1)) }
        guard let end = Int(parts[1]), end >= start else { return .whole }
        return .part(start...min(end, size - 1))
    }

    /// `POST /v1/media`: the body is the file; answered with its hosted URL and what each platform makes of it.
    func uploadMedia(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try context.requireAnyKey(.send)
        guard let media else { throw APIError(.notFound, "media hosting is off") }
        // Streamed to disk as it arrives (hashed on the way): a 50 MB upload costs one read's worth of memory.
        let upload = try media.store.beginUpload()
        // The day's bytes are counted in the database as they arrive (a step at a time), on every node alike.
        let charge = quotas.upload(app: app)
        let item: MediaStore.Item
        var check = MediaCheck(url: "")
        do {
            for try await chunk in request.body {
                guard upload.size + chunk.readableBytes <= MediaRules.largestAppleLimit else {
                    throw APIError(
                        .bodyTooLarge,
                        "media is at most \(MediaRules.largestAppleLimit) bytes (Apple's video limit)"
                    )
                }
                try await charge.add(chunk.readableBytes)
                try upload.append(chunk)
            }
            guard upload.size > 0 else {
                throw APIError(
                    .invalid,
                    "the body is empty",
                    issues: [.init(path: "body", rule: "required", message: "send the file as the body")]
                )
            }
            guard let type = MediaSniffer.sniff(upload.prefix), type.kind != nil else {
                throw APIError(
                    .invalid,
                    "not media",
                    issues: [
                        .init(
                            path: "body",
                            rule: "unknown-type",
                            message: "the bytes are not a recognisable image, audio or video file"
                        )
                    ]
                )
            }
            do {
                item = try media.store.finish(upload, type: type)
                try await media.store.publish(item)
            } catch let refused as MediaStore.NotHostable {
                throw APIError(
                    .invalid,
                    "not a type any platform attaches",
                    issues: [
                        .init(path: "body", rule: "not-attachable", message: refused.description)
                    ]
                )
            }
            check.type = type
            check.bytes = upload.size
            media.judge(&check)
        } catch {
            upload.discard()
            await charge.close()
            throw error
        }
        await charge.close()
        check.url = media.url(for: item)
        var o = check.json.objectValue ?? [:]
        o["name"] = .string(item.name)
        return Response.json(201, .object(o))
    }

    /// `POST /v1/media/check`: `{"url": …, "kind": …}` or `{"media": [ {url, kind}… ]}`; one result per URL.
    func checkMedia(_ request: Request, _ context: APIRequestContext) async throws -> MediaCheckReply {
        let app = try context.requireAnyKey(.send)
        guard let media else { throw APIError(.notFound, "media checks are off") }
        let items = try MediaCheckBody.decode(try await bodyJSON(request)).items
        // Only what must be fetched takes a place: hosted media and URLs with a kept verdict take none.
        let fetches = items.filter { media.needsFetch($0.0, rehost: .never) }.count
        let results = try await quotas.fetching(app: app, count: fetches) {
            await withTaskGroup(of: (Int, MediaCheck).self) { group in
                for (i, (u, k)) in items.enumerated() { group.addTask { (i, await media.check(u, kind: k)) } }
                var out = [JSONValue](repeating: .null, count: items.count)
                for await (i, r) in group { out[i] = r.json }
                return out
            }
        }
        let ok = results.allSatisfy { $0["ok"] == true }
        return MediaCheckReply(ok: ok, results: results)
    }
}
