public import MinatoRooms
internal import Metrics

/// The JSON-RPC 2.0 front door of the room core (docs/protocol.md): parses frames, finds the
/// method in `SignalingMethod.all`, checks its permission, runs it on the core and answers.
/// Frames are parsed on the caller's task (the connection's), never on the room actor.
public struct SignalingFrontDoor: Sendable {
    public let rooms: RoomService
    public init(rooms: RoomService) { self.rooms = rooms }

    /// Every method name, for metrics labels and documentation checks.
    public static var methodNames: [String] { SignalingMethod.list.map(\.name) }

    /// Parses one text frame from `channel` and handles it.
    public func handle(text: String, channel: ClientChannel) async {
        switch JsonRpcRequest.parse(text) {
        case .success(let request): await handle(request, channel: channel)
        case .failure(let rejection): channel.send(rejection.responseText)
        }
    }

    /// Handles one request: its response goes out first, then the notifications it caused.
    public func handle(_ request: JsonRpcRequest, channel: ClientChannel) async {
        guard let method = SignalingMethod.all[request.method] else {
            Counter(label: "minato_signaling_requests_total", dimensions: [("method", "unknown")]).increment()
            Self.count(.methodNotFound(request.method))
            channel.send(request.errorResponse(.methodNotFound(request.method)))
            return
        }
        Counter(label: "minato_signaling_requests_total", dimensions: [("method", method.name)]).increment()
        let params = Params(request.params)
        let id = request.id
        await rooms.run({ core in
            let (permission, target) = method.access(params)
            try core.authorize(permission, target: target, from: channel)
            return try await method.run(params, core, channel)
        }, respond: { outcome in
            switch outcome {
            case .success(let result):
                channel.send(JsonRpc.response(id: id, result: result).serialized())
            case .failure(let error):
                Self.count(error)
                channel.send(JsonRpc.response(id: id, error: error).serialized())
            }
        })
    }

    /// Counts a request refused before it was handled (the connection's in-flight limit).
    public func countRefused(_ request: JsonRpcRequest) { Self.count(.limitExceeded("")) }

    static func count(_ error: RoomError) {
        Counter(label: "minato_signaling_errors_total", dimensions: [("name", error.name)]).increment()
    }
}
