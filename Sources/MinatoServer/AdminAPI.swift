internal import Hummingbird
internal import MinatoRooms
internal import MinatoCluster
internal import Foundation

/// The REST admin API under `/v1` (docs/openapi.yaml). Every response is JSON; errors are
/// `{"error":{"name","detail"}}` with the protocol's error names and HTTP statuses.
/// Access: `Authorization: Bearer <admin.apiSecret>` or a client token whose scope has
/// `admin: true`. With neither secret configured the API is open only on a loopback listener,
/// and then only to requests whose `Host` is a loopback name (a web page the operator visits
/// cannot reach it by DNS rebinding). Everywhere: a request from a browser page of another
/// origin is refused unless `admin.corsOrigins` names it, and a body must be JSON
/// (`Content-Type: application/json`), so no cross-site "simple" request changes anything.
struct AdminAPI: Sendable {
    let rooms: RoomService
    let apiSecret: String
    let authority: TokenAuthority?
    let access: AdminAccess
    let listenHost: String
    let corsOrigins: Set<String>
    let openAPIDocument: String?
    /// In a cluster: the listing covers every node, a room's own routes answer 307 to the node
    /// hosting it, and `/v1/nodes` lists the nodes.
    let cluster: ClusterNode?
    /// Starts draining this node (then it exits when empty; `MinatoServer.drainAndExit`).
    let drain: @Sendable (ClusterNode) -> Void

    func register(on router: Router<MinatoRequestContext>) {
        if !corsOrigins.isEmpty { router.add(middleware: AdminCORS(origins: corsOrigins)) }
        if let doc = openAPIDocument {
            router.get("/v1/openapi.yaml") { _, _ in
                Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(string: doc)))
            }
        }
        let v1 = router.group("/v1")
        if let cluster { v1.add(middleware: AdminClusterRedirect(cluster: cluster)) }
        v1.get("/rooms") { r, _ in try await guarded(r) { try await listRooms() } }
        v1.get("/nodes") { r, _ in
            try await guarded(r) {
                guard let cluster else { throw Self.noCluster }
                return try await cluster.nodesJSON().get()
            }
        }
        v1.post("/nodes/:nodeId/drain") { r, c in
            try await guarded(r) {
                guard let cluster else { throw Self.noCluster }
                let node = try param(c, "nodeId")
                guard node == cluster.nodeId else {
                    guard let url = await cluster.url(of: node) else {
                        throw RoomError(code: 404, name: "notFound", detail: "No live node '\(node.prefix(40))' in the cluster.")
                    }
                    throw AdminRedirect(location: url + r.uri.description)
                }
                drain(cluster)
                return ["id": .string(cluster.nodeId), "state": "draining"]
            }
        }
        v1.post("/rooms") { r, c in
            try await guarded(r, status: .created) {
                let body = try await jsonBody(r, c)
                if let cluster, let name = try string(body, "name") {
                    // A named room goes to the node that holds (or now reserves) the name.
                    let node = try await cluster.place(name: name).get()
                    if node != cluster.nodeId, let url = await cluster.url(of: node) {
                        throw AdminRedirect(location: url + "/v1/rooms")
                    }
                }
                return try await rooms.adminCreateRoom(name: try string(body, "name"), metadata: try string(body, "metadata"),
                                                       password: try string(body, "password"),
                                                       keepWhenEmpty: try bool(body, "keepWhenEmpty") ?? false)
            }
        }
        v1.get("/rooms/:roomId") { r, c in try await guarded(r) { try await rooms.adminGetRoom(try param(c, "roomId")) } }
        v1.patch("/rooms/:roomId") { r, c in
            try await guarded(r) {
                let body = try await jsonBody(r, c)
                guard let metadata = try string(body, "metadata") else { throw RoomError.invalidParameter("The body needs \"metadata\" (a string).") }
                return try await rooms.adminUpdateRoomMetadata(try param(c, "roomId"), metadata: metadata)
            }
        }
        v1.delete("/rooms/:roomId") { r, c in try await guarded(r) { try await rooms.adminCloseRoom(try param(c, "roomId")) } }
        v1.get("/rooms/:roomId/stats") { r, c in try await guarded(r) { try await rooms.adminRoomStats(try param(c, "roomId")) } }
        v1.get("/rooms/:roomId/members") { r, c in try await guarded(r) { try await rooms.adminMembers(try param(c, "roomId")) } }
        v1.post("/rooms/:roomId/members/evict") { r, c in
            try await guarded(r) {
                let body = try await jsonBody(r, c)
                guard let name = try string(body, "name") else { throw RoomError.invalidParameter("The body needs \"name\" (a string).") }
                return try await rooms.adminEvict(try param(c, "roomId"), name: name)
            }
        }
        v1.get("/rooms/:roomId/members/:memberId") { r, c in
            try await guarded(r) { try await rooms.adminMember(try param(c, "roomId"), try param(c, "memberId")) }
        }
        v1.delete("/rooms/:roomId/members/:memberId") { r, c in
            try await guarded(r) { try await rooms.adminKick(try param(c, "roomId"), try param(c, "memberId")) }
        }
        v1.get("/rooms/:roomId/publications") { r, c in try await guarded(r) { try await rooms.adminPublications(try param(c, "roomId")) } }
        v1.delete("/rooms/:roomId/publications/:publicationId") { r, c in
            try await guarded(r) { try await rooms.adminUnpublish(try param(c, "roomId"), try param(c, "publicationId")) }
        }
        for (path, enabled) in [("enable", true), ("disable", false)] {
            v1.post("/rooms/:roomId/publications/:publicationId/\(path)") { r, c in
                try await guarded(r) {
                    try await rooms.adminSetPublicationEnabled(try param(c, "roomId"), try param(c, "publicationId"), enabled: enabled)
                }
            }
        }
        v1.post("/rooms/:roomId/recordings") { r, c in
            try await guarded(r, status: .created) {
                let body = try await jsonBody(r, c)
                var ids: [String]?
                if let v = body["publicationIds"] {
                    guard case .array(let list) = v, list.count <= 2, let names = Optional(list.compactMap(\.stringValue)),
                          names.count == list.count else {
                        throw RoomError.invalidParameter("\"publicationIds\" must be an array of at most 2 strings.")
                    }
                    ids = names
                }
                return try await rooms.adminStartRecording(try param(c, "roomId"), memberId: try string(body, "memberId"), publicationIds: ids,
                                                           encodingId: try string(body, "encodingId"))
            }
        }
        v1.get("/rooms/:roomId/recordings") { r, c in try await guarded(r) { try await rooms.adminRecordings(try param(c, "roomId")) } }
        v1.get("/rooms/:roomId/recordings/:recordingId") { r, c in
            try await guarded(r) { try await rooms.adminRecording(try param(c, "roomId"), try param(c, "recordingId")) }
        }
        v1.delete("/rooms/:roomId/recordings/:recordingId") { r, c in
            try await guarded(r) { try await rooms.adminStopRecording(try param(c, "roomId"), try param(c, "recordingId")) }
        }
        v1.post("/rooms/:roomId/plain-transports") { r, c in
            try await guarded(r, status: .created) {
                let body = try await jsonBody(r, c)
                return try await rooms.adminCreatePlainEgress(try param(c, "roomId"), publicationId: try string(body, "publicationId"),
                                                              address: try string(body, "address"), rtpPort: try int(body, "rtpPort"),
                                                              rtcpPort: try int(body, "rtcpPort"), payloadType: try int(body, "payloadType"),
                                                              srtp: body["srtp"])
            }
        }
        v1.get("/rooms/:roomId/plain-transports") { r, c in try await guarded(r) { try await rooms.adminPlainEgresses(try param(c, "roomId")) } }
        v1.delete("/rooms/:roomId/plain-transports/:plainTransportId") { r, c in
            try await guarded(r) { try await rooms.adminDeletePlainEgress(try param(c, "roomId"), try param(c, "plainTransportId")) }
        }
        v1.post("/rooms/:roomId/plain-publications") { r, c in
            try await guarded(r, status: .created) {
                let body = try await jsonBody(r, c)
                let request = PlainPublicationRequest(memberName: try string(body, "memberName"), mimeType: try string(body, "mimeType"),
                                                      payloadType: try int(body, "payloadType"), ssrc: try int(body, "ssrc"),
                                                      address: try string(body, "address"), fmtp: try string(body, "fmtp"), srtp: body["srtp"])
                return try await rooms.adminCreatePlainIngress(try param(c, "roomId"), request)
            }
        }
        v1.get("/rooms/:roomId/plain-publications") { r, c in try await guarded(r) { try await rooms.adminPlainIngresses(try param(c, "roomId")) } }
        v1.delete("/rooms/:roomId/plain-publications/:plainPublicationId") { r, c in
            try await guarded(r) { try await rooms.adminDeletePlainIngress(try param(c, "roomId"), try param(c, "plainPublicationId")) }
        }
        v1.post("/rooms/:roomId/playbacks") { r, c in
            try await guarded(r, status: .created) {
                let body = try await jsonBody(r, c)
                return try await rooms.adminStartPlayback(try param(c, "roomId"), recordingId: try string(body, "recordingId"),
                                                          file: try string(body, "file"), memberName: try string(body, "memberName"), startDelayMs: try int(body, "startDelayMs"))
            }
        }
        v1.get("/rooms/:roomId/playbacks") { r, c in try await guarded(r) { try await rooms.adminPlaybacks(try param(c, "roomId")) } }
        v1.delete("/rooms/:roomId/playbacks/:playbackId") { r, c in
            try await guarded(r) { try await rooms.adminStopPlayback(try param(c, "roomId"), try param(c, "playbackId")) }
        }
        v1.get("/recordings") { r, _ in try await guarded(r) { try await rooms.adminRecordings(nil) } }
        v1.get("/rooms/:roomId/subscriptions") { r, c in try await guarded(r) { try await rooms.adminSubscriptions(try param(c, "roomId")) } }
        v1.delete("/rooms/:roomId/subscriptions/:subscriptionId") { r, c in
            try await guarded(r) { try await rooms.adminCancelSubscription(try param(c, "roomId"), try param(c, "subscriptionId")) }
        }
    }

    /// Checks admin access, runs `body`, and turns its result or `RoomError` into JSON.
    func guarded(_ request: Request, status: HTTPResponse.Status = .ok,
                 _ body: () async throws -> JSONValue) async throws -> Response {
        if let denied = await checkAccess(request) { return Self.error(denied) }
        do {
            return Self.json(try await body(), status: status)
        } catch let e as RoomError {
            return Self.error(e)
        } catch let r as AdminRedirect {
            return Response(status: .temporaryRedirect, headers: [.location: r.location])
        }
    }

    /// `/v1/nodes` on a server that is not part of a cluster: there are no nodes to find.
    static let noCluster = RoomError(code: 404, name: "notFound", detail: "This server is not part of a cluster (cluster.redisUrl is empty).")

    /// Every room: this node's, and in a cluster every other live node's, each with `nodeId`.
    func listRooms() async throws -> JSONValue {
        let local = await rooms.adminListRooms()
        guard let cluster else { return local }
        var all = (local["rooms"]?.arrayValue ?? []).map { $0.with("nodeId", .string(cluster.nodeId)) }
        var unreachable: [String] = []
        for node in await cluster.otherLiveNodes() {
            switch await cluster.call(node, op: "adminListRooms") {
            case .success(let result): all += result["rooms"]?.arrayValue ?? []
            case .failure: unreachable.append(node)
            }
        }
        if !unreachable.isEmpty {
            // A node that does not answer (dying, or cut off): its rooms as the store records them.
            let recorded = try await cluster.recordedRooms().get()
            for r in recorded where unreachable.contains(r.nodeId) {
                all.append(["id": .string(r.id), "name": r.name.map { .string($0) } ?? .null, "nodeId": .string(r.nodeId),
                            "nodeReachable": false])
            }
        }
        return ["rooms": .array(all)]
    }

    func checkAccess(_ request: Request) async -> RoomError? {
        if let denied = checkOrigin(request) { return denied }
        let header = request.headers[.authorization] ?? ""
        let bearer = header.hasPrefix("Bearer ") ? String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces) : nil
        switch access {
        case .closed:
            return .invalidAuthToken(
                "The admin API is closed: set admin.apiSecret (or auth.secret and use an admin token) to use it on a non-loopback address.")
        case .openOnLoopback:
            let host = Self.hostName(request.head.authority ?? "")
            guard Self.loopbackNames.contains(host) || host == listenHost else {
                return .insufficientPermissions(
                    "The admin API is open without a secret only to requests whose Host is \(listenHost) or localhost; this one named '\(host.prefix(64))'. Set admin.apiSecret to use other names.")
            }
            return nil
        case .secret, .adminTokens: break
        }
        guard let bearer, !bearer.isEmpty else {
            return .invalidAuthToken("The admin API needs 'Authorization: Bearer <admin.apiSecret or an admin token>'.")
        }
        if !apiSecret.isEmpty && constantTimeEquals(bearer, apiSecret) { return nil }
        if let authority, bearer.split(separator: ".").count == 3 {
            switch await authority.verify(bearer) {
            case .success(let grant):
                return grant.admin ? nil : .insufficientPermissions("This token's scope has no admin:true; it cannot use the admin API.")
            case .failure(let e): return e
            }
        }
        return .invalidAuthToken("The bearer credential is neither the admin API secret nor a valid token.")
    }

    static let loopbackNames: Set<String> = ["localhost", "127.0.0.1", "::1"]

    /// The host of a `Host` value, without its port (`[::1]:7880` -> `::1`), lowercased.
    static func hostName(_ authority: String) -> String {
        let a = authority.lowercased()
        if a.hasPrefix("["), let close = a.firstIndex(of: "]") { return String(a[a.index(after: a.startIndex)..<close]) }
        if let colon = a.lastIndex(of: ":") { return String(a[..<colon]) }
        return a
    }

    /// A request from a page of another origin (browsers send `Origin`) is refused unless
    /// `admin.corsOrigins` names it; same-origin requests (the server's own pages) pass.
    func checkOrigin(_ request: Request) -> RoomError? {
        let origin = request.headers[.origin]
        guard OriginPolicy(listed: corsOrigins).verdict(origin: origin, host: request.head.authority) == .refused else { return nil }
        return .insufficientPermissions(
            "The admin API does not accept requests from pages of origin '\((origin ?? "").prefix(100))'; list it in admin.corsOrigins to allow it.")
    }

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(string: value.serialized())))
    }

    static func error(_ e: RoomError) -> Response {
        let code = (400...599).contains(e.code) ? e.code : 400
        return json(["error": ["name": .string(e.name), "detail": .string(e.detail)]], status: .init(code: code))
    }
}

/// A path parameter of the route (`:name`); used by every HTTP front door here.
func param(_ context: MinatoRequestContext, _ name: String) throws -> String {
    guard let v = context.parameters.get(name) else { throw RoomError.invalidParameter("The path lacks {\(name)}.") }
    return v
}

private func jsonBody(_ request: Request, _ context: MinatoRequestContext) async throws -> [String: JSONValue] {
    let buffer: ByteBuffer
    do { buffer = try await request.body.collect(upTo: 64 * 1024) } catch {
        throw RoomError.invalidParameter("The request body is larger than 64 KiB.")
    }
    if buffer.readableBytes == 0 { return [:] }
    let type = request.headers[.contentType]?.lowercased() ?? ""
    guard type == "application/json" || type.hasPrefix("application/json;") else {
        throw RoomError.unsupportedMediaType(
            "A request body must be JSON sent with 'Content-Type: application/json'; this one was '\(type.prefix(64))'.")
    }
    guard let value = try? JSONValue.parse(String(buffer: buffer)), case .object(let o) = value else {
        throw RoomError.invalidParameter("The request body must be a JSON object.")
    }
    return o
}

private func bool(_ body: [String: JSONValue], _ key: String) throws -> Bool? {
    guard let v = body[key] else { return nil }
    guard let b = v.boolValue else { throw RoomError.invalidParameter("\"\(key)\" must be true or false.") }
    return b
}

private func int(_ body: [String: JSONValue], _ key: String) throws -> Int? {
    guard let v = body[key] else { return nil }
    guard let i = v.intValue else { throw RoomError.invalidParameter("\"\(key)\" must be an integer.") }
    return i
}

private func string(_ body: [String: JSONValue], _ key: String) throws -> String? {
    guard let v = body[key] else { return nil }
    guard let s = v.stringValue else { throw RoomError.invalidParameter("\"\(key)\" must be a string.") }
    return s
}

/// A redirect to the node that serves an admin request.
struct AdminRedirect: Error { let location: String }

/// In a cluster, a request for one room (`/v1/rooms/{id}…`) made on a node that does not host
/// it answers `307 Temporary Redirect` to the same path on the node that does (the node is
/// named by the id's prefix); a client that follows redirects (curl -L) gets its answer there.
struct AdminClusterRedirect: RouterMiddleware {
    typealias Context = MinatoRequestContext
    let cluster: ClusterNode

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let parts = request.uri.path.split(separator: "/")
        guard parts.count >= 3, parts[0] == "v1", parts[1] == "rooms",
              let node = ClusterConfiguration.nodeId(of: String(parts[2])), node != cluster.nodeId else {
            return try await next(request, context)
        }
        guard let url = await cluster.url(of: node) else {
            return AdminAPI.error(.roomNotFound("with id '\(parts[2].prefix(80))': node \(node) is not in the cluster"))
        }
        return Response(status: .temporaryRedirect, headers: [.location: url + request.uri.description])
    }
}

/// CORS for `/v1` when `admin.corsOrigins` names origins: answers their preflight requests and
/// marks responses to them. Other origins get no CORS headers (and `checkOrigin` refuses them).
struct AdminCORS: RouterMiddleware {
    typealias Context = MinatoRequestContext
    let origins: Set<String>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.uri.path.hasPrefix("/v1/"), let origin = request.headers[.origin], OriginPolicy(listed: origins).isListed(origin) else {
            return try await next(request, context)
        }
        if request.method == .options {
            return Response(status: .noContent, headers: [
                .accessControlAllowOrigin: origin, .accessControlAllowMethods: "GET, POST, PATCH, DELETE",
                .accessControlAllowHeaders: "Authorization, Content-Type", .accessControlMaxAge: "600", .vary: "Origin"])
        }
        var response = try await next(request, context)
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.vary] = "Origin"
        return response
    }
}
