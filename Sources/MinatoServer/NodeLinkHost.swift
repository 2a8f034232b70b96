internal import Foundation
internal import Logging
internal import MinatoCluster
internal import MinatoRooms
internal import MinatoSignaling
internal import Metrics
internal import Synchronization
internal import HummingbirdWebSocket
internal import NIOCore

/// The host's end of node links (`/cluster/link`): another node dialed it, authenticated with
/// a credential signed by `cluster.secret` (checked before the upgrade; a wrong one is refused
/// with 401, logged and counted). Each channel the gateway opens becomes a client connection
/// of this node's room core with an id of its own, exactly like a WebSocket: its token, its
/// members, its in-flight limit (`server.maxInFlightRequests`). What the core sends the
/// channel goes back over the link, in order. The link's outgoing queue is bounded like a
/// client's, by `server.maxOutgoingBytes` times 16 (it carries many clients); a gateway that
/// lets more pile up loses the link. When the link ends, every channel closes (its members
/// start their reconnect gap, so a gateway that dials again can take them over).
struct NodeLinkHost: Sendable {
    let rooms: RoomService
    let nodeId: String
    let maxInFlight: Int
    let maxOutgoing: Int
    let maxFrameBytes: Int
    let nextConnectionId: @Sendable () -> UInt64
    let logger: Logger

    private final class Channels: Sendable {
        let entries = Mutex<[UInt64: ClientChannel]>([:])
        let inFlight = Mutex<[UInt64: Int]>([:])
    }

    func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, socket: any Channel, peer: String) async {
        let (stream, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .unbounded)
        let budget = LinkBudget()
        let maxOutgoing = self.maxOutgoing, logger = self.logger
        let send: @Sendable (LinkFrame) -> Void = { frame in
            guard !budget.overflowed.load(ordering: .relaxed) else { return }
            let text = frame.serialized()
            if budget.queued.add(text.utf8.count, ordering: .relaxed).newValue > maxOutgoing {
                guard !budget.overflowed.exchange(true, ordering: .relaxed) else { return }
                logger.warning("node link closed: the peer does not read", metadata: ["peer": "\(peer)"])
                Counter(label: "minato_cluster_links_closed_total", dimensions: [("reason", "outgoingQueueFull")]).increment()
                continuation.finish()
                socket.close(promise: nil)
                return
            }
            continuation.yield(text)
        }
        let channels = Channels()
        let signaling = SignalingFrontDoor(rooms: rooms)
        logger.notice("node link opened", metadata: ["peer": "\(peer)"])
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await text in stream {
                    do { try await outbound.write(.text(text)) } catch { return }
                    budget.queued.subtract(text.utf8.count, ordering: .relaxed)
                }
            }
            do {
                for try await message in inbound.messages(maxSize: maxFrameBytes) {
                    guard case .text(let text) = message, let frame = LinkFrame.parse(text) else {
                        Counter(label: "minato_cluster_link_frames_dropped_total", dimensions: [("reason", "malformed")]).increment()
                        continue
                    }
                    switch frame {
                    case .open(let ch, let token):
                        let id = nextConnectionId()
                        let channel = ClientChannel(id: id, send: { send(.message(channel: ch, text: $0)) },
                                                    close: { code, reason in send(.closed(channel: ch, code: code, reason: reason)) },
                                                    node: peer)
                        let previous = channels.entries.withLock { e -> ClientChannel? in
                            let old = e[ch]
                            e[ch] = channel
                            return old
                        }
                        if let previous { await rooms.channelClosed(previous.id) }
                        if let token { _ = await rooms.authenticate(token: token, channel: channel) }
                    case .message(let ch, let text):
                        guard let channel = channels.entries.withLock({ $0[ch] }) else { continue }
                        switch JsonRpcRequest.parse(text) {
                        case .failure(let rejection): channel.send(rejection.responseText)
                        case .success(let request):
                            let admitted = channels.inFlight.withLock { f -> Bool in
                                if f[ch, default: 0] >= maxInFlight { return false }
                                f[ch, default: 0] += 1
                                return true
                            }
                            guard admitted else {
                                signaling.countRefused(request)
                                channel.send(request.errorResponse(.limitExceeded(
                                    "This connection has \(maxInFlight) requests in flight; wait for their responses (server.maxInFlightRequests).")))
                                continue
                            }
                            group.addTask {
                                await signaling.handle(request, channel: channel)
                                channels.inFlight.withLock { $0[ch, default: 1] -= 1 }
                            }
                        }
                    case .auth(let ch, let token):
                        if let channel = channels.entries.withLock({ $0[ch] }) {
                            _ = await rooms.authenticate(token: token, channel: channel)
                        }
                    case .shut(let ch):
                        if let channel = channels.entries.withLock({ $0.removeValue(forKey: ch) }) {
                            await rooms.channelClosed(channel.id)
                        }
                    case .call(let id, let op, let ch, let params):
                        let channel = ch.flatMap { c in channels.entries.withLock { $0[c] } }
                        group.addTask {
                            send(.reply(id: id, result: await call(op, params: params, channel: channel, peer: peer)))
                        }
                    case .reply, .closed:
                        Counter(label: "minato_cluster_link_frames_dropped_total", dimensions: [("reason", "unexpected")]).increment()
                    }
                }
            } catch {
                logger.notice("node link ended", metadata: ["peer": "\(peer)", "error": "\(error)"])
            }
            continuation.finish()
        }
        for channel in channels.entries.withLock({ e in defer { e.removeAll() }; return Array(e.values) }) {
            await rooms.channelClosed(channel.id)
        }
        logger.notice("node link closed", metadata: ["peer": "\(peer)"])
    }

    /// A node-internal request.
    private func call(_ op: String, params: JSONValue, channel: ClientChannel?, peer: String) async -> Result<JSONValue, RoomError> {
        switch op {
        case "media":
            // A room homed on the peer has members (or a relay) served here (cluster.cascade).
            return await rooms.hostMedia(from: peer, params: params)
        case "mediaEvent":
            return await rooms.mediaEvent(from: peer, params: params)
        case "adminListRooms":
            var rooms = await self.rooms.adminListRooms()["rooms"]?.arrayValue ?? []
            for i in rooms.indices { rooms[i] = rooms[i].with("nodeId", .string(nodeId)) }
            return .success(["rooms": .array(rooms)])
        case "listRooms":
            guard let channel else { return .failure(.invalidRequest("listRooms needs a channel.")) }
            return await run(on: channel) { core in .array(try core.listRooms(from: channel)) }
        case "resume":
            guard let channel else { return .failure(.invalidRequest("resume needs a channel.")) }
            return await run(on: channel) { core in try resume(core, params: params, channel: channel) }
        default:
            return .failure(.methodNotFound(op))
        }
    }

    private func run(on channel: ClientChannel,
                     _ body: @escaping @Sendable (isolated RoomService) throws -> JSONValue) async -> Result<JSONValue, RoomError> {
        await withCheckedContinuation { c in
            Task { await rooms.run({ core in try body(core) }, respond: { c.resume(returning: $0) }) }
        }
    }

    /// After a gateway dialed again: takes its members over on the new channel (with the
    /// reconnect secrets their joins returned) and sends the channel every event it missed of
    /// the rooms it followed, in one turn of the room core, so nothing newer can pass them.
    private func resume(_ core: isolated RoomService, params: JSONValue, channel: ClientChannel) throws -> JSONValue {
        var members = 0, events = 0
        for m in params["members"]?.arrayValue ?? [] {
            guard let id = m["memberId"]?.stringValue, let secret = m["reconnectSecret"]?.stringValue else { continue }
            if (try? core.keepalive(memberId: id, reconnectSecret: secret, from: channel)) != nil { members += 1 }
        }
        for r in params["rooms"]?.arrayValue ?? [] {
            guard let room = r["roomId"]?.stringValue, var offset = r["version"]?.intValue else { continue }
            while let page = try? core.subscribeRoomEvents(RoomEventsRequest(roomId: room, offset: offset), from: channel) {
                for event in page.events {
                    channel.send(JSONValue.object(["jsonrpc": "2.0", "method": "roomEvent", "params": event]).serialized())
                    events += 1
                }
                guard let next = page.nextOffset, next > offset else { break }
                offset = next
            }
        }
        return ["members": .int(members), "events": .int(events)]
    }
}

/// Bytes a link has queued for its socket, and whether that went over its bound.
final class LinkBudget: Sendable {
    let queued = Atomic<Int>(0)
    let overflowed = Atomic<Bool>(false)
}

extension JSONValue {
    var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    func with(_ key: String, _ value: JSONValue) -> JSONValue {
        guard case .object(var o) = self else { return self }
        o[key] = value
        return .object(o)
    }
}
