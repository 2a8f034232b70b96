import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A server under test, started as a child process (in the caller's network namespace).
final class ServerProcess: @unchecked Sendable {
    let process = Process()
    let name: String
    let logPath: String

    init(name: String, executable: String, arguments: [String], environment: [String: String] = [:], logPath: String) throws {
        self.name = name
        self.logPath = logPath
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        process.environment = env
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// Polls `url` until it answers 200 (or the process exits, or `timeout` passes).
    func waitReady(url: String, timeout: Double = 30) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard process.isRunning else {
                throw BenchError("\(name) exited (status \(process.terminationStatus)) before it was ready; see \(logPath)")
            }
            if let (status, _) = try? await httpRequest(url, method: "GET", body: nil, timeout: 2), status == 200 { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw BenchError("\(name) was not ready at \(url) within \(Int(timeout)) s; see \(logPath)")
    }

    /// User + system CPU seconds the process has used (/proc/<pid>/stat fields 14 and 15).
    func cpuSeconds() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the comm field: state is index 0, utime index 11, stime index 12.
        guard fields.count > 12, let u = Double(fields[11]), let s = Double(fields[12]) else { return 0 }
        return (u + s) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident set size in MB (/proc/<pid>/status VmRSS).
    func rssMB() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? 0
            return kb / 1024
        }
        return 0
    }

    /// SIGTERM, then SIGKILL after 5 s.
    func stop() async {
        guard process.isRunning else { return }
        process.terminate()
        for _ in 0..<50 where process.isRunning { try? await Task.sleep(for: .milliseconds(100)) }
        if process.isRunning { kill(pid, SIGKILL) }
    }
}

/// One HTTP request (control path only); returns status and body.
func httpRequest(_ url: String, method: String, body: Data?, timeout: Double = 10) async throws -> (Int, Data) {
    guard let u = URL(string: url) else { throw BenchError("bad URL \(url)") }
    var request = URLRequest(url: u, timeoutInterval: timeout)
    request.httpMethod = method
    if let body {
        request.httpBody = body
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    }
    let (data, response) = try await URLSession.shared.data(for: request)
    return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
}
