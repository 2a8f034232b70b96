import Foundation
import Logging
import Testing
@testable import MinatoRooms
@testable import MinatoSignaling

/// What a client that holds nothing can still make the server keep: WHIP/WHEP session starts
/// per address, rooms nobody uses, session URLs of any length.
@Suite struct SessionLimitTests {
    @Test func eachAddressGetsABurstThenItsRate() {
        var limiter = AddressRateLimiter(perSecond: 5)
        let t0 = ContinuousClock.now
        let first = (0..<7).map { _ in limiter.admit("198.18.0.1", now: t0) }
        #expect(first == [true, true, true, true, true, false, false])
        let other = limiter.admit("198.18.0.2", now: t0)                       // another address: its own bucket
        let refilled = limiter.admit("198.18.0.1", now: t0 + .milliseconds(200))  // one more after 1/5 s
        let tooSoon = limiter.admit("198.18.0.1", now: t0 + .milliseconds(250))
        let later = limiter.admit("198.18.0.1", now: t0 + .seconds(2))
        #expect(other && refilled && !tooSoon && later)
    }

    @Test func theAddressTableIsBoundedAndForgetsRefilledAddresses() {
        var limiter = AddressRateLimiter(perSecond: 1, maxAddresses: 3)
        let t0 = ContinuousClock.now
        let three = (0..<3).map { limiter.admit("a\($0)", now: t0) }
        #expect(three == [true, true, true])
        // Full of addresses that are all still limited: a fourth is refused, and nothing grows.
        let fourth = limiter.admit("a3", now: t0)
        #expect(!fourth && limiter.count == 3)
        // A second later their buckets are full again: forgotten, and the newcomer gets in.
        let later = limiter.admit("a3", now: t0 + .seconds(1))
        #expect(later && limiter.count == 1)
    }

    @Test func aSessionUrlThatIsNotThirtyTwoHexDigitsIsNoSession() async {
        let s = RoomSafetyTests.service()
        #expect(await s.mediaSessionExists(String(repeating: "a", count: 32)) == false)
        #expect(await s.mediaSessionExists(String(repeating: "a", count: 100_000)) == false)
        #expect(await s.mediaSessionExists("") == false)
    }

    /// A room with no member closes after rooms.emptyTimeoutSec (1 s here), with `closed`
    /// (reason emptyTimeout) to its listener; a room with a member stays, and so does an admin's
    /// keepWhenEmpty room. Waits on the condition (the sweep runs on the real clock).
    @Test func emptyRoomsCloseAfterTheirTimeoutUnlessKept() async throws {
        let s = RoomSafetyTests.service { $0.emptyTimeoutSec = 1 }
        await s.start()
        let owner = RoomSafetyTests.Client(id: 1)
        let empty = try await RoomSafetyTests.call(s, owner, "findOrCreateRoom", ["name": "empty"])
        let emptyId = try #require(empty["room"]?["id"]?.stringValue)
        _ = try await RoomSafetyTests.call(s, owner, "subscribeRoomEvents", ["roomId": .string(emptyId)])
        let used = try await RoomSafetyTests.call(s, owner, "createRoom", ["name": "used"])
        let usedId = try #require(used["room"]?["id"]?.stringValue)
        _ = try await RoomSafetyTests.call(s, owner, "join", ["roomId": .string(usedId), "name": "m"])
        let kept = try await s.adminCreateRoom(name: "kept", metadata: nil, password: nil, keepWhenEmpty: true)
        let keptId = try #require(kept["room"]?["id"]?.stringValue)

        var names: Set<String> = []
        for _ in 0..<100 {
            names = Set(Self.rooms(await s.snapshot()).compactMap { $0["name"]?.stringValue })
            if !names.contains("empty") { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(names == ["used", "kept"])
        let closed = owner.inbox.take().compactMap { $0["params"] }.first { $0["type"]?.stringValue == "closed" }
        #expect(closed?["roomId"]?.stringValue == emptyId && closed?["reason"]?.stringValue == "emptyTimeout")
        #expect(Self.rooms(await s.snapshot()).contains { $0["id"]?.stringValue == keptId })
    }

    static func rooms(_ snapshot: JSONValue) -> [JSONValue] {
        if case .array(let a)? = snapshot["rooms"] { return a }
        return []
    }
}
