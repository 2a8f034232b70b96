internal import Foundation
#if canImport(Glibc)
internal import Glibc
#endif

/// A recorder child process. Spawned with `posix_spawnp` from a thread of its own, which then
/// waits for it (`waitpid`) and reports its end; not with Foundation's `Process`, whose child
/// inherits the spawning thread's blocked signals (the server's threads block SIGINT, so a
/// recorder never saw the SIGINT that tells it to finish its file).
/// - The child starts with no signal blocked and every signal at its default action, in a
///   process group of its own (a terminal's Ctrl-C reaches the server, which stops recordings
///   in order, not the recorders).
/// - It runs under `setpriv --pdeathsig INT` (util-linux): when the thread that spawned it
///   ends, which happens only with the server's process, the recorder gets SIGINT and finishes
///   its file, so a crashed server leaves no recorder running and no file unfinished.
/// - stdin is /dev/null; stdout and stderr go to `log`.
final class RecorderProcess: @unchecked Sendable {
    private let lock = NSLock()
    private var exited = false
    private(set) var pid: pid_t = 0

    enum Failure: Error, CustomStringConvertible {
        case spawn(Int32)
        var description: String { if case .spawn(let e) = self { return "posix_spawn: \(String(cString: strerror(e)))" }; return "" }
    }

    var isRunning: Bool { lock.lock(); defer { lock.unlock() }; return !exited }

    /// Sends `signal` unless the process has ended (and its pid may be another's).
    func send(_ signal: Int32) {
        lock.lock(); defer { lock.unlock() }
        if !exited, pid > 0 { kill(pid, signal) }
    }

    /// Starts `program` (looked up in PATH) with `arguments`; `onExit(status, signalled)` runs
    /// on the process's thread when it ends.
    static func start(program: String, arguments: [String], log: String,
                      onExit: @escaping @Sendable (Int32, Bool) -> Void) async throws -> RecorderProcess {
        let p = RecorderProcess()
        let argv = ["setpriv", "--pdeathsig", "INT", program] + arguments
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            let thread = Thread {
                let result = p.spawn(argv, log: log)
                guard result == 0 else {
                    p.lock.lock(); p.exited = true; p.lock.unlock()
                    started.resume(throwing: Failure.spawn(result))
                    return
                }
                started.resume()
                var status: Int32 = 0
                while waitpid(p.pid, &status, 0) < 0 && errno == EINTR {}
                p.lock.lock(); p.exited = true; p.lock.unlock()
                // WIFSIGNALED / WEXITSTATUS (glibc's macros are not imported).
                let signalled = (status & 0x7F) != 0 && (status & 0x7F) != 0x7F
                onExit(signalled ? status & 0x7F : (status >> 8) & 0xFF, signalled)
            }
            thread.name = "minato-recorder"
            thread.start()
        }
        return p
    }

    private func spawn(_ argv: [String], log: String) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for a in cArgs { free(a) } }
        var child: pid_t = 0
        let result = posix_spawnp(&child, argv[0], &actions, &attributes, &cArgs, environ)
        if result == 0 { lock.lock(); pid = child; lock.unlock() }
        return result
    }
}
