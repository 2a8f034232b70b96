internal import CHiredis
internal import Dispatch
internal import Foundation
internal import Synchronization

/// One connection to Redis over hiredis's blocking API. A dedicated thread owns the
/// `redisContext*` and runs the commands callers queue, one at a time, in order; each caller
/// awaits its own reply. The connection is opened on the first command, not in `init`, and after
/// an I/O error (or a failed connect) it is freed and opened again on the next command, so a
/// Redis restart costs the commands that were in flight and nothing more.
///
/// Every wait is bounded: the connect by `connectTimeoutMs`, each command's socket reads and
/// writes by `commandTimeoutMs` (`redisSetTimeout`). When a command fails that way, the commands
/// queued behind it fail with the same error instead of each waiting out its own timeout, so a
/// dead or unreachable Redis answers every caller with `.unavailable` within one or two timeouts.
///
/// Sendable without `@unchecked`: the only state shared with the thread is `CommandQueue` (a
/// `Mutex` and a semaphore); the context itself is a local of the thread's loop.
final class RedisConnection: Sendable {
    let endpoint: RedisEndpoint
    let connectTimeoutMs: Int
    let commandTimeoutMs: Int
    private let queue = CommandQueue()

    /// Parses `url` (see `RedisEndpoint`) and starts the connection's thread; connects lazily.
    convenience init(url: String, connectTimeoutMs: Int = 1000, commandTimeoutMs: Int = 1000) throws(RedisURLError) {
        self.init(endpoint: try RedisEndpoint(parsing: url), connectTimeoutMs: connectTimeoutMs, commandTimeoutMs: commandTimeoutMs)
    }

    /// Starts the connection's thread; connects lazily. Timeouts are clamped to 1 ms ... 1 day
    /// (0 would mean "wait forever" to the socket).
    init(endpoint: RedisEndpoint, connectTimeoutMs: Int = 1000, commandTimeoutMs: Int = 1000) {
        self.endpoint = endpoint
        self.connectTimeoutMs = min(max(connectTimeoutMs, 1), 86_400_000)
        self.commandTimeoutMs = min(max(commandTimeoutMs, 1), 86_400_000)
        let session = RedisSession.Settings(endpoint: endpoint, connectTimeoutMs: self.connectTimeoutMs,
                                            commandTimeoutMs: self.commandTimeoutMs)
        let queue = self.queue
        let thread = Thread {
            var owned = RedisSession(settings: session)
            owned.run(queue)
        }
        thread.name = "minato-redis"
        thread.start()
    }

    /// Stops the thread once it has answered what is queued (nothing is, as every caller holds
    /// a reference while it waits); the thread frees the context.
    deinit { queue.close() }

    /// Runs one command (binary-safe arguments) and returns Redis's reply, which may be an
    /// `.error` reply: only a failure to reach Redis or to read its answer throws.
    func command(_ arguments: [[UInt8]]) async throws(ClusterStoreError) -> RedisValue {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<RedisValue, ClusterStoreError>, Never>) in
            queue.push(RedisJob(arguments: arguments, continuation: continuation))
        }
        return try result.get()
    }

    func command(_ arguments: [String]) async throws(ClusterStoreError) -> RedisValue {
        try await command(arguments.map { Array($0.utf8) })
    }
}

/// A reply from Redis, copied out of hiredis's `redisReply` (which is freed at once).
enum RedisValue: Sendable, Equatable {
    /// A bulk string (binary-safe).
    case bulk([UInt8])
    case integer(Int64)
    case array([RedisValue])
    /// A nil bulk string or nil array (a missing key; `false` returned by a Lua script).
    case null
    /// A status reply such as `OK` or `PONG`.
    case status(String)
    /// An error reply such as `NOSCRIPT No matching script...`.
    case error(String)

    /// The bulk or status reply as text (invalid UTF-8 is repaired); nil for anything else.
    var string: String? {
        switch self {
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text): return text
        default: return nil
        }
    }

    /// Copies a reply tree. hiredis nests arrays at most 7 deep, so the recursion is bounded.
    /// Lengths come from the wire: a count or length that does not fit an `Int` gives an
    /// `.error` value rather than a trap.
    init(reply: UnsafePointer<redisReply>) {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STRING:
            self = Self.bytes(r.str, r.len).map(RedisValue.bulk) ?? .error("reply string too long")
        case REDIS_REPLY_STATUS:
            self = Self.bytes(r.str, r.len).map { .status(String(decoding: $0, as: UTF8.self)) } ?? .error("reply status too long")
        case REDIS_REPLY_ERROR:
            self = .error(Self.bytes(r.str, r.len).map { String(decoding: $0, as: UTF8.self) } ?? "reply error too long")
        case REDIS_REPLY_INTEGER:
            self = .integer(Int64(r.integer))
        case REDIS_REPLY_NIL:
            self = .null
        case REDIS_REPLY_ARRAY:
            guard let count = Int(exactly: r.elements) else { self = .error("reply array too long"); return }
            var items: [RedisValue] = []
            items.reserveCapacity(count)
            for i in 0..<count {
                if let element = r.element?[i] { items.append(RedisValue(reply: element)) } else { items.append(.null) }
            }
            self = .array(items)
        default:
            self = .error("reply of unknown type \(r.type)")
        }
    }

    private static func bytes(_ pointer: UnsafeMutablePointer<CChar>?, _ length: Int) -> [UInt8]? {
        guard length >= 0 else { return nil }
        guard let pointer, length > 0 else { return [] }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
    }
}

/// Where Redis is, parsed from a URL:
/// - `redis://host[:port][/db]`: TCP; the port defaults to 6379; `db` (a number) is chosen
///   with SELECT after each connect. An IPv6 address goes in brackets (`redis://[::1]:6379`).
/// - `unix:///absolute/path.sock`: a unix socket.
/// Credentials, query strings and `rediss://` (TLS) are refused with a clear error rather than
/// ignored.
struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    enum Address: Sendable, Equatable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }
    var address: Address
    var database: Int?

    init(address: Address, database: Int? = nil) { self.address = address; self.database = database }

    init(parsing url: String) throws(RedisURLError) {
        func fail(_ reason: String) -> RedisURLError { RedisURLError(url: url, reason: reason) }
        guard let schemeEnd = url.range(of: "://") else { throw fail("it has no scheme") }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        let rest = url[schemeEnd.upperBound...]
        if rest.contains("?") || rest.contains("#") { throw fail("query strings and fragments are not supported") }
        switch scheme {
        case "unix":
            guard rest.hasPrefix("/") else { throw fail("a unix socket path must be absolute (unix:///path/to/redis.sock)") }
            guard rest.count > 1, !rest.utf8.contains(0) else { throw fail("the socket path is empty or contains NUL") }
            self.init(address: .unix(path: String(rest)))
        case "redis":
            let authority = rest.prefix { $0 != "/" }
            let path = rest.dropFirst(authority.count)
            if authority.contains("@") { throw fail("credentials in the URL are not supported") }
            var host: Substring
            var portText: Substring?
            if authority.hasPrefix("[") {
                guard let close = authority.firstIndex(of: "]") else { throw fail("an IPv6 address lacks its closing bracket") }
                host = authority[authority.index(after: authority.startIndex)..<close]
                let after = authority[authority.index(after: close)...]
                if !after.isEmpty {
                    guard after.hasPrefix(":") else { throw fail("unexpected text after the IPv6 address") }
                    portText = after.dropFirst()
                }
            } else if let colon = authority.firstIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
            }
            guard !host.isEmpty, !host.utf8.contains(0) else { throw fail("the host is empty") }
            var port = 6379
            if let portText {
                guard let p = Int(portText), (1...65535).contains(p) else { throw fail("the port \"\(portText)\" is not a number from 1 to 65535") }
                port = p
            }
            var database: Int?
            let dbText = path.dropFirst()
            if !dbText.isEmpty {
                guard let db = Int(dbText), db >= 0 else { throw fail("the path \"/\(dbText)\" is not a database number") }
                database = db
            }
            self.init(address: .tcp(host: String(host), port: port), database: database)
        case "rediss":
            throw fail("TLS (rediss://) is not supported")
        default:
            throw fail("the scheme \"\(scheme)\" is neither redis nor unix")
        }
    }

    var description: String {
        switch address {
        case .tcp(let host, let port):
            let h = host.contains(":") ? "[\(host)]" : host
            return "redis://\(h):\(port)" + (database.map { "/\($0)" } ?? "")
        case .unix(let path):
            return "unix://\(path)"
        }
    }
}

/// A Redis URL that cannot be used, with the reason.
public struct RedisURLError: Error, Sendable, Equatable, CustomStringConvertible {
    public let url: String
    public let reason: String
    public var description: String {
        "invalid Redis URL \"\(url)\": \(reason) (expected redis://host[:port][/db] or unix:///path/to/redis.sock)"
    }
}

/// A queued command and the caller waiting for it.
struct RedisJob: Sendable {
    let arguments: [[UInt8]]
    let continuation: CheckedContinuation<Result<RedisValue, ClusterStoreError>, Never>
    func finish(_ result: Result<RedisValue, ClusterStoreError>) { continuation.resume(returning: result) }
}

/// What the callers and the connection's thread share: the jobs not yet taken, under a lock,
/// and a semaphore counting pushes so that the thread sleeps while there is nothing to do.
final class CommandQueue: Sendable {
    private struct State {
        var jobs: [RedisJob] = []
        var head = 0
        var closed = false
    }
    private let state = Mutex(State())
    private let signal = DispatchSemaphore(value: 0)

    /// Queues a job; after `close`, answers it at once with `.unavailable`.
    func push(_ job: RedisJob) {
        let accepted = state.withLock { s in
            guard !s.closed else { return false }
            s.jobs.append(job)
            return true
        }
        if accepted { signal.signal() } else { job.finish(.failure(.unavailable("the Redis connection was closed."))) }
    }

    /// The next job, waiting for one; nil once the queue is closed and empty.
    func next() -> RedisJob? {
        while true {
            let taken: RedisJob?? = state.withLock { s in
                if s.head < s.jobs.count {
                    let job = s.jobs[s.head]
                    s.head += 1
                    if s.head == s.jobs.count { s.jobs.removeAll(keepingCapacity: true); s.head = 0 }
                    return .some(job)
                }
                return s.closed ? .some(nil) : nil
            }
            if let taken { return taken }
            // Pushes and `drain` can leave the count above the number of jobs: then this wakes
            // to an empty queue and waits again.
            signal.wait()
        }
    }

    /// Takes every queued job (they are answered together after a failure).
    func drain() -> [RedisJob] {
        state.withLock { s in
            let jobs = Array(s.jobs[s.head...])
            s.jobs.removeAll(); s.head = 0
            return jobs
        }
    }

    func close() {
        state.withLock { $0.closed = true }
        signal.signal()
    }
}

/// The connection's thread: owns the `redisContext*` (never touched by any other thread).
struct RedisSession {
    struct Settings: Sendable {
        let endpoint: RedisEndpoint
        let connectTimeoutMs: Int
        let commandTimeoutMs: Int
    }
    let settings: Settings
    private var context: UnsafeMutablePointer<redisContext>?

    init(settings: Settings) { self.settings = settings }

    mutating func run(_ queue: CommandQueue) {
        // hiredis writes with write(2): a write to a socket Redis has closed raises SIGPIPE, whose
        // default action ends the process. Blocked on this thread, the signal stays pending on it
        // and the write fails with EPIPE instead, which is an ordinary I/O error here.
        var pipe = sigset_t()
        sigemptyset(&pipe)
        sigaddset(&pipe, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipe, nil)

        while let job = queue.next() {
            let result = execute(job.arguments)
            job.finish(result)
            if case .failure = result {
                // The jobs queued meanwhile waited out this failure already: they share it
                // rather than each waiting out its own timeout against the same dead server.
                for other in queue.drain() { other.finish(result) }
            }
        }
        disconnect()
    }

    private mutating func execute(_ arguments: [[UInt8]], retry: Bool = true) -> Result<RedisValue, ClusterStoreError> {
        if let c = context, c.pointee.err != 0 { disconnect() }
        let reused = context != nil
        if context == nil, let error = connect() { return .failure(error) }
        guard let c = context else { return .failure(.unavailable("no connection to Redis at \(settings.endpoint).")) }
        guard let reply = Self.send(c, arguments) else {
            let why = Self.errorText(c)
            let closedByPeer = c.pointee.err == REDIS_ERR_EOF
                || (c.pointee.err == REDIS_ERR_IO && (why.contains("reset") || why.contains("Broken pipe")))
            disconnect()
            // A connection kept from before that Redis closed (it restarted, or dropped idle
            // clients): the command almost surely did not run (the server it was written to is
            // gone), so it is sent once more on a new connection rather than costing a missed
            // lease renewal or a refused placement. The store's scripts are written so that
            // running one twice leaves the same records.
            if retry, reused, closedByPeer { return execute(arguments, retry: false) }
            return .failure(.unavailable("the command to Redis at \(settings.endpoint) failed: \(why) (command timeout \(settings.commandTimeoutMs) ms)."))
        }
        defer { freeReplyObject(reply) }
        return .success(RedisValue(reply: reply.assumingMemoryBound(to: redisReply.self)))
    }

    /// Opens the context (and SELECTs the database); nil on success.
    private mutating func connect() -> ClusterStoreError? {
        let connectTimeout = Self.makeTimeval(ms: settings.connectTimeoutMs)
        let opened: UnsafeMutablePointer<redisContext>?
        switch settings.endpoint.address {
        case .tcp(let host, let port):
            opened = redisConnectWithTimeout(host, Int32(clamping: port), connectTimeout)
        case .unix(let path):
            opened = redisConnectUnixWithTimeout(path, connectTimeout)
        }
        guard let c = opened else { return .unavailable("could not allocate a connection to Redis at \(settings.endpoint).") }
        if c.pointee.err != 0 {
            let why = Self.errorText(c)
            redisFree(c)
            return .unavailable("Redis at \(settings.endpoint) could not be reached: \(why) (connect timeout \(settings.connectTimeoutMs) ms).")
        }
        guard redisSetTimeout(c, Self.makeTimeval(ms: settings.commandTimeoutMs)) == REDIS_OK else {
            let why = Self.errorText(c)
            redisFree(c)
            return .unavailable("could not set the command timeout on the connection to Redis at \(settings.endpoint): \(why).")
        }
        context = c
        if let db = settings.endpoint.database {
            switch execute(["SELECT", String(db)].map { Array($0.utf8) }) {
            case .success(.error(let message)):
                disconnect()
                return .unavailable("Redis at \(settings.endpoint) refused SELECT \(db): \(message).")
            case .success:
                break
            case .failure(let error):
                return error
            }
        }
        return nil
    }

    private mutating func disconnect() {
        if let c = context { redisFree(c) }
        context = nil
    }

    /// redisCommandArgv over one buffer holding every argument back to back (plus one byte,
    /// so that even empty arguments point inside it).
    private static func send(_ c: UnsafeMutablePointer<redisContext>, _ arguments: [[UInt8]]) -> UnsafeMutableRawPointer? {
        guard !arguments.isEmpty, let argc = Int32(exactly: arguments.count) else { return nil }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(arguments.reduce(1) { $0 + $1.count })
        var offsets: [Int] = []
        var lengths: [Int] = []
        for argument in arguments {
            offsets.append(buffer.count)
            lengths.append(argument.count)
            buffer.append(contentsOf: argument)
        }
        buffer.append(0)
        return buffer.withUnsafeBufferPointer { bytes -> UnsafeMutableRawPointer? in
            guard let base = bytes.baseAddress else { return nil }
            return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) { chars in
                var pointers: [UnsafePointer<CChar>?] = offsets.map { chars + $0 }
                return pointers.withUnsafeMutableBufferPointer { argv in
                    lengths.withUnsafeBufferPointer { argvlen in
                        redisCommandArgv(c, argc, argv.baseAddress, argvlen.baseAddress)
                    }
                }
            }
        }
    }

    /// The context's error text (`errstr`, a NUL-terminated char[128]).
    private static func errorText(_ c: UnsafeMutablePointer<redisContext>) -> String {
        let text = withUnsafeBytes(of: c.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if !text.isEmpty { return text }
        return c.pointee.err == 0 ? "no reply" : "error \(c.pointee.err)"
    }

    /// `ms` is already clamped to 1 ms ... 1 day, so both fields fit on every platform.
    private static func makeTimeval(ms: Int) -> timeval {
        timeval(tv_sec: .init(ms / 1000), tv_usec: .init((ms % 1000) * 1000))
    }
}
