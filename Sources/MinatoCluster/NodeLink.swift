public import MinatoRooms
internal import Foundation
internal import JWTKit

/// One frame on a node-to-node link (a WebSocket at `/cluster/link`, one per ordered node
/// pair: the gateway node dials the host). The link multiplexes *channels*: each is one client
/// connection of the gateway acting on rooms of the host, and the host treats it exactly as a
/// client WebSocket (its own id, token, members, in-flight limit). Text frames, JSON:
///
/// | frame | direction | meaning |
/// |---|---|---|
/// | `{"open":ch,"token":t?}` | gateway → host | a channel opens (bound to the client's token, if any) |
/// | `{"ch":ch,"msg":text}` | both | one JSON-RPC frame of the channel, unchanged |
/// | `{"auth":ch,"token":t}` | gateway → host | the client authenticated again (`updateAuthToken`) |
/// | `{"shut":ch}` | gateway → host | the client connection closed |
/// | `{"closed":ch,"code":n,"reason":s}` | host → gateway | the host closed the channel (a close code for the client) |
/// | `{"call":n,"op":s,"ch":ch?,"params":{…}}` | gateway → host | a node-internal request (`listRooms`, `adminListRooms`) |
/// | `{"reply":n,"result":v}` / `{"reply":n,"error":e}` | host → gateway | its answer |
public enum LinkFrame: Sendable, Equatable {
    case open(channel: UInt64, token: String?)
    case message(channel: UInt64, text: String)
    case auth(channel: UInt64, token: String)
    case shut(channel: UInt64)
    case closed(channel: UInt64, code: UInt16, reason: String)
    case call(id: UInt64, op: String, channel: UInt64?, params: JSONValue)
    case reply(id: UInt64, result: Result<JSONValue, RoomError>)

    public func serialized() -> String {
        switch self {
        case .open(let ch, let token):
            var o: [String: JSONValue] = ["open": .int(Int(truncatingIfNeeded: ch))]
            if let token { o["token"] = .string(token) }
            return JSONValue.object(o).serialized()
        case .message(let ch, let text):
            return JSONValue.object(["ch": .int(Int(truncatingIfNeeded: ch)), "msg": .string(text)]).serialized()
        case .auth(let ch, let token):
            return JSONValue.object(["auth": .int(Int(truncatingIfNeeded: ch)), "token": .string(token)]).serialized()
        case .shut(let ch):
            return JSONValue.object(["shut": .int(Int(truncatingIfNeeded: ch))]).serialized()
        case .closed(let ch, let code, let reason):
            return JSONValue.object(["closed": .int(Int(truncatingIfNeeded: ch)), "code": .int(Int(code)), "reason": .string(reason)]).serialized()
        case .call(let id, let op, let ch, let params):
            var o: [String: JSONValue] = ["call": .int(Int(truncatingIfNeeded: id)), "op": .string(op), "params": params]
            if let ch { o["ch"] = .int(Int(truncatingIfNeeded: ch)) }
            return JSONValue.object(o).serialized()
        case .reply(let id, .success(let result)):
            return JSONValue.object(["reply": .int(Int(truncatingIfNeeded: id)), "result": result]).serialized()
        case .reply(let id, .failure(let error)):
            return JSONValue.object(["reply": .int(Int(truncatingIfNeeded: id)), "error": error.json]).serialized()
        }
    }

    /// The frame in `text`, or nil when it is not one (the link counts and drops it).
    public static func parse(_ text: String) -> LinkFrame? {
        guard let value = try? JSONValue.parse(text), case .object(let o) = value else { return nil }
        func channel(_ key: String) -> UInt64? {
            guard let n = o[key]?.intValue, n >= 0 else { return nil }
            return UInt64(n)
        }
        if let ch = channel("ch"), let text = o["msg"]?.stringValue { return .message(channel: ch, text: text) }
        if let ch = channel("open") { return .open(channel: ch, token: o["token"]?.stringValue) }
        if let ch = channel("auth"), let token = o["token"]?.stringValue { return .auth(channel: ch, token: token) }
        if let ch = channel("shut") { return .shut(channel: ch) }
        if let ch = channel("closed") {
            let code = o["code"]?.intValue.flatMap { UInt16(exactly: $0) } ?? 1011
            return .closed(channel: ch, code: code, reason: o["reason"]?.stringValue ?? "")
        }
        if let id = channel("call"), let op = o["op"]?.stringValue {
            return .call(id: id, op: op, channel: channel("ch"), params: o["params"] ?? [:])
        }
        if let id = channel("reply") {
            if let e = o["error"] {
                let name = e["data"]?["name"]?.stringValue ?? e["message"]?.stringValue ?? "internal"
                let error = RoomError(code: e["code"]?.intValue ?? 500, name: name, detail: e["data"]?["detail"]?.stringValue ?? "")
                return .reply(id: id, result: .failure(error))
            }
            return .reply(id: id, result: .success(o["result"] ?? .null))
        }
        return nil
    }
}

/// The credential a node presents when it opens a link: an HS256 JWT signed with
/// `cluster.secret`, naming the dialing node and valid for one minute (so a captured one is
/// soon worthless). Sent as `Authorization: Bearer <jwt>` on the WebSocket upgrade.
public final class NodeLinkCredentials: Sendable {
    let keys: JWTKeyCollection
    let nodeId: String

    public init(secret: String, nodeId: String) async {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.keys = keys
        self.nodeId = nodeId
    }

    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp.verifyNotExpired()
            try aud.verifyIntendedAudience(includes: "minato-cluster")
        }
    }

    /// A fresh credential for this node.
    public func mint() async throws -> String {
        try await keys.sign(Claims(sub: .init(value: nodeId), aud: .init(value: ["minato-cluster"]),
                                   exp: .init(value: Date().addingTimeInterval(60))))
    }

    /// The dialing node's id, or nil when the credential does not verify with this secret.
    public func verify(_ token: String) async -> String? {
        guard let claims = try? await keys.verify(token, as: Claims.self),
              ClusterConfiguration.isValidNodeId(claims.sub.value) else { return nil }
        return claims.sub.value
    }
}
