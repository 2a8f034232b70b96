internal import Hummingbird
internal import HTTPTypes
internal import MinatoRooms
internal import MinatoCluster
internal import Foundation
internal import NIOCore
internal import Synchronization

/// WHIP (RFC 9725) and WHEP on the server's HTTP port: a broadcast tool publishes into a room,
/// and a player watches one member, each with one HTTP offer/answer and no SDK. The room work
/// is the room core's (`RoomService.ingest` / `egress` / `trickle` / `endMediaSession`); this
/// turns HTTP into those calls and their errors into the statuses the RFC names, each with a
/// one-line `text/plain` body.
///
///     POST   /whip/{room}[?name=…]        application/sdp offer -> 201 answer, Location, ETag, Link
///     POST   /whep/{room}/{member}         application/sdp recvonly offer -> 201 answer, …
///     PATCH  /whip|whep/session/{id}       application/trickle-ice-sdpfrag -> 204 (trickle), or 200
///                                          with the server's fragment and a new ETag (ICE restart)
///     DELETE /whip|whep/session/{id}       -> 200
///     OPTIONS on every one of these        preflight -> 204
///
/// Auth: with `auth.secret` set, the POST needs `Authorization: Bearer <token>`, the same JWT as
/// the WebSocket (publish or subscribe for that room and member name). The session URL is a
/// 128-bit secret and is what PATCH and DELETE need. Browser pages may call these from the
/// server's own origin or from one `server.allowedOrigins` lists (then with CORS headers); a
/// page of any other origin is answered 403 (`WhipWhepOrigins`).
struct WhipWhep: Sendable {
    let rooms: RoomService
    /// The answer's `Link: <url>; rel="ice-server"` headers: the TURN server (`media.turn.*`)
    /// with a credential minted for the session's member (RFC 9725 §4.6), then
    /// `media.clientIceServers`.
    let iceServers: IceServerConfiguration
    /// Ids for the sessions' one-request connections, from the server's connection counter.
    let nextConnectionId: @Sendable () -> UInt64
    /// Which pages may call these (`server.allowedOrigins`).
    let origins: OriginPolicy
    /// The largest offer accepted (`server.maxSdpBytes`); a larger body is 413 before it is read
    /// further.
    let maxOfferBytes: Int
    /// In a cluster: a POST for a room another node hosts answers 307 to that node (RFC 9725
    /// §4.5), and a WHIP room that does not exist yet is placed first.
    let cluster: ClusterNode?

    static let maxFragmentBytes = 16 * 1024
    static let linkField = HTTPField.Name("Link")

    func register(on router: Router<MinatoRequestContext>) {
        router.add(middleware: WhipWhepOrigins(policy: origins))
        router.post("/whip/:room") { r, c in await respond { try await post(r, c, kind: .ingest) } }
        router.post("/whep/:room/:member") { r, c in await respond { try await post(r, c, kind: .egress) } }
        for prefix in ["/whip", "/whep"] {
            router.patch("\(prefix)/session/:id") { r, c in await respond { try await patch(r, c) } }
            router.delete("\(prefix)/session/:id") { _, c in
                await respond {
                    try await rooms.endMediaSession(try param(c, "id"))
                    return Self.text(.ok, "session ended\n")
                }
            }
            router.on("\(prefix)/session/:id", method: .options) { _, _ in Self.preflight(allow: "PATCH, DELETE, OPTIONS") }
            for method in [HTTPRequest.Method.get, .put, .post] {
                router.on("\(prefix)/session/:id", method: method) { _, _ in
                    Self.text(.methodNotAllowed, "a session takes PATCH (trickle ICE) and DELETE\n", allow: "PATCH, DELETE, OPTIONS")
                }
            }
        }
        router.on("/whip/:room", method: .options) { _, _ in Self.preflight(allow: "POST, OPTIONS") }
        router.on("/whep/:room/:member", method: .options) { _, _ in Self.preflight(allow: "POST, OPTIONS") }
        for method in [HTTPRequest.Method.get, .put, .patch, .delete] {
            router.on("/whip/:room", method: method) { _, _ in
                Self.text(.methodNotAllowed, "WHIP takes POST with an SDP offer here\n", allow: "POST, OPTIONS")
            }
            router.on("/whep/:room/:member", method: method) { _, _ in
                Self.text(.methodNotAllowed, "WHEP takes POST with an SDP offer here\n", allow: "POST, OPTIONS")
            }
        }
    }

    private func post(_ request: Request, _ context: MinatoRequestContext, kind: MediaSessionRequest.Kind) async throws -> Response {
        if let cluster, let url = try await hostElsewhere(room: try param(context, "room"), kind: kind, cluster: cluster) {
            return Response(status: .temporaryRedirect, headers: [.location: url + request.uri.description])
        }
        try Self.requireContentType(request, "application/sdp")
        let offer = try await Self.body(request, max: maxOfferBytes, key: "server.maxSdpBytes")
        let room = try param(context, "room")
        let name = kind == .ingest ? request.uri.queryParameters["name"].map(String.init) : try param(context, "member")
        let header = request.headers[.authorization] ?? ""
        let token = header.hasPrefix("Bearer ") ? String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces) : nil
        let channel = ClientChannel(id: nextConnectionId(), send: { _ in })
        let r = MediaSessionRequest(kind: kind, roomName: room, memberName: name, offer: offer, token: token,
                                    clientAddress: context.clientAddress)
        let result = kind == .ingest ? try await rooms.ingest(r, from: channel) : try await rooms.egress(r, from: channel)
        var headers = HTTPFields()
        headers[.contentType] = "application/sdp"
        // In a cluster the session URL is absolute (this node's cluster.advertiseUrl): a client
        // that followed a 307 here from another node must send its PATCH and DELETE here too,
        // and some resolve a relative Location against the URL they first asked (libsoup does).
        headers[.location] = (cluster?.configuration.advertiseUrl ?? "") + (kind == .ingest ? "/whip" : "/whep")
            + "/session/" + result.sessionId
        headers[.eTag] = result.etag
        if let link = Self.linkField {
            // The credential names the member, never the session id (that is the session URL's
            // secret, and a TURN username is sent in the clear and logged by the TURN server).
            if let credential = iceServers.credential(for: result.memberId, now: Date()) {
                let turn = IceServer(urls: iceServers.turnUrls, username: credential.username, credential: credential.password)
                for value in turn.linkValues { headers.append(HTTPField(name: link, value: value)) }
            }
            for server in iceServers.staticUrls { headers.append(HTTPField(name: link, value: "<\(server)>; rel=\"ice-server\"")) }
        }
        return Response(status: .created, headers: headers, body: .init(byteBuffer: ByteBuffer(string: result.answer)))
    }

    /// The URL of the node that hosts (WHIP: or is now placed to host) room `room`, when that
    /// is not this node.
    private func hostElsewhere(room: String, kind: MediaSessionRequest.Kind, cluster: ClusterNode) async throws -> String? {
        let node: String?
        if kind == .ingest {
            node = try await cluster.place(name: room).get()
        } else {
            node = await cluster.nodeHolding(name: room)
        }
        guard let node, node != cluster.nodeId else { return nil }
        guard let url = await cluster.url(of: node) else {
            throw RoomError.serviceUnavailable("Node \(node), which hosts room '\(room.prefix(64))', is not in the cluster now.")
        }
        return url
    }

    private func patch(_ request: Request, _ context: MinatoRequestContext) async throws -> Response {
        let id = try param(context, "id")
        guard await rooms.mediaSessionExists(id) else {
            if await rooms.mediaSessionEndedRecently(id) { return Self.text(.noContent, "") }
            throw RoomError.sessionNotFound()
        }
        try Self.requireContentType(request, "application/trickle-ice-sdpfrag")
        let fragment = try await Self.body(request, max: Self.maxFragmentBytes)
        guard let restart = try await rooms.trickle(session: id, ifMatch: request.headers[.ifMatch], fragment: fragment) else {
            return Self.text(.noContent, "")
        }
        // RFC 9725 4.4.2: an ICE restart is answered 200 with the server's new fragment and ETag.
        var response = Self.text(.ok, restart.fragment)
        response.headers[.contentType] = "application/trickle-ice-sdpfrag"
        response.headers[.eTag] = restart.etag
        return response
    }

    // MARK: Responses

    /// Runs a handler; its errors become the statuses RFC 9725 names.
    private func respond(_ body: () async throws -> Response) async -> Response {
        do {
            return try await body()
        } catch let e as MediaSessionError {
            switch e {
            case .etagMismatch: return Self.text(.preconditionFailed, "If-Match does not name this session's ETag\n")
            case .etagMissing: return Self.text(.init(code: 428), "a PATCH needs If-Match with the session's ETag\n")
            }
        } catch let e as RoomError {
            var response = Self.text(Self.status(for: e), "\(e.name): \(e.detail)\n")
            // A rate or capacity limit: the client may try again (RFC 9110 10.2.3).
            if (e.name == "limitExceeded" && (e.code == 429 || e.code == 503)) || e.name == "serviceUnavailable" {
                response.headers[.retryAfter] = "1"
            }
            return response
        } catch {
            return Self.text(.internalServerError, "internal: the server could not complete this request\n")
        }
    }

    static func status(for e: RoomError) -> HTTPResponse.Status {
        switch e.name {
        case "codecNotSupported": return .unprocessableContent
        case "invalidSdp", "invalidParameter", "invalidParams": return .badRequest
        default: return (400...599).contains(e.code) ? .init(code: e.code) : .internalServerError
        }
    }

    static func text(_ status: HTTPResponse.Status, _ body: String, allow: String? = nil) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        if let allow { headers[.allow] = allow }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// A preflight's answer; `WhipWhepOrigins` adds the CORS headers for an allowed origin.
    static func preflight(allow: String) -> Response {
        var headers = HTTPFields()
        headers[.allow] = allow
        return Response(status: .noContent, headers: headers)
    }

    static func requireContentType(_ request: Request, _ wanted: String) throws {
        let type = (request.headers[.contentType] ?? "").lowercased()
        let bare = type.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard bare == wanted else {
            throw RoomError.unsupportedMediaType("The body must be sent as Content-Type: \(wanted); this one was '\(type.prefix(64))'.")
        }
    }

    /// The body as text; over `max` bytes (the limit `key` names) 413 `limitExceeded`.
    static func body(_ request: Request, max: Int, key: String? = nil) async throws -> String {
        let buffer: ByteBuffer
        do { buffer = try await request.body.collect(upTo: max) } catch {
            throw RoomError.sdpLimitExceeded("The body is larger than \(max) bytes" + (key.map { " (\($0))" } ?? "") + ".")
        }
        return String(buffer: buffer)
    }
}
