public import MinatoRooms
public import MinatoSignaling
internal import Synchronization
internal import Metrics
internal import Foundation

/// Where one request of a client connection is handled.
public enum RequestRoute: Sendable, Equatable {
    /// On this node's room core (the room is here, or the request names no room).
    case local
    /// Sent to the node that hosts its room; the answer and the events come back from there.
    case forwarded
    /// Answered here already (the text was sent to the client).
    case answered
}

/// The cluster side of one client connection on this node (the *gateway*): decides for each
/// request whether this node's room core handles it or the node hosting its room does, and
/// relays it there over the node link, on a channel of its own (the connection's id). What
/// the host sends back (responses, events, offers) goes to the client unchanged, so events
/// arrive in `version` order with no gap or duplicate. The gateway remembers, per host, the
/// rooms whose events it relayed (the last `version`) and its members' reconnect secrets, so a
/// dropped link is resumed (members taken over, missed events replayed) and a host that died is
/// reported as `closed` with reason `nodeFailed`.
public final class ClusterGateway: LinkChannelSink, Sendable {
    let cluster: ClusterNode
    let client: ClientChannel
    private struct Remote {
        /// The link the channel was opened on (a new link needs a new `open`).
        var link: NodeLinkClient?
        /// Rooms whose events came from this host: roomId → last version relayed.
        var rooms: [String: Int] = [:]
        /// Members joined there through this connection: memberId → reconnect secret.
        var members: [String: String] = [:]
    }
    private struct State {
        var token: String?
        var remotes: [String: Remote] = [:]
        var closed = false
        /// Relayed requests waiting for their response (by serialized id): when they were sent,
        /// for `minato_cluster_relayed_request_seconds`. At most `maxTimed` at once.
        var timed: [String: ContinuousClock.Instant] = [:]
    }
    static let maxTimed = 64
    private let state: Mutex<State>

    init(cluster: ClusterNode, client: ClientChannel, token: String?) {
        self.cluster = cluster
        self.client = client
        self.state = Mutex(State(token: token))
    }

    var channelId: UInt64 { client.id }

    /// The request's id field as a request names it: `roomId`, `memberId`, … (nil: names no room).
    static let routingKeys: [String: String] = [
        "closeRoom": "roomId", "updateRoomMetadata": "roomId", "getRoom": "roomId", "subscribeRoomEvents": "roomId",
        "join": "roomId",
        "leave": "memberId", "keepalive": "memberId", "updateMemberMetadata": "memberId", "publish": "memberId",
        "negotiate": "memberId", "subscribe": "memberId", "answer": "memberId", "iceCandidate": "memberId",
        "restartIce": "memberId",
        "getIceServers": "memberId",
        "unpublish": "publicationId", "enablePublication": "publicationId", "disablePublication": "publicationId",
        "updatePublicationMetadata": "publicationId",
        "unsubscribe": "subscriptionId", "changePreferredEncoding": "subscriptionId",
    ]
    /// Methods the gateway treats itself (placement, the cluster-wide listing, tokens).
    static let specialMethods: Set<String> = ["authenticate", "updateAuthToken", "listRooms", "createRoom",
                                              "findOrCreateRoom", "findRoom"]

    /// Decides where `request` (whose frame is `text`) is handled, and sends it there when that
    /// is another node.
    public func route(_ request: JsonRpcRequest, text: String) async -> RequestRoute {
        let p = request.parameters
        switch request.method {
        case "authenticate", "updateAuthToken":
            // Handled here (the answer comes from this node); every host channel gets the token too.
            if let token = p["token"]?.stringValue { tokenChanged(token) }
            return .local
        case "listRooms":
            await listRooms(request)
            return .answered
        case "createRoom", "findOrCreateRoom":
            let name = p["name"]?.stringValue
            if request.method == "findOrCreateRoom", name == nil { return .local }  // the core says why
            switch await cluster.place(name: name) {
            case .success(let node): return await forward(text, request: request, to: node)
            case .failure(let error):
                client.send(request.errorResponse(error))
                return .answered
            }
        case "findRoom":
            if let id = p["id"]?.stringValue { return await forward(text, request: request, toOwnerOf: id) }
            if let name = p["name"]?.stringValue, let node = await cluster.nodeHolding(name: name) {
                return await forward(text, request: request, to: node)
            }
            return .local
        default:
            guard let key = Self.routingKeys[request.method], let id = p[key]?.stringValue else { return .local }
            return await forward(text, request: request, toOwnerOf: id)
        }
    }

    private func forward(_ text: String, request: JsonRpcRequest, toOwnerOf id: String) async -> RequestRoute {
        guard let node = ClusterConfiguration.nodeId(of: id), node != cluster.nodeId else { return .local }
        guard await cluster.isLive(node) else {
            // The node that made the id left the cluster (or never was in it): whatever the id
            // named is gone with it. A client that hears this rejoins (the SDKs do).
            client.send(request.errorResponse(Self.gone(request.method, id: id, node: node)))
            return .answered
        }
        return await forward(text, request: request, to: node)
    }

    /// The not-found error for an id whose node is not in the cluster.
    static func gone(_ method: String, id: String, node: String) -> RoomError {
        let why = "it was made by node \(node), which is not in the cluster now"
        switch routingKeys[method] {
        case "memberId": return RoomError(code: 404, name: "memberNotFound", detail: "There is no member '\(id.prefix(80))': \(why).")
        case "publicationId": return RoomError(code: 404, name: "publicationNotFound", detail: "There is no publication '\(id.prefix(80))': \(why).")
        case "subscriptionId": return RoomError(code: 404, name: "subscriptionNotFound", detail: "There is no subscription '\(id.prefix(80))': \(why).")
        default: return .roomNotFound("with id '\(id.prefix(80))': \(why)")
        }
    }

    private func forward(_ text: String, request: JsonRpcRequest, to node: String) async -> RequestRoute {
        if node == cluster.nodeId { return .local }
        switch await channel(on: node) {
        case .success(let link):
            Counter(label: "minato_cluster_requests_relayed_total", dimensions: [("method", request.method)]).increment()
            if request.id != .null {
                let key = request.id.serialized(), now = ContinuousClock.now
                state.withLock { s in if s.timed.count < Self.maxTimed { s.timed[key] = now } }
            }
            link.send(.message(channel: channelId, text: text))
            return .forwarded
        case .failure(let error):
            client.send(request.errorResponse(error))
            return .answered
        }
    }

    /// The link to `node` with this connection's channel open on it (opened now if needed).
    func channel(on node: String) async -> Result<NodeLinkClient, RoomError> {
        let link: NodeLinkClient
        switch await cluster.link(to: node) {
        case .success(let l): link = l
        case .failure(let e): return .failure(e)
        }
        let open: (token: String?, needed: Bool)? = state.withLock { s in
            if s.closed { return nil }
            var remote = s.remotes[node] ?? Remote()
            let needed = remote.link !== link
            remote.link = link
            s.remotes[node] = remote
            return (s.token, needed)
        }
        guard let open else { return .failure(.serviceUnavailable("The connection is closing.")) }
        if open.needed {
            link.attach(channelId, self)
            link.send(.open(channel: channelId, token: open.token))
        }
        return .success(link)
    }

    private func tokenChanged(_ token: String) {
        let links = state.withLock { s -> [NodeLinkClient] in
            s.token = token
            return s.remotes.values.compactMap(\.link)
        }
        for link in links { link.send(.auth(channel: channelId, token: token)) }
    }

    /// `listRooms` across the cluster: this node's rooms and every live node's, each filtered
    /// by the connection's token where it is hosted.
    private func listRooms(_ request: JsonRpcRequest) async {
        var all: [JSONValue] = []
        switch await cluster.localListRooms(client) {
        case .success(let rooms): all += rooms
        case .failure(let error):
            client.send(request.errorResponse(error))
            return
        }
        for node in await cluster.otherLiveNodes() {
            guard case .success(let link) = await channel(on: node) else { continue }
            if case .success(.array(let rooms)) = await link.call("listRooms", channel: channelId) { all += rooms }
        }
        client.send(JSONValue.object(["jsonrpc": "2.0", "id": request.id, "result": ["rooms": .array(all)]]).serialized())
    }

    // MARK: What the hosts send

    func deliver(_ text: String, from node: String) {
        track(text, from: node)
        timeResponse(text)
        client.send(text)
    }

    /// A response to a relayed request: how long it took, from here to the host and back.
    /// Notifications (which start `{"jsonrpc":"2.0","method"`) are not parsed for this.
    private func timeResponse(_ text: String) {
        guard !text.hasPrefix(#"{"jsonrpc":"2.0","method""#), state.withLock({ !$0.timed.isEmpty }),
              let id = try? JSONValue.parse(text)["id"] else { return }
        let key = id.serialized()
        guard let sent = state.withLock({ $0.timed.removeValue(forKey: key) }) else { return }
        let took = ContinuousClock.now - sent
        Timer(label: "minato_cluster_relayed_request_seconds").recordNanoseconds(
            took.components.seconds * 1_000_000_000 + took.components.attoseconds / 1_000_000_000)
    }

    func closedByHost(node: String, code: UInt16, reason: String) {
        // The host closed this client's channel (its output overflowed, or a bad token): the
        // client's own socket closes the same way.
        client.close(code, reason)
    }

    /// Remembers what a resumed link or a failed host needs: the last `version` of each room
    /// whose events pass, and the reconnect secret of each member joined here. Only frames that
    /// can carry them are parsed.
    private func track(_ text: String, from node: String) {
        let isEvent = text.contains("\"roomEvent\""), isJoin = text.contains("\"reconnectSecret\"")
        guard isEvent || isJoin, let value = try? JSONValue.parse(text) else { return }
        state.withLock { s in
            var remote = s.remotes[node] ?? Remote()
            if isEvent, let params = value["params"], let room = params["roomId"]?.stringValue,
               let version = params["version"]?.intValue {
                if params["type"]?.stringValue == "closed" {
                    remote.rooms[room] = nil
                } else {
                    remote.rooms[room] = max(remote.rooms[room] ?? 0, version)
                    if params["type"]?.stringValue == "memberLeft",
                       let member = params["data"]?["member"]?["id"]?.stringValue { remote.members[member] = nil }
                }
            } else if isJoin, let result = value["result"], let secret = result["reconnectSecret"]?.stringValue,
                      let member = result["member"]?["id"]?.stringValue {
                remote.members[member] = secret
            }
            s.remotes[node] = remote
        }
    }

    // MARK: Faults

    /// The link to `node` was dialed again: open the channel on it, take this connection's
    /// members over and replay the events it missed (the host sends them on the channel before
    /// any newer one).
    func resume(on node: String) async {
        let snapshot: Remote? = state.withLock { s in
            guard !s.closed, let r = s.remotes[node], r.link != nil else { return nil }
            var cleared = r
            cleared.link = nil
            s.remotes[node] = cleared
            return r
        }
        guard let snapshot, !snapshot.rooms.isEmpty || !snapshot.members.isEmpty else { return }
        guard case .success(let link) = await channel(on: node) else { return }
        let params: JSONValue = [
            "members": .array(snapshot.members.map { ["memberId": .string($0.key), "reconnectSecret": .string($0.value)] }),
            "rooms": .array(snapshot.rooms.map { ["roomId": .string($0.key), "version": .int($0.value)] }),
        ]
        if case .failure(let error) = await link.call("resume", channel: channelId, params: params) {
            cluster.logger.warning("resuming a client connection on a node link failed",
                                   metadata: ["node": "\(node)", "error": "\(error)"])
        }
    }

    /// `node` left the cluster (its lease lapsed): every room this connection followed there
    /// is closed for it, with reason `nodeFailed`, one version after the last event it got.
    func nodeFailed(_ node: String) {
        let rooms: [String: Int] = state.withLock { s in
            guard let r = s.remotes.removeValue(forKey: node) else { return [:] }
            r.link?.detach(channelId)
            return r.rooms
        }
        for (room, version) in rooms.sorted(by: { $0.key < $1.key }) {
            let event: JSONValue = ["roomId": .string(room), "version": .int(version + 1), "type": "closed",
                                    "data": [:], "reason": "nodeFailed"]
            client.send(JSONValue.object(["jsonrpc": "2.0", "method": "roomEvent", "params": event]).serialized())
        }
    }

    /// The nodes this connection has channels on.
    var nodes: [String] { state.withLock { Array($0.remotes.keys) } }

    /// The client connection closed: its channels on every host close too (its members there
    /// start their reconnect gap, as on a single node).
    public func connectionClosed() {
        let links = state.withLock { s -> [NodeLinkClient] in
            s.closed = true
            let links = s.remotes.values.compactMap(\.link)
            s.remotes.removeAll()
            return links
        }
        for link in links {
            link.detach(channelId)
            link.send(.shut(channel: channelId))
        }
        Task { await cluster.gatewayClosed(channelId) }
    }
}
