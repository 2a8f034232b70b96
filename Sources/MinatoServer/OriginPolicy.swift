internal import Hummingbird
internal import HTTPTypes
internal import NIOCore

/// Which web pages may use an endpoint, judged by the `Origin` header browsers send with
/// cross-origin requests, WebSocket handshakes and every POST: a request with no `Origin` (a
/// non-browser client: OBS, GStreamer, aiortc) or a `ws:`/`wss:` one (no page has that origin;
/// the Swift SDK's WebSocket client sends one), a request from the server's own
/// origin (`http://` or `https://` followed by the request's `Host`, i.e. the demo page, the
/// WHEP player and the SDK served here, also behind a TLS proxy), and a request from a listed
/// origin pass; any other is refused. `/ws` and WHIP/WHEP use it with `server.allowedOrigins`,
/// the admin API with `admin.corsOrigins`. A value; safe on any thread.
struct OriginPolicy: Sendable {
    /// The configured origins (`scheme://host[:port]`, lowercased by the configuration parser).
    let listed: Set<String>

    enum Verdict: Equatable, Sendable {
        /// No `Origin` header: not a browser page's cross-origin request.
        case noOrigin
        /// The page is one of this server's own.
        case sameOrigin
        /// Another origin that the configuration lists: allowed, and answered with CORS headers.
        case listed
        /// Any other origin (also `null`, sent by sandboxed frames and `file:` pages).
        case refused
    }

    /// The verdict for a request with `origin` (the `Origin` header) sent to `host` (its `Host`
    /// header, with the port).
    func verdict(origin: String?, host: String?) -> Verdict {
        guard let origin else { return .noOrigin }
        let o = origin.lowercased()
        // A page's origin is always http(s) (or `null`): a `ws:`/`wss:` Origin comes from a
        // WebSocket library, not a browser (Hummingbird's client, which the Swift SDK uses,
        // sends `ws://HOST`), so it is judged like no Origin at all.
        if o.hasPrefix("ws://") || o.hasPrefix("wss://") { return .noOrigin }
        if let host, !host.isEmpty {
            let h = host.lowercased()
            if o == "http://" + h || o == "https://" + h { return .sameOrigin }
        }
        return listed.contains(o) ? .listed : .refused
    }

    /// `origin` is one of the configured origins (those get CORS headers).
    func isListed(_ origin: String) -> Bool { listed.contains(origin.lowercased()) }
}

/// `server.allowedOrigins` on WHIP and WHEP (`/whip/…`, `/whep/…`): a request from a page of an
/// origin the policy refuses is answered 403 before its route runs (so it creates nothing); a
/// request from a listed origin gets the CORS headers (its origin echoed in
/// `Access-Control-Allow-Origin`, the answer's headers exposed, and on a preflight the methods
/// and request headers the route takes). Same-origin pages and non-browser clients need no
/// CORS headers and get none. Every response says `Vary: Origin`.
struct WhipWhepOrigins<Context: RequestContext>: RouterMiddleware {
    let policy: OriginPolicy

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path.hasPrefix("/whip/") || path.hasPrefix("/whep/") else { return try await next(request, context) }
        let origin = request.headers[.origin]
        let verdict = policy.verdict(origin: origin, host: request.head.authority)
        if verdict == .refused {
            let shown = (origin ?? "").prefix(100)
            return Response(status: .forbidden, headers: [.contentType: "text/plain; charset=utf-8", .vary: "Origin"],
                            body: .init(byteBuffer: ByteBuffer(string:
                                "originNotAllowed: this server does not take WHIP/WHEP requests from pages of origin '\(shown)'; list it in server.allowedOrigins to allow it\n")))
        }
        var response = try await next(request, context)
        response.headers[.vary] = "Origin"
        guard verdict == .listed, let origin else { return response }
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.accessControlExposeHeaders] = "Location, ETag, Link"
        if request.method == .options, let allow = response.headers[.allow] {
            response.headers[.accessControlAllowMethods] = allow
            response.headers[.accessControlAllowHeaders] = "Authorization, Content-Type, If-Match"
            response.headers[.accessControlMaxAge] = "600"
        }
        return response
    }
}
