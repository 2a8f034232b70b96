import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import MinatoClient

/// Janus's HTTP API (bench/JANUS-NOTES.md): one session, many VideoRoom handles, one long
/// poll dispatching asynchronous plugin events by transaction and `webrtcup` by sender.
actor JanusAPI {
    let base: String
    let sessionId: UInt64
    private var waiters: [String: CheckedContinuation<JSON, any Error>] = [:]
    private var early: [String: JSON] = [:]
    private var upHandles: Set<UInt64> = []
    private var tasks: [Task<Void, Never>] = []
    private var closed = false
    var isClosed: Bool { closed }

    private init(base: String, sessionId: UInt64) {
        self.base = base
        self.sessionId = sessionId
    }

    static func transaction() -> String { String(UInt64.random(in: 0...UInt64.max), radix: 36) }

    static func post(_ url: String, _ body: JSON) async throws -> JSON {
        let (status, data) = try await httpRequest(url, method: "POST", body: Data(body.serialized().utf8), timeout: 30)
        guard status == 200 else { throw BenchError("Janus answered HTTP \(status) to POST \(url)") }
        let reply = try JSON.parse(String(decoding: data, as: UTF8.self))
        if reply["janus"]?.string == "error" {
            throw BenchError("Janus error \(reply["error"]?["code"]?.int ?? 0): \(reply["error"]?["reason"]?.string ?? "")")
        }
        return reply
    }

    /// Creates a session and starts its long poll and keepalive.
    static func connect(base: String = "http://127.0.0.1:8088/janus") async throws -> JanusAPI {
        let reply = try await post(base, ["janus": "create", "transaction": .string(transaction())])
        guard let id = reply["data"]?["id"]?.uint64 else { throw BenchError("Janus create returned no session id") }
        let api = JanusAPI(base: base, sessionId: id)
        await api.startLoops()
        return api
    }

    private func startLoops() {
        let url = "\(base)/\(sessionId)?maxev=10"
        // These loops are never cancelled: cancelling a task inside FoundationNetworking's
        // `URLSession.data(for:)` deadlocks (swift-corelibs-foundation). They stop on `closed`.
        tasks.append(Task { [weak self] in
            while let self, await !self.isClosed {
                guard let (status, data) = try? await httpRequest(url, method: "GET", body: nil, timeout: 40),
                      status == 200, let json = try? JSON.parse(String(decoding: data, as: UTF8.self)) else {
                    try? await Task.sleep(for: .milliseconds(100))
                    continue
                }
                for event in json.array ?? [json] { await self.dispatch(event) }
            }
        })
        let sessionURL = "\(base)/\(sessionId)"
        tasks.append(Task { [weak self] in
            while let self, await !self.isClosed {
                for _ in 0..<40 where await !self.isClosed { try? await Task.sleep(for: .milliseconds(500)) }
                if await self.isClosed { break }
                _ = try? await JanusAPI.post(sessionURL, ["janus": "keepalive", "transaction": .string(JanusAPI.transaction())])
            }
        })
    }

    private func dispatch(_ event: JSON) {
        switch event["janus"]?.string {
        case "webrtcup":
            guard let sender = event["sender"]?.uint64 else { return }
            upHandles.insert(sender)
        case "event":
            guard let t = event["transaction"]?.string else { return }
            if let w = waiters.removeValue(forKey: t) { w.resume(returning: event) } else { early[t] = event }
        default: break
        }
    }

    func attach() async throws -> UInt64 {
        let reply = try await JanusAPI.post("\(base)/\(sessionId)",
                                            ["janus": "attach", "plugin": "janus.plugin.videoroom", "transaction": .string(JanusAPI.transaction())])
        guard let id = reply["data"]?["id"]?.uint64 else { throw BenchError("Janus attach returned no handle id") }
        return id
    }

    /// Sends a plugin message; returns the synchronous reply or, after an ack, the event for it.
    func message(handle: UInt64, body: JSON, jsep: JSON? = nil) async throws -> JSON {
        let t = JanusAPI.transaction()
        var request: [String: JSON] = ["janus": "message", "transaction": .string(t), "body": body]
        if let jsep { request["jsep"] = jsep }
        let reply = try await JanusAPI.post("\(base)/\(sessionId)/\(handle)", .object(request))
        let event: JSON
        if reply["janus"]?.string == "ack" {
            if let e = early.removeValue(forKey: t) { event = e } else {
                let timeout = Task { [weak self] in
                    try? await Task.sleep(for: .seconds(20))
                    await self?.expire(t)
                }
                event = try await withCheckedThrowingContinuation { waiters[t] = $0 }
                timeout.cancel()
            }
        } else {
            event = reply
        }
        if let data = event["plugindata"]?["data"], let code = data["error_code"]?.int {
            throw BenchError("Janus VideoRoom error \(code): \(data["error"]?.string ?? "")")
        }
        return event
    }

    private func expire(_ t: String) {
        waiters.removeValue(forKey: t)?.resume(throwing: BenchError("Janus sent no reply event in 20 s (transaction \(t))"))
    }

    /// Waits (up to 20 s) for the handle's `webrtcup` (ICE + DTLS up on Janus's side).
    func waitUp(_ handle: UInt64) async throws {
        for _ in 0..<200 {
            if upHandles.contains(handle) { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("Janus reported no webrtcup for handle \(handle) in 20 s")
    }

    /// Destroys the session (every handle with it) and stops the loops.
    func close() async {
        guard !closed else { return }
        closed = true
        _ = try? await JanusAPI.post("\(base)/\(sessionId)", ["janus": "destroy", "transaction": .string(JanusAPI.transaction())])
        for (_, w) in waiters { w.resume(throwing: BenchError("Janus session closed")) }
        waiters.removeAll()
    }
}

extension JSON {
    var uint64: UInt64? { if case .number(let n) = self, n >= 0 { return UInt64(exactly: n.rounded()) }; return nil }
}
