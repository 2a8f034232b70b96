public import MinatoRooms
internal import Foundation
internal import Synchronization
internal import HummingbirdWSClient
internal import HTTPTypes
public import Logging
internal import Metrics

/// What a link delivers to the gateway connection that owns a channel.
protocol LinkChannelSink: AnyObject, Sendable {
    /// A JSON-RPC frame the host sent on the channel (a response or a notification).
    func deliver(_ text: String, from node: String)
    /// The host closed the channel with a close code meant for the client.
    func closedByHost(node: String, code: UInt16, reason: String)
}

/// The gateway's end of one node-to-node link: a WebSocket this node dialed to `node`'s
/// `/cluster/link`. Frames go out through one queue, in order; frames in are dispatched to the
/// channel they name, and replies to the calls waiting for them. When the socket ends, every
/// waiting call fails and `onDown` runs once; the owner (`ClusterNode`) decides whether to dial
/// again.
final class NodeLinkClient: Sendable {
    let node: String
    private struct State {
        var sinks: [UInt64: any LinkChannelSink] = [:]
        var calls: [UInt64: CheckedContinuation<Result<JSONValue, RoomError>, Never>] = [:]
        var nextCall: UInt64 = 1
        var down: String?
        var up = false
    }
    private let state = Mutex(State())
    private let outbound: AsyncStream<String>.Continuation
    private let outStream: AsyncStream<String>

    init(node: String) {
        self.node = node
        (outStream, outbound) = AsyncStream<String>.makeStream()
    }

    var isDown: Bool { state.withLock { $0.down != nil } }
    var isUp: Bool { state.withLock { $0.up && $0.down == nil } }

    /// Dials `url` (`ws://host:port/cluster/link`) with `credential`; returns once the socket is
    /// up, or throws why not. `onDown` runs once when the socket ends after that.
    func connect(url: String, credential: String, maxFrameBytes: Int, logger: Logger,
                 onDown: @escaping @Sendable (String) -> Void) async throws {
        let opened = LinkOpenSignal()
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            opened.set(c)
            // A host that does not answer at all (its address blackholed) must not hold the
            // request that dialed: after `Self.dialTimeout` the dial fails, and a socket that
            // opens later closes at once (its queue is finished).
            Task { [self] in
                try? await Task.sleep(for: Self.dialTimeout)
                if opened.finish(ClusterLinkError.unreachable("no answer within \(Self.dialTimeout)")) { close() }
            }
            Task { [self] in
                var reason = "closed by the peer"
                do {
                    var config = WebSocketClientConfiguration()
                    config.maxFrameSize = maxFrameBytes
                    config.additionalHeaders = [.authorization: "Bearer \(credential)"]
                    config.autoPing = .enabled(timePeriod: .seconds(5))
                    try await WebSocketClient.connect(url: url, configuration: config, logger: logger) { inbound, outbound, _ in
                        self.state.withLock { $0.up = true }
                        opened.finish(nil)
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                for await text in self.outStream { try await outbound.write(.text(text)) }
                                try await outbound.close(.normalClosure, reason: nil)
                            }
                            for try await message in inbound.messages(maxSize: maxFrameBytes) {
                                if case .text(let text) = message { self.handle(text) }
                            }
                            group.cancelAll()
                        }
                    }
                } catch {
                    reason = "\(error)"
                }
                opened.finish(ClusterLinkError.unreachable(reason))
                self.ended(reason)
                onDown(reason)
            }
        }
    }

    /// The longest a dial may take before the request that needed it fails.
    static let dialTimeout = Duration.seconds(3)

    func send(_ frame: LinkFrame) {
        outbound.yield(frame.serialized())
    }

    /// Adds a channel's sink (frames for `channel` go to it from now on).
    func attach(_ channel: UInt64, _ sink: any LinkChannelSink) { state.withLock { $0.sinks[channel] = sink } }
    func detach(_ channel: UInt64) { state.withLock { $0.sinks[channel] = nil } }
    var channels: [UInt64: any LinkChannelSink] { state.withLock { $0.sinks } }

    /// A node-internal request; fails with `serviceUnavailable` when the link is down or the
    /// answer takes longer than `timeout`.
    func call(_ op: String, channel: UInt64? = nil, params: JSONValue = [:], timeout: Duration = .seconds(5)) async -> Result<JSONValue, RoomError> {
        let id: UInt64? = state.withLock { s in
            if s.down != nil { return nil }
            let id = s.nextCall
            s.nextCall &+= 1
            return id
        }
        guard let id else { return .failure(.serviceUnavailable("The link to node \(node) is down.")) }
        return await withCheckedContinuation { c in
            let refused: Bool = state.withLock { s in
                if s.down != nil { return true }
                s.calls[id] = c
                return false
            }
            if refused { c.resume(returning: .failure(.serviceUnavailable("The link to node \(node) is down."))); return }
            send(.call(id: id, op: op, channel: channel, params: params))
            // The answer's deadline (a no-op when the answer came first).
            Task { [self] in
                try? await Task.sleep(for: timeout)
                resolve(id, .failure(.serviceUnavailable("Node \(node) did not answer \(op) in time.")))
            }
        }
    }

    /// Ends the link (the owner no longer wants it, or the node left the cluster).
    func close() { outbound.finish() }

    private func resolve(_ id: UInt64, _ result: Result<JSONValue, RoomError>) {
        state.withLock { $0.calls.removeValue(forKey: id) }?.resume(returning: result)
    }

    private func handle(_ text: String) {
        guard let frame = LinkFrame.parse(text) else {
            Counter(label: "minato_cluster_link_frames_dropped_total", dimensions: [("reason", "malformed")]).increment()
            return
        }
        switch frame {
        case .message(let ch, let msg):
            state.withLock { $0.sinks[ch] }?.deliver(msg, from: node)
        case .closed(let ch, let code, let reason):
            state.withLock { $0.sinks.removeValue(forKey: ch) }?.closedByHost(node: node, code: code, reason: reason)
        case .reply(let id, let result):
            resolve(id, result)
        case .open, .auth, .shut, .call:
            Counter(label: "minato_cluster_link_frames_dropped_total", dimensions: [("reason", "unexpected")]).increment()
        }
    }

    private func ended(_ reason: String) {
        let calls = state.withLock { s -> [CheckedContinuation<Result<JSONValue, RoomError>, Never>] in
            s.down = reason
            let all = Array(s.calls.values)
            s.calls.removeAll()
            return all
        }
        outbound.finish()
        for c in calls { c.resume(returning: .failure(.serviceUnavailable("The link to node \(node) closed: \(reason)"))) }
    }
}

public enum ClusterLinkError: Error, Sendable, CustomStringConvertible {
    case unreachable(String)
    public var description: String {
        switch self { case .unreachable(let why): return "node link could not be opened: \(why)" }
    }
}

/// Resumes the dialer once: when the socket is up, or when it failed before that.
final class LinkOpenSignal: Sendable {
    private let state = Mutex<(CheckedContinuation<Void, any Error>?, Bool)>((nil, false))
    func set(_ c: CheckedContinuation<Void, any Error>) { state.withLock { $0.0 = c } }
    /// Resumes the dialer with `error` (nil: opened); returns false when it was resumed before.
    @discardableResult
    func finish(_ error: (any Error)?) -> Bool {
        let c: CheckedContinuation<Void, any Error>? = state.withLock { s in
            if s.1 { return nil }
            s.1 = true
            let c = s.0
            s.0 = nil
            return c
        }
        guard let c else { return false }
        if let error { c.resume(throwing: error) } else { c.resume() }
        return true
    }
}
