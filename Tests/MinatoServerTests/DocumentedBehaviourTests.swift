import Foundation
import Testing
@testable import MinatoRooms
@testable import MinatoServer

/// Numbers docs/protocol.md and docs/architecture.md state for the server's behaviour that are
/// not configuration defaults (those are DocumentedDefaultsTests): each is read from the docs'
/// own sentence and compared with what the code computes, so changing either side alone fails.
@Suite struct DocumentedBehaviourTests {
    static func doc(_ file: String) throws -> String {
        try String(contentsOf: DocumentedDefaultsTests.root.appendingPathComponent(file), encoding: .utf8)
    }

    /// The captures of `pattern`'s first match in `text` (newlines and runs of spaces in the
    /// text count as one space: the docs wrap sentences anywhere).
    static func captures(_ pattern: String, in text: String) throws -> [String]? {
        let flat = text.replacingOccurrences(of: #"\s+"#, with: " ", options: .regularExpression)
        let re = try NSRegularExpression(pattern: pattern)
        let ns = flat as NSString
        guard let m = re.firstMatch(in: flat, range: NSRange(location: 0, length: ns.length)) else { return nil }
        return (1..<m.numberOfRanges).map { ns.substring(with: m.range(at: $0)) }
    }

    /// protocol.md: "after N wrong passwords in a row on one socket, its next password check
    /// first waits min(0.25 s × 2^(N−1), 4 s)"; none before the first wrong one.
    @Test func wrongPasswordBackoffIsTheDocumentedFormula() throws {
        let c = try #require(try Self.captures(#"first waits min\(([0-9.]+) s × 2\^\(N−1\), ([0-9.]+) s\)"#,
                                               in: Self.doc("docs/protocol.md")), "the backoff sentence is gone from protocol.md")
        let base = try #require(Double(c[0])), cap = try #require(Double(c[1]))
        #expect(PasswordChecks.delay(afterFailures: 0) == .zero)
        for n in 1...12 {
            let documented = min(base * pow(2, Double(n - 1)), cap)
            #expect(PasswordChecks.delay(afterFailures: n) == .milliseconds(Int((documented * 1000).rounded())),
                    "after \(n) wrong passwords")
        }
        #expect(PasswordChecks.delay(afterFailures: 1_000_000) == .milliseconds(Int(cap * 1000)))
        // The values the sentence names today, so a doc edit that keeps the shape is noticed too.
        #expect(base == 0.25 && cap == 4)
    }

    /// protocol.md: "`GET /readyz` → 200 when every media worker answers within 2 s".
    @Test func readinessDeadlineIsTheDocumentedOne() throws {
        let c = try #require(try Self.captures(#"`GET /readyz` → 200 when every media worker answers within ([0-9]+) s"#,
                                               in: Self.doc("docs/protocol.md")))
        #expect(MinatoServer.readinessDeadline == .seconds(Int(c[0])!))
    }

    /// protocol.md: "Once a WebSocket is open … the server pings it every 20 s".
    @Test func webSocketPingPeriodIsTheDocumentedOne() throws {
        let c = try #require(try Self.captures(#"the server pings it every ([0-9]+) s"#, in: Self.doc("docs/protocol.md")))
        #expect(MinatoServer.webSocketPingPeriod == .seconds(Int(c[0])!))
    }

    /// architecture.md: "Media workers (`media.workers`, default one per core)"; 0 (the default)
    /// is one per active core, another value that many.
    @Test func zeroMediaWorkersIsOnePerCore() throws {
        #expect(try Self.captures(#"`media\.workers`, default one per core"#, in: Self.doc("docs/architecture.md")) != nil)
        let defaults = ServerConfiguration()
        #expect(defaults.mediaWorkers == 0)
        #expect(defaults.resolvedWorkerCount == ProcessInfo.processInfo.activeProcessorCount)
        let zero = try ServerConfiguration.load(file: nil, environment: ["MINATO_MEDIA_WORKERS": "0"])
        #expect(zero.resolvedWorkerCount == ProcessInfo.processInfo.activeProcessorCount)
        let three = try ServerConfiguration.load(file: nil, environment: ["MINATO_MEDIA_WORKERS": "3"])
        #expect(three.resolvedWorkerCount == 3)
    }
}
