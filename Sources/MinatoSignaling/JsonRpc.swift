public import MinatoRooms

/// One parsed JSON-RPC 2.0 request (docs/protocol.md "Transport"). Parsing happens on the caller's
/// task (the connection's), never on the room actor, so a large or malformed frame costs the
/// connection that sent it.
public struct JsonRpcRequest: Sendable {
    public let id: JSONValue
    public let method: String
    let params: [String: JSONValue]

    /// The request, or the error response to send for a frame that is not one.
    public static func parse(_ text: String) -> Result<JsonRpcRequest, JsonRpcRejection> {
        let request: JSONValue
        do { request = try JSONValue.parse(text) } catch {
            return .failure(.init(id: .null, error: .parseError("The frame is not valid JSON.")))
        }
        guard case .object(let obj) = request else {
            return .failure(.init(id: .null, error: .invalidRequest("A request must be a JSON object.")))
        }
        let id = obj["id"] ?? .null
        switch id {
        case .int, .string, .null: break
        default: return .failure(.init(id: .null, error: .invalidRequest("\"id\" must be a number or a string.")))
        }
        guard obj["jsonrpc"]?.stringValue == "2.0", let method = obj["method"]?.stringValue else {
            return .failure(.init(id: id, error: .invalidRequest("A request needs \"jsonrpc\":\"2.0\" and a string \"method\".")))
        }
        switch obj["params"] {
        case nil, .null?: return .success(.init(id: id, method: method, params: [:]))
        case .object(let p)?: return .success(.init(id: id, method: method, params: p))
        default: return .failure(.init(id: id, error: .invalidParams("\"params\" must be an object.")))
        }
    }

    /// The request's params (an empty object when it had none).
    public var parameters: [String: JSONValue] { params }

    /// The error response to this request (used when it is refused before it is handled).
    public func errorResponse(_ error: RoomError) -> String { JsonRpcRejection(id: id, error: error).responseText }
}

/// A request refused before it reached a method: its id (null when unknown) and the error.
public struct JsonRpcRejection: Error, Sendable {
    public let id: JSONValue
    public let error: RoomError
    public var responseText: String { JsonRpc.response(id: id, error: error).serialized() }
}

enum JsonRpc {
    static func response(id: JSONValue, result: JSONValue) -> JSONValue { ["jsonrpc": "2.0", "id": id, "result": result] }
    static func response(id: JSONValue, error: RoomError) -> JSONValue { ["jsonrpc": "2.0", "id": id, "error": error.json] }
}
