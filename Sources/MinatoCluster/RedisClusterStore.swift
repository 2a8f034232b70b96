internal import Foundation
internal import Crypto

/// The cluster store on one Redis server (not Redis Cluster: the scripts build key names from
/// the prefix, so every key must live on the same server). Keys, with `{p}` the key prefix
/// (default `minato:`):
///
/// - `{p}node:{id}`: a node's lease: a string holding its `NodeRecord` as JSON, written with
///   `SET … PX leaseMs`. The node is alive while the key exists.
/// - `{p}nodes`: a set of every node id that registered (renewed a lease, reserved a name or
///   recorded a room) and has not been reaped; the reaper walks it.
/// - `{p}roomname:{name}`: a hash {node, room}: the node holding a room name and, once the room
///   is open, its room id (no `room` field while the name is only reserved).
/// - `{p}nodenames:{node}`: a set of the names the node holds, so that the reaper also frees
///   reservations that never became rooms.
/// - `{p}room:{id}`: a hash {node, name}: the node hosting the room and its name (no `name`
///   field for an unnamed room).
/// - `{p}rooms`: a set of every recorded room id.
/// - `{p}noderooms:{node}`: a set of the node's room ids.
///
/// Every method that reads and then writes is one Lua script, so it is atomic: two nodes never
/// both win a name, and a record is removed by exactly one caller. Scripts are sent with
/// EVALSHA and, when Redis does not know them yet (NOSCRIPT: first use, restart, SCRIPT FLUSH),
/// with EVAL, which also loads them.
public final class RedisClusterStore: ClusterStore {
    let connection: RedisConnection
    public let keyPrefix: String

    /// `url` is `redis://host[:port][/db]` or `unix:///path/to/redis.sock`; nothing connects
    /// until the first call. Each connect waits at most `connectTimeoutMs`, each command's
    /// reads and writes at most `commandTimeoutMs`: past that, the call throws `.unavailable`.
    public init(url: String, connectTimeoutMs: Int = 1000, commandTimeoutMs: Int = 1000,
                keyPrefix: String = "minato:") throws(RedisURLError) {
        connection = try RedisConnection(url: url, connectTimeoutMs: connectTimeoutMs, commandTimeoutMs: commandTimeoutMs)
        self.keyPrefix = keyPrefix
    }

    public func renewLease(_ node: NodeRecord, leaseMs: Int, previous: Int64?) async throws(ClusterStoreError) -> Bool {
        var record = node
        // JSONEncoder refuses NaN and infinities; a broken CPU sample must not cost the lease.
        if !record.load.cpuPercent.isFinite { record.load.cpuPercent = 0 }
        let json: Data
        do { json = try JSONEncoder().encode(record) } catch {
            throw .protocolError("the node record of \(node.id) could not be encoded as JSON: \(error)")
        }
        let reply = try await eval(Scripts.renewLease, [bytes(keyPrefix), bytes(node.id), [UInt8](json), bytes(String(max(leaseMs, 1))),
                                                        bytes(previous.map(String.init) ?? "")])
        guard case .integer(let existed) = reply else { throw unexpected(reply, from: "renewLease") }
        return existed == 1
    }

    public func dropLease(nodeId: String) async throws(ClusterStoreError) {
        let reply = try await connection.command([bytes("DEL"), key("node:", nodeId)])
        if case .error(let message) = reply { throw Self.failure(message) }
    }

    public func liveNodes() async throws(ClusterStoreError) -> [NodeRecord] {
        let members = try await connection.command([bytes("SMEMBERS"), key("nodes")])
        guard case .array(let ids) = members else { throw unexpected(members, from: "SMEMBERS") }
        let keys = ids.compactMap { id -> [UInt8]? in
            guard case .bulk(let idBytes) = id else { return nil }
            return Array(keyPrefix.utf8) + Array("node:".utf8) + idBytes
        }
        guard !keys.isEmpty else { return [] }
        let leases = try await connection.command([bytes("MGET")] + keys)
        guard case .array(let values) = leases else { throw unexpected(leases, from: "MGET") }
        let decoder = JSONDecoder()
        return values.compactMap { value in
            guard case .bulk(let json) = value else { return nil }   // lapsed since SMEMBERS
            return try? decoder.decode(NodeRecord.self, from: Data(json))
        }
    }

    public func reserveRoomName(_ name: String, for nodeId: String) async throws(ClusterStoreError) -> String {
        let reply = try await eval(Scripts.reserveRoomName, [bytes(keyPrefix), bytes(nodeId), bytes(name)])
        guard case .bulk = reply, let holder = reply.string else { throw unexpected(reply, from: "reserveRoomName") }
        return holder
    }

    public func roomOpened(_ room: RoomRecord) async throws(ClusterStoreError) {
        let reply = try await eval(Scripts.roomOpened, roomArguments(room))
        switch reply {
        case .null: return
        case .bulk: throw .nameHeldElsewhere(reply.string ?? "")
        default: throw unexpected(reply, from: "roomOpened")
        }
    }

    public func roomClosed(_ room: RoomRecord) async throws(ClusterStoreError) {
        let reply = try await eval(Scripts.roomClosed, roomArguments(room))
        guard case .integer = reply else { throw unexpected(reply, from: "roomClosed") }
    }

    public func rooms() async throws(ClusterStoreError) -> [RoomRecord] {
        let reply = try await eval(Scripts.rooms, [bytes(keyPrefix)])
        return try roomRecords(reply, from: "rooms")
    }

    public func reapDeadNodes() async throws(ClusterStoreError) -> [RoomRecord] {
        let reply = try await eval(Scripts.reapDeadNodes, [bytes(keyPrefix)])
        return try roomRecords(reply, from: "reapDeadNodes")
    }

    public func ping() async throws(ClusterStoreError) {
        let reply = try await connection.command([bytes("PING")])
        guard case .status("PONG") = reply else { throw unexpected(reply, from: "PING") }
    }

    // MARK: - Plumbing

    /// Runs a script by its SHA1, and by its source when Redis does not have it. An error reply
    /// throws (see `failure(_:)`).
    func eval(_ script: LuaScript, _ arguments: [[UInt8]]) async throws(ClusterStoreError) -> RedisValue {
        var reply = try await connection.command([bytes("EVALSHA"), bytes(script.sha1), bytes("0")] + arguments)
        if case .error(let message) = reply, message.hasPrefix("NOSCRIPT") {
            reply = try await connection.command([bytes("EVAL"), bytes(script.source), bytes("0")] + arguments)
        }
        if case .error(let message) = reply { throw Self.failure(message) }
        return reply
    }

    /// An error reply as a store error: the replies that mean "Redis cannot serve now" (still
    /// loading, busy with a script, a read-only replica, out of memory, not authenticated…)
    /// are `.unavailable`; anything else is a bug or a surprise, `.protocolError`.
    static func failure(_ message: String) -> ClusterStoreError {
        let code = message.prefix { $0 != " " }
        let transient: Set<Substring> = ["LOADING", "BUSY", "MASTERDOWN", "READONLY", "MISCONF", "OOM", "TRYAGAIN",
                                         "CLUSTERDOWN", "NOAUTH", "WRONGPASS", "NOPERM"]
        return transient.contains(code) ? .unavailable("Redis answered: \(message)") : .protocolError("Redis answered: \(message)")
    }

    private func unexpected(_ reply: RedisValue, from command: String) -> ClusterStoreError {
        if case .error(let message) = reply { return Self.failure(message) }
        return .protocolError("\(command) returned \(reply)")
    }

    /// prefix, node, room id, "1"/"0" (has a name), name ("" when none).
    private func roomArguments(_ room: RoomRecord) -> [[UInt8]] {
        [bytes(keyPrefix), bytes(room.nodeId), bytes(room.id), bytes(room.name == nil ? "0" : "1"), bytes(room.name ?? "")]
    }

    /// Decodes the scripts' room lists: an array of {id, node, name-or-nil}.
    private func roomRecords(_ reply: RedisValue, from command: String) throws(ClusterStoreError) -> [RoomRecord] {
        guard case .array(let items) = reply else { throw unexpected(reply, from: command) }
        var records: [RoomRecord] = []
        records.reserveCapacity(items.count)
        for item in items {
            guard case .array(let fields) = item, fields.count == 3,
                  case .bulk = fields[0], let id = fields[0].string,
                  case .bulk = fields[1], let node = fields[1].string else { throw unexpected(item, from: command) }
            let name: String?
            switch fields[2] {
            case .null: name = nil
            case .bulk: name = fields[2].string
            default: throw unexpected(item, from: command)
            }
            records.append(RoomRecord(id: id, name: name, nodeId: node))
        }
        return records
    }

    private func key(_ parts: String...) -> [UInt8] { Array((keyPrefix + parts.joined()).utf8) }
    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
}

/// A Lua script and its SHA1 (the name EVALSHA knows it by).
struct LuaScript: Sendable {
    let source: String
    let sha1: String
    init(_ source: String) {
        self.source = source
        sha1 = sha1Hex(Array(source.utf8))
    }
}

/// The store's scripts. Arguments are in ARGV (no KEYS: see the note on `RedisClusterStore`);
/// in Redis's Lua a missing value reads as `false`, and a `false` returned becomes a nil reply.
enum Scripts {
    /// ARGV: prefix, node, record JSON, lease ms. Writes the lease and registers the node for
    /// the reaper; returns 1 when the lease existed before (a renewal), 0 when not.
    static let renewLease = LuaScript("""
        local prefix, node = ARGV[1], ARGV[2]
        local leaseKey = prefix .. 'node:' .. node
        -- Alive only if the lease there is the node's last acknowledged renewal (ARGV[5]; empty:
        -- none yet). A lease written by an attempt the node saw fail counts as lapsed.
        local existed = 0
        local old = redis.call('GET', leaseKey)
        if old and ARGV[5] ~= '' then
          local ok, record = pcall(cjson.decode, old)
          if ok and type(record) == 'table' and record.renewal == tonumber(ARGV[5]) then existed = 1 end
        end
        redis.call('SET', leaseKey, ARGV[3], 'PX', ARGV[4])
        redis.call('SADD', prefix .. 'nodes', node)
        return existed
        """)

    /// ARGV: prefix, node, name. Returns the node holding the name afterwards: a live other
    /// holder keeps it; a dead holder's name is taken over.
    static let reserveRoomName = LuaScript("""
        local prefix, node, name = ARGV[1], ARGV[2], ARGV[3]
        local nameKey = prefix .. 'roomname:' .. name
        local holder = redis.call('HGET', nameKey, 'node')
        if holder == node then return node end
        if holder then
          if redis.call('EXISTS', prefix .. 'node:' .. holder) == 1 then return holder end
          redis.call('SREM', prefix .. 'nodenames:' .. holder, name)
          redis.call('DEL', nameKey)
        end
        redis.call('HSET', nameKey, 'node', node)
        redis.call('SADD', prefix .. 'nodenames:' .. node, name)
        redis.call('SADD', prefix .. 'nodes', node)
        return node
        """)

    /// ARGV: prefix, node, room id, has-name ("1"/"0"), name. Returns the other live node
    /// holding the name (nothing written), or nil after recording the room (and its name) as
    /// the node's. A name held by a dead node is taken over.
    static let roomOpened = LuaScript("""
        local prefix, node, id, hasName, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
        if hasName then
          local nameKey = prefix .. 'roomname:' .. name
          local holder = redis.call('HGET', nameKey, 'node')
          if holder and holder ~= node then
            if redis.call('EXISTS', prefix .. 'node:' .. holder) == 1 then return holder end
            redis.call('SREM', prefix .. 'nodenames:' .. holder, name)
          end
          redis.call('DEL', nameKey)
          redis.call('HSET', nameKey, 'node', node, 'room', id)
          redis.call('SADD', prefix .. 'nodenames:' .. node, name)
        end
        local roomKey = prefix .. 'room:' .. id
        local previous = redis.call('HGET', roomKey, 'node')
        if previous and previous ~= node then redis.call('SREM', prefix .. 'noderooms:' .. previous, id) end
        redis.call('DEL', roomKey)
        if hasName then
          redis.call('HSET', roomKey, 'node', node, 'name', name)
        else
          redis.call('HSET', roomKey, 'node', node)
        end
        redis.call('SADD', prefix .. 'rooms', id)
        redis.call('SADD', prefix .. 'noderooms:' .. node, id)
        redis.call('SADD', prefix .. 'nodes', node)
        return false
        """)

    /// ARGV: prefix, node, room id, has-name, name. Removes the room's records if they still
    /// name `node`, and its name (the one passed and the one recorded) if `node` holds it for
    /// this room or only as a reservation. Returns 1 when the room record was removed.
    static let roomClosed = LuaScript("""
        local prefix, node, id, hasName, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
        local roomKey = prefix .. 'room:' .. id
        local names = {}
        if hasName then names[1] = name end
        local removed = 0
        local room = redis.call('HMGET', roomKey, 'node', 'name')
        if room[1] == node then
          redis.call('DEL', roomKey)
          redis.call('SREM', prefix .. 'rooms', id)
          redis.call('SREM', prefix .. 'noderooms:' .. node, id)
          if room[2] and (not hasName or room[2] ~= name) then names[#names + 1] = room[2] end
          removed = 1
        end
        for _, n in ipairs(names) do
          local nameKey = prefix .. 'roomname:' .. n
          local held = redis.call('HMGET', nameKey, 'node', 'room')
          if held[1] == node and (not held[2] or held[2] == id) then
            redis.call('DEL', nameKey)
            redis.call('SREM', prefix .. 'nodenames:' .. node, n)
          end
        end
        return removed
        """)

    /// ARGV: prefix. Returns {id, node, name or nil} for every recorded room.
    static let rooms = LuaScript("""
        local prefix = ARGV[1]
        local out = {}
        for _, id in ipairs(redis.call('SMEMBERS', prefix .. 'rooms')) do
          local room = redis.call('HMGET', prefix .. 'room:' .. id, 'node', 'name')
          if room[1] then out[#out + 1] = {id, room[1], room[2]} end
        end
        return out
        """)

    /// ARGV: prefix. For every registered node without a lease: removes the rooms that still
    /// name it (hash and set entries), the names it holds, its own sets and its registration.
    /// Returns the removed rooms as {id, node, name or nil}.
    static let reapDeadNodes = LuaScript("""
        local prefix = ARGV[1]
        local removed = {}
        for _, node in ipairs(redis.call('SMEMBERS', prefix .. 'nodes')) do
          if redis.call('EXISTS', prefix .. 'node:' .. node) == 0 then
            local nodeRooms = prefix .. 'noderooms:' .. node
            local nodeNames = prefix .. 'nodenames:' .. node
            for _, id in ipairs(redis.call('SMEMBERS', nodeRooms)) do
              local roomKey = prefix .. 'room:' .. id
              local room = redis.call('HMGET', roomKey, 'node', 'name')
              if room[1] == node then
                redis.call('DEL', roomKey)
                redis.call('SREM', prefix .. 'rooms', id)
                if room[2] then redis.call('SADD', nodeNames, room[2]) end
                removed[#removed + 1] = {id, node, room[2]}
              end
            end
            for _, name in ipairs(redis.call('SMEMBERS', nodeNames)) do
              local nameKey = prefix .. 'roomname:' .. name
              if redis.call('HGET', nameKey, 'node') == node then redis.call('DEL', nameKey) end
            end
            redis.call('DEL', nodeRooms, nodeNames)
            redis.call('SREM', prefix .. 'nodes', node)
          end
        end
        return removed
        """)
}

/// SHA-1 of `message` as 40 lowercase hex digits: the name Redis gives a script (swift-crypto;
/// only ever applied to the scripts above, nothing secret depends on it).
func sha1Hex(_ message: [UInt8]) -> String {
    Insecure.SHA1.hash(data: message).map { byte in
        let hex = String(byte, radix: 16)
        return byte < 16 ? "0" + hex : hex
    }.joined()
}
