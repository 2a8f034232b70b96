/// A signaling error: a stable name a program can switch on and a sentence a person can act on
/// (docs/protocol.md "Errors"). A request that fails with one of these changed nothing.
public struct RoomError: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: Int
    public let name: String
    public let detail: String

    public init(code: Int, name: String, detail: String) {
        self.code = code; self.name = name; self.detail = detail
    }
    public var description: String { "\(name): \(detail)" }

    // JSON-RPC protocol faults
    public static func parseError(_ d: String) -> RoomError { .init(code: -32700, name: "parseError", detail: d) }
    public static func invalidRequest(_ d: String) -> RoomError { .init(code: -32600, name: "invalidRequest", detail: d) }
    public static func methodNotFound(_ m: String) -> RoomError {
        .init(code: -32601, name: "methodNotFound", detail: "There is no method '\(m)'; see the protocol document for the list.")
    }
    public static func invalidParams(_ d: String) -> RoomError { .init(code: -32602, name: "invalidParams", detail: d) }
    // Domain errors
    public static func invalidParameter(_ d: String) -> RoomError { .init(code: 400, name: "invalidParameter", detail: d) }
    public static func invalidSdp(_ d: String) -> RoomError { .init(code: 400, name: "invalidSdp", detail: d) }
    public static func invalidAuthToken(_ d: String) -> RoomError { .init(code: 401, name: "invalidAuthToken", detail: d) }
    public static func authTokenExpired(_ d: String) -> RoomError { .init(code: 401, name: "authTokenExpired", detail: d) }
    public static func insufficientPermissions(_ d: String) -> RoomError { .init(code: 403, name: "insufficientPermissions", detail: d) }
    public static func wrongPassword() -> RoomError {
        .init(code: 403, name: "wrongPassword", detail: "The room's password does not match; ask its creator for it.")
    }
    public static func roomNotFound(_ what: String) -> RoomError { .init(code: 404, name: "roomNotFound", detail: "There is no room \(what).") }
    public static func memberNotFound(_ id: String) -> RoomError { .init(code: 404, name: "memberNotFound", detail: "There is no member '\(id)'; it may have left or expired.") }
    public static func publicationNotFound(_ id: String) -> RoomError {
        .init(code: 404, name: "publicationNotFound", detail: "There is no publication '\(id)' in this room; it may have been unpublished.")
    }
    public static func sessionNotFound() -> RoomError {
        .init(code: 404, name: "sessionNotFound", detail: "There is no such WHIP/WHEP session; it may have ended.")
    }
    public static func subscriptionNotFound(_ id: String) -> RoomError {
        .init(code: 404, name: "subscriptionNotFound", detail: "There is no subscription '\(id)' of this member.")
    }
    public static func roomNameDuplicated(_ n: String) -> RoomError {
        .init(code: 409, name: "roomNameDuplicated", detail: "A room named '\(n)' exists already; use findRoom or findOrCreateRoom.")
    }
    public static func memberNameDuplicated(_ n: String) -> RoomError {
        .init(code: 409, name: "memberNameDuplicated",
              detail: "A member named '\(n)' is in the room already; pick another name or join with replace:true to take it over.")
    }
    public static func notJoined(_ d: String) -> RoomError { .init(code: 409, name: "notJoined", detail: d) }
    public static func subscriptionAlreadyExists(_ p: String) -> RoomError {
        .init(code: 409, name: "subscriptionAlreadyExists", detail: "This member subscribes to publication '\(p)' already.")
    }
    public static func cannotSubscribeOwnPublication() -> RoomError {
        .init(code: 409, name: "cannotSubscribeOwnPublication", detail: "A member cannot subscribe to its own publication.")
    }
    public static func roomClosed(_ id: String) -> RoomError { .init(code: 410, name: "roomClosed", detail: "Room '\(id)' has been closed.") }
    public static func maxSubscribersExceeded(_ n: Int) -> RoomError {
        .init(code: 429, name: "maxSubscribersExceeded", detail: "The publication allows at most \(n) subscribers and has that many.")
    }
    public static func codecNotSupported(_ mimeType: String, publicationId: String) -> RoomError {
        .init(code: 415, name: "codecNotSupported",
              detail: "Publication '\(publicationId)' is \(mimeType), which this subscriber cannot decode; an SFU forwards the publisher's codec as it is.")
    }
    public static func unsupportedMediaType(_ d: String) -> RoomError { .init(code: 415, name: "unsupportedMediaType", detail: d) }
    public static func limitExceeded(_ d: String) -> RoomError { .init(code: 429, name: "limitExceeded", detail: d) }
    /// An SDP over one of the size and shape limits (`server.maxSdpBytes`, `media.sdp.*`, its
    /// candidates over `media.maxRemoteCandidates`): `limitExceeded` with code 413, as WHIP and
    /// WHEP answer it (Content Too Large; sending it again will not help).
    public static func sdpLimitExceeded(_ d: String) -> RoomError { .init(code: 413, name: "limitExceeded", detail: d) }
    public static func internalError(_ d: String) -> RoomError { .init(code: 500, name: "internal", detail: d) }
    /// The cluster cannot do this now (its store is unreachable, or the node hosting the room
    /// cannot be reached); the sentence says which. Asking again later may succeed.
    public static func serviceUnavailable(_ d: String) -> RoomError { .init(code: 503, name: "serviceUnavailable", detail: d) }

    public var json: JSONValue {
        ["code": .int(code), "message": .string(name), "data": ["name": .string(name), "detail": .string(detail)]]
    }
}
