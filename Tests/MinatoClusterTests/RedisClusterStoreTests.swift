import Foundation
import Synchronization
import XCTest
@testable import MinatoCluster

/// A `redis-server` child process (Debian's, /usr/bin/redis-server) listening only on a unix
/// socket in a fresh temporary directory: no TCP port (`--port 0`), no persistence. Each test
/// class owns one; `start` returns once the socket answers PING.
final class RedisServerProcess: Sendable {
    let directory: String
    let socketPath: String
    var url: String { "unix://\(socketPath)" }
    private let process = Mutex<Process?>(nil)

    init() {
        directory = NSTemporaryDirectory() + "minato-redis-" + UUID().uuidString.prefix(8).lowercased()
        socketPath = directory + "/redis.sock"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    var isRunning: Bool { process.withLock { $0?.isRunning ?? false } }

    /// Starts the server (on the same socket path every time) and waits until it answers PING.
    func start() async throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/redis-server")
        p.arguments = ["--port", "0", "--unixsocket", socketPath, "--unixsocketperm", "700",
                       "--save", "", "--appendonly", "no", "--daemonize", "no",
                       "--dir", directory, "--logfile", directory + "/redis.log"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        process.withLock { $0 = p }
        let probe = try RedisConnection(url: url, connectTimeoutMs: 200, commandTimeoutMs: 200)
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            if case .status("PONG")? = try? await probe.command(["PING"]) { return }
            guard p.isRunning else { throw ServerError("redis-server exited (status \(p.terminationStatus)); see \(directory)/redis.log") }
            guard ContinuousClock.now < deadline else { throw ServerError("redis-server did not answer PING on \(socketPath)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func startIfNeeded() async throws {
        if !isRunning { try await start() }
    }

    /// Kills the server (SIGKILL) and waits for it to exit. Never SIGTERM: it keeps nothing
    /// worth a clean shutdown, and a child spawned from a dispatch thread inherits that
    /// thread's signal mask, which blocks SIGTERM (the wait would never end).
    func stop() {
        guard let p = process.withLock({ p in defer { p = nil }; return p }) else { return }
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        p.waitUntilExit()
    }

    /// Stops the server and removes its directory.
    func finish() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    struct ServerError: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
func eventually(timeout: Duration = .seconds(15), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

func node(_ id: String) -> NodeRecord {
    NodeRecord(id: id, url: "http://127.0.0.1:8080/\(id)", state: .serving,
               load: NodeLoad(rooms: 1, members: 2, transports: 3, cpuPercent: 4.5),
               renewedAtMs: 1_700_000_000_000, startedAtMs: 1_690_000_000_000)
}

final class RedisClusterStoreTests: XCTestCase {
    static let server = RedisServerProcess()
    /// Every test writes under its own prefix, so no test sees another's keys.
    let prefix = "test-\(UUID().uuidString.prefix(8)):"

    override func setUp() async throws {
        try await Self.server.startIfNeeded()
    }

    override class func tearDown() {
        server.finish()
        super.tearDown()
    }

    func makeStore() throws -> RedisClusterStore {
        try RedisClusterStore(url: Self.server.url, keyPrefix: prefix)
    }

    /// A renewal the node saw fail (it timed out) may still reach Redis later, when a partition
    /// heals and TCP retransmits it. That lease is not the node's last acknowledged one, so the
    /// next renewal reports it as lapsed (and the node re-claims its rooms).
    func testLeaseWrittenByAFailedRenewalDoesNotCountAsAlive() async throws {
        let store = try makeStore()
        var a = node("a")
        a.renewal = 1
        let first = try await store.renewLease(a, leaseMs: 60_000, previous: nil)
        XCTAssertFalse(first, "no acknowledged renewal yet: not alive")
        a.renewal = 2
        let second = try await store.renewLease(a, leaseMs: 60_000, previous: 1)
        XCTAssertTrue(second, "the lease found is renewal 1, the last acknowledged")
        // Renewal 3 'fails' at the node (it never sees the answer) but lands in Redis.
        a.renewal = 3
        _ = try await store.renewLease(a, leaseMs: 60_000, previous: 2)
        a.renewal = 4
        let afterLateWrite = try await store.renewLease(a, leaseMs: 60_000, previous: 2)
        XCTAssertFalse(afterLateWrite, "the lease found is renewal 3, which the node never saw acknowledged")
        a.renewal = 5
        let next = try await store.renewLease(a, leaseMs: 60_000, previous: 4)
        XCTAssertTrue(next)
    }

    func testLeaseRenewsExpiresAndLiveNodesFollows() async throws {
        let store = try makeStore()
        let a = node("a"), b = node("b")
        let firstA = try await store.renewLease(a, leaseMs: 60_000)
        let secondA = try await store.renewLease(a, leaseMs: 60_000)
        XCTAssertFalse(firstA, "a first lease is not a renewal")
        XCTAssertTrue(secondA, "a live lease renews")

        let firstB = try await store.renewLease(b, leaseMs: 200)
        XCTAssertFalse(firstB)
        let both = try await store.liveNodes()
        XCTAssertEqual(Set(both.map(\.id)), ["a", "b"])
        XCTAssertEqual(both.first { $0.id == "a" }, a, "the record round-trips through JSON")

        let lapsed = try await eventually { try await store.liveNodes().map(\.id) == ["a"] }
        XCTAssertTrue(lapsed, "b's 200 ms lease never lapsed")
        let renewedB = try await store.renewLease(b, leaseMs: 60_000)
        XCTAssertFalse(renewedB, "a lapsed lease is not a renewal")
        let again = try await store.liveNodes()
        XCTAssertEqual(Set(again.map(\.id)), ["a", "b"])

        try await store.dropLease(nodeId: "b")
        let afterDrop = try await store.liveNodes()
        XCTAssertEqual(afterDrop.map(\.id), ["a"])
    }

    func testLiveNodesSkipsUndecodableRecords() async throws {
        let store = try makeStore()
        _ = try await store.renewLease(node("good"), leaseMs: 60_000)
        _ = try await store.connection.command(["SET", prefix + "node:bad", "{not json", "PX", "60000"])
        _ = try await store.connection.command(["SADD", prefix + "nodes", "bad"])
        let live = try await store.liveNodes()
        XCTAssertEqual(live.map(\.id), ["good"])
    }

    func testConcurrentReservationsAgreeOnOneOwner() async throws {
        let ids = ["n1", "n2", "n3"]
        // One store (one connection) per node, as in a real cluster.
        let stores = try ids.map { _ in try makeStore() }
        for (store, id) in zip(stores, ids) { _ = try await store.renewLease(node(id), leaseMs: 60_000) }
        let owners = try await withThrowingTaskGroup(of: String.self) { group in
            for i in 0..<50 {
                let store = stores[i % 3], id = ids[i % 3]
                group.addTask { try await store.reserveRoomName("lobby", for: id) }
            }
            var owners: [String] = []
            for try await owner in group { owners.append(owner) }
            return owners
        }
        XCTAssertEqual(owners.count, 50)
        XCTAssertEqual(Set(owners).count, 1, "reservations disagreed: \(Set(owners))")
        XCTAssertTrue(ids.contains(owners[0]))
    }

    func testNameOfDeadNodeIsTakenOver() async throws {
        let store = try makeStore()
        _ = try await store.renewLease(node("alive"), leaseMs: 60_000)
        _ = try await store.renewLease(node("dying"), leaseMs: 200)
        let reserved = try await store.reserveRoomName("reserved", for: "dying")
        XCTAssertEqual(reserved, "dying")
        try await store.roomOpened(RoomRecord(id: "r-dying", name: "opened", nodeId: "dying"))
        let heldByOther = try await store.reserveRoomName("reserved", for: "alive")
        XCTAssertEqual(heldByOther, "dying", "a live holder keeps its name")

        let lapsed = try await eventually { try await !store.liveNodes().map(\.id).contains("dying") }
        XCTAssertTrue(lapsed)
        let takenOver = try await store.reserveRoomName("reserved", for: "alive")
        XCTAssertEqual(takenOver, "alive", "a dead holder's reservation is taken over")
        try await store.roomOpened(RoomRecord(id: "r-alive", name: "opened", nodeId: "alive"))
        let holder = try await store.reserveRoomName("opened", for: "third")
        XCTAssertEqual(holder, "alive", "a dead holder's room name is taken over by roomOpened")

        // The reaper then removes the dead node's room, but not the name it lost.
        let reaped = try await store.reapDeadNodes()
        XCTAssertEqual(reaped, [RoomRecord(id: "r-dying", name: "opened", nodeId: "dying")])
        let stillHeld = try await store.reserveRoomName("opened", for: "third")
        XCTAssertEqual(stillHeld, "alive")
        let rooms = try await store.rooms()
        XCTAssertEqual(rooms, [RoomRecord(id: "r-alive", name: "opened", nodeId: "alive")])
    }

    func testRoomOpenedWithNameHeldByAnotherLiveNodeThrows() async throws {
        let store = try makeStore()
        _ = try await store.renewLease(node("a"), leaseMs: 60_000)
        _ = try await store.renewLease(node("b"), leaseMs: 60_000)
        let reserved = try await store.reserveRoomName("math", for: "a")
        XCTAssertEqual(reserved, "a")
        do {
            try await store.roomOpened(RoomRecord(id: "r-b", name: "math", nodeId: "b"))
            XCTFail("b recorded a room under a's name")
        } catch {
            XCTAssertEqual(error, .nameHeldElsewhere("a"))
        }
        // The holder turns its reservation into the room; unnamed rooms never conflict.
        try await store.roomOpened(RoomRecord(id: "r-a", name: "math", nodeId: "a"))
        try await store.roomOpened(RoomRecord(id: "r-b2", name: nil, nodeId: "b"))
        let rooms = try await store.rooms()
        XCTAssertEqual(Set(rooms), [RoomRecord(id: "r-a", name: "math", nodeId: "a"),
                                    RoomRecord(id: "r-b2", name: nil, nodeId: "b")])
        do {
            try await store.roomOpened(RoomRecord(id: "r-b", name: "math", nodeId: "b"))
            XCTFail("b recorded a room under a's name")
        } catch {
            XCTAssertEqual(error, .nameHeldElsewhere("a"))
        }
    }

    func testRoomClosedRemovesOnlyTheOwnersRecords() async throws {
        let store = try makeStore()
        _ = try await store.renewLease(node("a"), leaseMs: 60_000)
        _ = try await store.renewLease(node("b"), leaseMs: 60_000)
        let room = RoomRecord(id: "r1", name: "lobby", nodeId: "a")
        try await store.roomOpened(room)

        // b claims to close a's room: nothing moves.
        try await store.roomClosed(RoomRecord(id: "r1", name: "lobby", nodeId: "b"))
        try await store.roomClosed(RoomRecord(id: "r1", name: nil, nodeId: "b"))
        let afterOther = try await store.rooms()
        XCTAssertEqual(afterOther, [room])
        let stillA = try await store.reserveRoomName("lobby", for: "b")
        XCTAssertEqual(stillA, "a")

        // a closing another room of the same name does not free the name of r1 either.
        try await store.roomClosed(RoomRecord(id: "r-other", name: "lobby", nodeId: "a"))
        let stillA2 = try await store.reserveRoomName("lobby", for: "b")
        XCTAssertEqual(stillA2, "a")

        // The owner's close removes the room and frees its name (passed without the name, the
        // recorded one is freed too).
        try await store.roomClosed(RoomRecord(id: "r1", name: nil, nodeId: "a"))
        let afterOwner = try await store.rooms()
        XCTAssertEqual(afterOwner, [])
        let nowB = try await store.reserveRoomName("lobby", for: "b")
        XCTAssertEqual(nowB, "b")

        // A reservation that never became a room is released by its holder's roomClosed.
        try await store.roomClosed(RoomRecord(id: "never-opened", name: "lobby", nodeId: "b"))
        let nowA = try await store.reserveRoomName("lobby", for: "a")
        XCTAssertEqual(nowA, "a")
        let members = try await store.connection.command(["SMEMBERS", prefix + "noderooms:a"])
        XCTAssertEqual(members, .array([]))
    }

    func testReapersRemoveExactlyTheDeadNodesRoomsOnce() async throws {
        let store = try makeStore(), otherStore = try makeStore()
        _ = try await store.renewLease(node("live"), leaseMs: 60_000)
        _ = try await store.renewLease(node("dead"), leaseMs: 200)
        let liveRooms = [RoomRecord(id: "l1", name: nil, nodeId: "live"), RoomRecord(id: "l2", name: "live-named", nodeId: "live")]
        let deadRooms = (0..<20).map { i in RoomRecord(id: "d\(i)", name: i % 2 == 0 ? "dead-\(i)" : nil, nodeId: "dead") }
        for room in liveRooms + deadRooms { try await store.roomOpened(room) }
        _ = try await store.reserveRoomName("dead-reservation", for: "dead")

        let nothingYet = try await store.reapDeadNodes()
        XCTAssertEqual(nothingYet, [], "a live node was reaped")
        let lapsed = try await eventually { try await store.liveNodes().map(\.id) == ["live"] }
        XCTAssertTrue(lapsed)

        async let first = store.reapDeadNodes()
        async let second = otherStore.reapDeadNodes()
        let (one, two) = try await (first, second)
        XCTAssertTrue(Set(one).isDisjoint(with: Set(two)), "a room was reaped twice")
        XCTAssertEqual(one.count + two.count, deadRooms.count)
        XCTAssertEqual(Set(one).union(two), Set(deadRooms))
        print("RedisClusterStoreTests: concurrent reapers removed \(one.count) and \(two.count) rooms")

        let left = try await store.rooms()
        XCTAssertEqual(Set(left), Set(liveRooms))
        let again = try await store.reapDeadNodes()
        XCTAssertEqual(again, [])
        guard case .array(let keys) = try await store.connection.command(["KEYS", prefix + "*"]) else { return XCTFail("KEYS") }
        let names = Set(keys.compactMap { $0.string.map { String($0.dropFirst(prefix.count)) } })
        XCTAssertEqual(names, ["node:live", "nodes", "rooms", "room:l1", "room:l2", "noderooms:live", "nodenames:live",
                               "roomname:live-named"], "the dead node left keys behind")
        for name in ["dead-0", "dead-reservation"] {
            let holder = try await store.reserveRoomName(name, for: "live")
            XCTAssertEqual(holder, "live", "\(name) was not freed")
        }
        let nodes = try await store.connection.command(["SMEMBERS", prefix + "nodes"])
        XCTAssertEqual(nodes, .array([.bulk(Array("live".utf8))]))
    }

    func testEmptiedStoreMeansNoLease() async throws {
        let store = try makeStore()
        _ = try await store.renewLease(node("a"), leaseMs: 60_000)
        let renewed = try await store.renewLease(node("a"), leaseMs: 60_000)
        XCTAssertTrue(renewed)
        try await store.roomOpened(RoomRecord(id: "r", name: "n", nodeId: "a"))
        let flushed = try await store.connection.command(["FLUSHALL"])
        XCTAssertEqual(flushed, .status("OK"))
        let afterFlush = try await store.renewLease(node("a"), leaseMs: 60_000)
        XCTAssertFalse(afterFlush, "after FLUSHALL the lease is gone: the node must re-claim its rooms")
        let rooms = try await store.rooms()
        XCTAssertEqual(rooms, [])
    }

    func testDatabaseIsSelectedOnEveryConnect() async throws {
        // The URL form (redis://host/db) needs TCP; the same endpoint over the test's socket.
        let endpoint = RedisEndpoint(address: .unix(path: Self.server.socketPath), database: 3)
        let connection = RedisConnection(endpoint: endpoint)
        let key = prefix + "db-check"
        _ = try await connection.command(["SET", key, "in-3"])
        let other = try RedisConnection(url: Self.server.url)
        let inZero = try await other.command(["GET", key])
        XCTAssertEqual(inZero, .null)
        _ = try await other.command(["SELECT", "3"])
        let inThree = try await other.command(["GET", key])
        XCTAssertEqual(inThree.string, "in-3")
        _ = try await connection.command(["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
        // `connection` lost its connection: the first command fails, the next reconnects and
        // selects 3 again.
        _ = try? await connection.command(["PING"])
        let again = try await connection.command(["GET", key])
        XCTAssertEqual(again.string, "in-3")
        _ = try await connection.command(["DEL", key])
    }

    func testScriptsRunByShaAndAfterScriptFlush() async throws {
        XCTAssertEqual(sha1Hex(Array("abc".utf8)), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(sha1Hex([]), "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        XCTAssertEqual(sha1Hex(Array(String(repeating: "a", count: 1000).utf8)), "291e9a6c66994949b57ba5e650361e98fc36b1ba")
        XCTAssertEqual(sha1Hex(Array(String(repeating: "a", count: 55).utf8)), "c1c8bbdc22796e28c0e15163d20899b65621d65a")
        XCTAssertEqual(sha1Hex(Array(String(repeating: "a", count: 64).utf8)), "0098ba824b5c16427bd7a1122a5a442a25ec644d")
        let store = try makeStore()
        for script in [Scripts.renewLease, Scripts.reserveRoomName, Scripts.roomOpened, Scripts.roomClosed,
                       Scripts.rooms, Scripts.reapDeadNodes] {
            let loaded = try await store.connection.command(["SCRIPT", "LOAD", script.source])
            XCTAssertEqual(loaded.string, script.sha1)
        }
        _ = try await store.connection.command(["SCRIPT", "FLUSH"])
        let first = try await store.reserveRoomName("x", for: "a")   // NOSCRIPT, then EVAL
        let second = try await store.reserveRoomName("x", for: "a")  // by SHA
        XCTAssertEqual([first, second], ["a", "a"])
        try await store.ping()
    }
}

/// Kills its redis-server under a store and starts it again: every call fails fast with
/// `.unavailable`, then works again on a new connection.
final class RedisClusterStoreOutageTests: XCTestCase {
    static let server = RedisServerProcess()

    override func setUp() async throws {
        try await Self.server.startIfNeeded()
    }

    override class func tearDown() {
        server.finish()
        super.tearDown()
    }

    func expectUnavailable<T>(_ what: String, _ body: () async throws(ClusterStoreError) -> T) async {
        let start = ContinuousClock.now
        do {
            _ = try await body()
            XCTFail("\(what) succeeded with redis-server killed")
        } catch {
            guard case .unavailable(let why) = error else { XCTFail("\(what) threw \(error), not .unavailable"); return }
            print("RedisClusterStoreOutageTests: \(what) threw .unavailable after \(ContinuousClock.now - start): \(why)")
        }
    }

    func testKilledServerFailsFastAndRestartedServerServesAgain() async throws {
        let store = try RedisClusterStore(url: Self.server.url, connectTimeoutMs: 300, commandTimeoutMs: 300, keyPrefix: "outage:")
        let room = RoomRecord(id: "r", name: "n", nodeId: "a")
        let first = try await store.renewLease(node("a"), leaseMs: 60_000)
        XCTAssertFalse(first)
        try await store.roomOpened(room)
        try await store.ping()

        Self.server.stop()
        await expectUnavailable("ping") { () async throws(ClusterStoreError) in try await store.ping() }
        await expectUnavailable("renewLease") { () async throws(ClusterStoreError) in try await store.renewLease(node("a"), leaseMs: 60_000) }
        await expectUnavailable("dropLease") { () async throws(ClusterStoreError) in try await store.dropLease(nodeId: "a") }
        await expectUnavailable("liveNodes") { () async throws(ClusterStoreError) in try await store.liveNodes() }
        await expectUnavailable("reserveRoomName") { () async throws(ClusterStoreError) in try await store.reserveRoomName("n", for: "a") }
        await expectUnavailable("roomOpened") { () async throws(ClusterStoreError) in try await store.roomOpened(room) }
        await expectUnavailable("roomClosed") { () async throws(ClusterStoreError) in try await store.roomClosed(room) }
        await expectUnavailable("rooms") { () async throws(ClusterStoreError) in try await store.rooms() }
        await expectUnavailable("reapDeadNodes") { () async throws(ClusterStoreError) in try await store.reapDeadNodes() }

        // Many callers at once: all fail, none waits for the others' timeouts.
        let start = ContinuousClock.now
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    do throws(ClusterStoreError) { try await store.ping(); return false } catch { if case .unavailable = error { return true }; return false }
                }
            }
            var all: [Bool] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        XCTAssertEqual(outcomes, Array(repeating: true, count: 20))
        print("RedisClusterStoreOutageTests: 20 concurrent pings threw .unavailable within \(ContinuousClock.now - start)")

        try await Self.server.start()
        try await store.ping()
        let afterRestart = try await store.renewLease(node("a"), leaseMs: 60_000)
        XCTAssertFalse(afterRestart, "the restarted server has no lease (nothing persisted)")
        try await store.roomOpened(room)
        let rooms = try await store.rooms()
        XCTAssertEqual(rooms, [room])
    }
}

final class RedisURLTests: XCTestCase {
    func testURLsParse() throws {
        XCTAssertEqual(try RedisEndpoint(parsing: "redis://cache.internal"), RedisEndpoint(address: .tcp(host: "cache.internal", port: 6379)))
        XCTAssertEqual(try RedisEndpoint(parsing: "redis://198.18.0.5:6380/2"), RedisEndpoint(address: .tcp(host: "198.18.0.5", port: 6380), database: 2))
        XCTAssertEqual(try RedisEndpoint(parsing: "REDIS://h:1/"), RedisEndpoint(address: .tcp(host: "h", port: 1)))
        XCTAssertEqual(try RedisEndpoint(parsing: "redis://[::1]:7000"), RedisEndpoint(address: .tcp(host: "::1", port: 7000)))
        XCTAssertEqual(try RedisEndpoint(parsing: "unix:///run/redis/redis.sock"), RedisEndpoint(address: .unix(path: "/run/redis/redis.sock")))
        XCTAssertEqual(try RedisEndpoint(parsing: "redis://[::1]:7000/3").description, "redis://[::1]:7000/3")
    }

    func testBadURLsThrowAClearError() {
        let bad = ["", "localhost:6379", "http://h:1", "rediss://h", "redis://", "redis://:6379", "redis://h:0",
                   "redis://h:65536", "redis://h:port", "redis://h/db", "redis://h/-1", "redis://u:p@h",
                   "redis://h?db=1", "unix://relative.sock", "unix://", "redis://[::1"]
        for url in bad {
            do {
                _ = try RedisClusterStore(url: url)
                XCTFail("\(url) parsed")
            } catch {
                XCTAssertEqual(error.url, url)
                XCTAssertTrue(error.description.contains("invalid Redis URL"), error.description)
                XCTAssertFalse(error.reason.isEmpty)
            }
        }
    }
}
