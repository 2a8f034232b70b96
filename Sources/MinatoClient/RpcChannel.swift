internal import Foundation
internal import Synchronization
internal import HummingbirdWSClient
public import Logging

/// A JSON-RPC error from the server (docs/protocol.md): `name` is the stable name to switch on.
public struct RoomError: Error, Sendable, CustomStringConvertible, Equatable {
    public let code: Int
    public let name: String
    public let detail: String
    public let method: String
    public var description: String { "\(method): \(name) (\(code)): \(detail)" }
}

/// The client's failures that are not server errors.
public enum ClientError: Error, Sendable, CustomStringConvertible {
    case connectionClosed(String)
    case badResponse(String)
    case transport(String)
    case timeout(String)
    /// A data message longer than the server takes (its `a=max-message-size`,
    /// `rooms.data.maxMessageBytes`): not sent.
    case dataMessageTooLarge(size: Int, max: Int)
    /// A write on a data stream that is not published (yet, or any more).
    case dataStreamNotOpen
    /// The data channel's send buffer is full (the server is not taking messages as fast as
    /// they are written): not sent.
    case dataBufferFull
    public var description: String {
        switch self {
        case .dataMessageTooLarge(let size, let max):
            return "a data message of \(size) bytes is larger than the server takes (\(max) bytes, rooms.data.maxMessageBytes)"
        case .dataStreamNotOpen: return "the data stream is not published (its data channel is not open)"
        case .dataBufferFull: return "the data channel's send buffer is full; the message was not sent"
        case .connectionClosed(let s): return "the signaling connection closed: \(s)"
        case .badResponse(let s): return "the server sent a response the client cannot use: \(s)"
        case .transport(let s): return "media transport failed: \(s)"
        case .timeout(let s): return "timed out: \(s)"
        }
    }
}

/// One WebSocket to the server speaking JSON-RPC 2.0: requests with ids, and the server's
/// notifications as an `AsyncStream`.
final class RpcChannel: Sendable {
    struct Notification: Sendable { let method: String; let params: JSON }

    private struct State {
        var nextId = 1
        var pending: [Int: CheckedContinuation<JSON, any Error>] = [:]
        var closed: String?
        /// When the last frame came from the server (a heartbeat's clock).
        var heard = ContinuousClock.now
    }
    private let state = Mutex(State())
    private let outbound: AsyncStream<String>.Continuation
    private let notificationSink: AsyncStream<Notification>.Continuation
    let notifications: AsyncStream<Notification>

    private init(outbound: AsyncStream<String>.Continuation) {
        self.outbound = outbound
        (notifications, notificationSink) = AsyncStream<Notification>.makeStream()
    }

    /// Opens the WebSocket; returns once it is up (or throws why it is not).
    static func connect(url: String, logger: Logger) async throws -> RpcChannel {
        let (outStream, outContinuation) = AsyncStream<String>.makeStream()
        let channel = RpcChannel(outbound: outContinuation)
        let opened = OpenSignal()
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            opened.set(c)
            Task {
                var reason = "closed by the server"
                do {
                    var config = WebSocketClientConfiguration()
                    config.maxFrameSize = 1 << 20
                    try await WebSocketClient.connect(url: url, configuration: config, logger: logger) { inbound, outbound, _ in
                        opened.finish(nil)
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                for await text in outStream { try await outbound.write(.text(text)) }
                                try await outbound.close(.normalClosure, reason: nil)
                            }
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                if case .text(let text) = message { channel.handle(text) }
                            }
                            group.cancelAll()
                        }
                    }
                } catch {
                    reason = "\(error)"
                }
                opened.finish(ClientError.connectionClosed(reason))
                channel.closed(reason)
            }
        }
        return channel
    }

    /// Sends a request and waits for its result; a server error throws `RoomError`. With a
    /// `timeout`, a result that has not come by then throws `ClientError.timeout` (the request
    /// stays sent; a late result is ignored).
    @discardableResult
    func call(_ method: String, _ params: JSON = [:], timeout: Duration? = nil) async throws -> JSON {
        do { return try await send(method, params, timeout: timeout) } catch let e as RoomError {
            throw RoomError(code: e.code, name: e.name, detail: e.detail, method: method)
        }
    }

    private func send(_ method: String, _ params: JSON, timeout: Duration?) async throws -> JSON {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<JSON, any Error>) in
            let id: Int? = state.withLock { s in
                if s.closed != nil { return nil }
                let id = s.nextId
                s.nextId += 1
                s.pending[id] = c
                return id
            }
            guard let id else {
                c.resume(throwing: ClientError.connectionClosed(state.withLock { $0.closed } ?? "closed"))
                return
            }
            let request: JSON = ["jsonrpc": "2.0", "id": .number(Double(id)), "method": .string(method), "params": params]
            outbound.yield(request.serialized())
            if let timeout {
                Task { [weak self] in
                    try? await Task.sleep(for: timeout)
                    guard let c = self?.state.withLock({ $0.pending.removeValue(forKey: id) }) else { return }
                    c.resume(throwing: ClientError.timeout("no answer to \(method) in \(timeout)"))
                }
            }
        }
    }

    /// How long ago the server last sent a frame on this socket.
    var silence: Duration { ContinuousClock.now - state.withLock { $0.heard } }

    /// Gives the socket up at once (a heartbeat found it silent: its TCP path may be gone, and
    /// a close handshake would wait for it): pending requests fail, `notifications` ends.
    func abandon(_ reason: String) {
        outbound.finish()
        closed(reason)
    }

    func close() {
        outbound.finish()
    }

    /// Whether the socket has closed (requests then fail at once with `connectionClosed`).
    var isClosed: Bool { state.withLock { $0.closed != nil } }

    private func handle(_ text: String) {
        state.withLock { $0.heard = ContinuousClock.now }
        guard let message = try? JSON.parse(text) else { return }
        if let id = message["id"]?.int {
            guard let c = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return }
            if let error = message["error"] {
                c.resume(throwing: RoomError(code: error["code"]?.int ?? 0,
                                             name: error["data"]?["name"]?.string ?? error["message"]?.string ?? "unknown",
                                             detail: error["data"]?["detail"]?.string ?? "",
                                             method: "request \(id)"))
            } else {
                c.resume(returning: message["result"] ?? .null)
            }
        } else if let method = message["method"]?.string {
            notificationSink.yield(Notification(method: method, params: message["params"] ?? [:]))
        }
    }

    private func closed(_ reason: String) {
        let pending = state.withLock { s -> [CheckedContinuation<JSON, any Error>] in
            if s.closed != nil { return [] }
            s.closed = reason
            let all = Array(s.pending.values)
            s.pending.removeAll()
            return all
        }
        for c in pending { c.resume(throwing: ClientError.connectionClosed(reason)) }
        notificationSink.finish()
    }
}

/// Resumes `connect` once: when the socket opens, or with the reason it never did.
private final class OpenSignal: Sendable {
    private let continuation = Mutex<CheckedContinuation<Void, any Error>?>(nil)
    func set(_ c: CheckedContinuation<Void, any Error>) { continuation.withLock { $0 = c } }
    func finish(_ error: (any Error)?) {
        guard let c = continuation.withLock({ c -> CheckedContinuation<Void, any Error>? in defer { c = nil }; return c }) else { return }
        if let error { c.resume(throwing: error) } else { c.resume() }
    }
}
