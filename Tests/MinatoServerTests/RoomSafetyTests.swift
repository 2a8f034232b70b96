import Foundation
import Logging
import Testing
@testable import MinatoRooms
@testable import MinatoSignaling

/// The room service's ownership and limits, driven through JSON-RPC text on in-process
/// channels (no sockets, no media: none of these methods reaches a worker).
@Suite struct RoomSafetyTests {
    final class Inbox: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [[String: JSONValue]] = []
        func add(_ text: String) {
            guard case .object(let o)? = try? JSONValue.parse(text) else { return }
            lock.lock(); items.append(o); lock.unlock()
        }
        func take() -> [[String: JSONValue]] { lock.lock(); defer { items = []; lock.unlock() }; return items }
    }

    struct Client {
        let channel: ClientChannel
        let inbox = Inbox()
        init(id: UInt64) {
            let inbox = self.inbox
            channel = ClientChannel(id: id) { inbox.add($0) }
        }
    }

    static func service(_ configure: (inout RoomConfiguration) -> Void = { _ in }) -> RoomService {
        var c = RoomConfiguration()
        configure(&c)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        return RoomService(configuration: c, workers: [], logger: logger)
    }

    /// Sends one request and returns its result, or throws the error it got.
    static func call(_ service: RoomService, _ client: Client, _ method: String, _ params: JSONValue) async throws -> JSONValue {
        let text = JSONValue.object(["jsonrpc": "2.0", "id": 1, "method": .string(method), "params": params]).serialized()
        await SignalingFrontDoor(rooms: service).handle(text: text, channel: client.channel)
        for message in client.inbox.take() where message["id"] != nil {
            if let result = message["result"] { return result }
            if case .object(let e)? = message["error"], let name = e["message"]?.stringValue {
                throw RoomError(code: e["code"]?.intValue ?? 0, name: name, detail: e["data"]?["detail"]?.stringValue ?? "")
            }
        }
        throw RoomError.internalError("no response")
    }

    static func errorName(_ body: () async throws -> JSONValue) async -> String? {
        do { _ = try await body(); return nil } catch let e as RoomError { return e.name } catch { return "\(error)" }
    }

    @Test func takeoverNeedsTheReconnectSecret() async throws {
        let s = Self.service()
        let owner = Client(id: 1), other = Client(id: 2)
        let room = try await Self.call(s, owner, "createRoom", ["name": "r", "password": "pw"])
        let roomId = try #require(room["room"]?["id"]?.stringValue)
        let joined = try await Self.call(s, owner, "join", ["roomId": .string(roomId), "name": "alice", "password": "pw"])
        let memberId = try #require(joined["member"]?["id"]?.stringValue)
        let secret = try #require(joined["reconnectSecret"]?.stringValue)
        #expect(secret.count == 64)
        // The secret is nowhere but in the join result.
        let view = try await Self.call(s, other, "getRoom", ["roomId": .string(roomId)])
        #expect(!view.serialized().contains(secret))

        #expect(await Self.errorName { try await Self.call(s, other, "keepalive", ["memberId": .string(memberId)]) } == "insufficientPermissions")
        #expect(await Self.errorName {
            try await Self.call(s, other, "keepalive", ["memberId": .string(memberId), "reconnectSecret": .string(String(repeating: "0", count: 64))])
        } == "insufficientPermissions")
        #expect(await Self.errorName {
            try await Self.call(s, other, "updateMemberMetadata", ["memberId": .string(memberId), "metadata": "x"])
        } == "notJoined")
        // replace:true is a join: it needs the password.
        #expect(await Self.errorName {
            try await Self.call(s, other, "join", ["roomId": .string(roomId), "name": "alice", "replace": true])
        } == "wrongPassword")
        // The owner still owns it.
        _ = try await Self.call(s, owner, "keepalive", ["memberId": .string(memberId)])
        // With the secret, the other connection takes it over; the old one no longer acts as it.
        _ = try await Self.call(s, other, "keepalive", ["memberId": .string(memberId), "reconnectSecret": .string(secret)])
        #expect(await Self.errorName {
            try await Self.call(s, owner, "updateMemberMetadata", ["memberId": .string(memberId), "metadata": "x"])
        } == "notJoined")
    }

    @Test func roomsAndMembersPerConnectionAreBounded() async throws {
        let s = Self.service { $0.maxRoomsCreatedPerConnection = 2; $0.maxMembersPerConnection = 2; $0.maxRooms = 3 }
        let a = Client(id: 1), b = Client(id: 2)
        _ = try await Self.call(s, a, "createRoom", ["name": "r1"])
        _ = try await Self.call(s, a, "findOrCreateRoom", ["name": "r2"])
        #expect(await Self.errorName { try await Self.call(s, a, "createRoom", ["name": "r3"]) } == "limitExceeded")
        // Finding an existing room is not creating one.
        _ = try await Self.call(s, a, "findOrCreateRoom", ["name": "r1"])
        _ = try await Self.call(s, b, "createRoom", ["name": "r3"])
        #expect(await Self.errorName { try await Self.call(s, b, "createRoom", ["name": "r4"]) } == "limitExceeded")   // maxRooms
        let r1 = try await Self.call(s, a, "findRoom", ["name": "r1"])
        let id = try #require(r1["room"]?["id"]?.stringValue)
        _ = try await Self.call(s, a, "join", ["roomId": .string(id), "name": "m1"])
        _ = try await Self.call(s, a, "join", ["roomId": .string(id), "name": "m2"])
        #expect(await Self.errorName { try await Self.call(s, a, "join", ["roomId": .string(id), "name": "m3"]) } == "limitExceeded")
        _ = try await Self.call(s, b, "join", ["roomId": .string(id), "name": "m3"])
        #expect(await s.counts().members == 3)
    }

    @Test func keepaliveIntervalsAreCapped() async throws {
        let s = Self.service()
        let a = Client(id: 1)
        let r = try await Self.call(s, a, "createRoom", ["name": "r"])
        let id = try #require(r["room"]?["id"]?.stringValue)
        #expect(await Self.errorName {
            try await Self.call(s, a, "join", ["roomId": .string(id), "keepaliveIntervalGapSec": 100_000])
        } == "limitExceeded")
        #expect(await Self.errorName {
            try await Self.call(s, a, "join", ["roomId": .string(id), "keepaliveIntervalSec": 0])
        } == "invalidParameter")
        #expect(await s.counts().members == 0)
    }

    @Test func roomEventsArePagedAndTheLogIsBoundedInBytes() async throws {
        let s = Self.service { $0.maxEventsPerPage = 10; $0.maxEventLogBytes = 64 * 1024 }
        let a = Client(id: 1)
        let r = try await Self.call(s, a, "createRoom", ["name": "r"])
        let id = try #require(r["room"]?["id"]?.stringValue)
        let joined = try await Self.call(s, a, "join", ["roomId": .string(id), "name": "m"])
        let member = try #require(joined["member"]?["id"]?.stringValue)
        for i in 0..<24 {
            _ = try await Self.call(s, a, "updateMemberMetadata", ["memberId": .string(member), "metadata": .string("\(i)")])
        }
        // 25 events (join + 24 updates), pages of at most 10.
        var offset = 0, seen: [Int] = []
        while true {
            let page = try await Self.call(s, a, "subscribeRoomEvents", ["roomId": .string(id), "offset": .int(offset)])
            guard case .array(let events)? = page["events"] else { Issue.record("no events"); return }
            #expect(events.count <= 10)
            seen += events.compactMap { $0["version"]?.intValue }
            guard let next = page["nextOffset"]?.intValue else { break }
            offset = next
        }
        #expect(seen == Array(1...25))
        #expect(await Self.errorName {
            try await Self.call(s, a, "subscribeRoomEvents", ["roomId": .string(id), "offset": 0, "limit": 11])
        } == "invalidParameter")
        // 4 KB of metadata per event: the log keeps at most 64 KiB of them.
        let big = String(repeating: "x", count: 4000)
        for _ in 0..<40 { _ = try await Self.call(s, a, "updateMemberMetadata", ["memberId": .string(member), "metadata": .string(big)]) }
        let all = try await Self.call(s, a, "subscribeRoomEvents", ["roomId": .string(id), "offset": 0, "limit": 10])
        guard case .array(let kept)? = all["events"] else { Issue.record("no events"); return }
        let first = try #require(kept.first?["version"]?.intValue)
        #expect(first > 40)   // the oldest were dropped for bytes, not count (10,000)
    }

    @Test func encodingsAreValidatedAndCapped() throws {
        func check(_ value: JSONValue) -> String? {
            // Front-door parsing, then the core's checks.
            do {
                _ = try Validate.encodings(try Params(["encodings": value]).encodings("encodings"), key: "encodings", max: 4)
                return nil
            } catch { return error.name }
        }
        #expect(check([["id": "low", "maxBitrate": 100_000, "scaleResolutionDownBy": 4], ["id": "high"]]) == nil)
        #expect(check(.array(Array(repeating: ["id": "a"], count: 5))) == "limitExceeded")
        #expect(check([["id": .string(String(repeating: "a", count: 100_000))]]) == "invalidParameter")
        #expect(check([["id": "a", "evil": "x"]]) == "invalidParameter")
        #expect(check([["id": "a"], ["id": "a"]]) == "invalidParameter")
        #expect(check([["id": "a", "maxBitrate": -1]]) == "invalidParameter")
        #expect(check([["id": "a", "scaleResolutionDownBy": .double(0.5)]]) == "invalidParameter")
        #expect(check(["not an object"]) == "invalidParameter")
    }
}

extension RoomSafetyTests {
    @Test func trickledCandidatesAreCountedOnlyWhenAccepted() async throws {
        let s = Self.service()
        let a = Client(id: 1)
        let r = try await Self.call(s, a, "createRoom", ["name": "r"])
        let id = try #require(r["room"]?["id"]?.stringValue)
        let joined = try await Self.call(s, a, "join", ["roomId": .string(id), "name": "m"])
        let member = try #require(joined["member"]?["id"]?.stringValue)
        func ice(_ text: String) async -> String? {
            await Self.errorName {
                try await Self.call(s, a, "iceCandidate", ["memberId": .string(member), "direction": "send",
                                                           "candidate": ["candidate": .string(text), "sdpMid": "0", "sdpMLineIndex": 0]])
            }
        }
        #expect(await ice("candidate:" + String(repeating: "x", count: 2000)) == "invalidParameter")
        #expect(await ice("not a candidate") == "invalidParameter")
        for i in 0..<64 { #expect(await ice("candidate:\(i) 1 udp 1 127.0.0.1 \(5000 + i) typ host") == nil, "candidate \(i)") }
        #expect(await ice("candidate:x 1 udp 1 127.0.0.1 6000 typ host") == "limitExceeded")
    }
}
