import Foundation
import Testing
@testable import MinatoClient

/// The defaults docs/sdk-swift.md states for the Swift SDK, read from its own sentences and
/// compared with `Context.Options` and the member's keepalive and rejoin schedules (computed,
/// never waited for).
@Suite struct ClientDefaultsTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The captures of `pattern` in docs/sdk-swift.md (whitespace runs, line breaks included,
    /// read as one space).
    static func sdkDoc(_ pattern: String) throws -> [String]? {
        let text = try String(contentsOf: root.appendingPathComponent("docs/sdk-swift.md"), encoding: .utf8)
            .replacingOccurrences(of: #"\s+"#, with: " ", options: .regularExpression)
        let ns = text as NSString
        guard let m = try NSRegularExpression(pattern: pattern).firstMatch(in: text, range: NSRange(location: 0, length: ns.length))
        else { return nil }
        return (1..<m.numberOfRanges).map { ns.substring(with: m.range(at: $0)) }
    }

    /// "waiting up to `resubscribeWait`, 10 s", "`reconnectDelay` (300 ms) and doubling up to
    /// 5 s, for `rejoinTimeout` (60 s)".
    @Test func rejoinOptionsDefaultToTheDocumentedValues() throws {
        let wait = try #require(try Self.sdkDoc(#"`resubscribeWait`, ([0-9]+) s"#))
        let c = try #require(try Self.sdkDoc(#"`reconnectDelay` \(([0-9]+) ms\) and doubling up to ([0-9]+) s, for `rejoinTimeout` \(([0-9]+) s\)"#))
        for options in [Context.Options(), Context.Options(urls: ["ws://127.0.0.1:1/ws", "ws://127.0.0.1:2/ws"])] {
            #expect(options.resubscribeWait == .seconds(Int(wait[0])!))
            #expect(options.reconnectDelay == .milliseconds(Int(c[0])!))
            #expect(options.rejoinTimeout == .seconds(Int(c[2])!))
            #expect(options.rejoin)
        }
        #expect(wait[0] == "10" && c == ["300", "5", "60"])
    }

    /// The waits between rejoin attempts: `reconnectDelay`, then doubling, never above 5 s.
    @Test func rejoinWaitsDoubleUpToFiveSeconds() throws {
        let c = try #require(try Self.sdkDoc(#"`reconnectDelay` \(([0-9]+) ms\) and doubling up to ([0-9]+) s"#))
        let cap = Duration.seconds(Int(c[1])!)
        var delay = Context.Options().reconnectDelay
        var waits: [Duration] = []
        for _ in 0..<8 {
            waits.append(delay)
            delay = LocalSFURoomMember.nextRejoinDelay(after: delay)
        }
        #expect(waits == [.milliseconds(300), .milliseconds(600), .milliseconds(1200), .milliseconds(2400),
                          .milliseconds(4800), cap, cap, cap])
        #expect(LocalSFURoomMember.nextRejoinDelay(after: .seconds(4)) == cap)
    }

    /// "sends `keepalive {…}` every `keepaliveIntervalSec / 3` seconds (at least 1)".
    @Test func keepaliveEveryThirdOfTheIntervalAtLeastOneSecond() throws {
        #expect(try Self.sdkDoc(#"every `keepaliveIntervalSec / 3` seconds \(at least 1\)"#) != nil)
        for (interval, period) in [(30, 10), (300, 100), (10, 3), (3, 1), (2, 1), (1, 1)] {
            #expect(LocalSFURoomMember.keepalivePeriodSec(interval: interval) == period, "interval \(interval)")
        }
    }

    /// docs/sdk-swift.md "Recovery": each default named with its value in the text.
    @Test func recoveryOptionsDefaultToTheDocumentedValues() throws {
        let o = Context.Options()
        #expect(o.recover)
        let durations: [(String, Duration)] = [
            (#"`heartbeatInterval` \(([0-9]+) s\)"#, o.heartbeatInterval),
            (#"`heartbeatTimeout` \(([0-9]+) s\)"#, o.heartbeatTimeout),
            (#"`signalingResumeTimeout` \(([0-9]+) s\)"#, o.signalingResumeTimeout),
            (#"nothing for `mediaStallTimeout` \(([0-9]+) s\)"#, o.mediaStallTimeout),
            (#"`mediaRestartWait` \(([0-9]+) s\)"#, o.mediaRestartWait),
        ]
        for (pattern, value) in durations {
            let c = try #require(try Self.sdkDoc(pattern), "docs/sdk-swift.md lacks \(pattern)")
            #expect(value == .seconds(Int(c[0])!), "\(pattern)")
        }
        let probe = try #require(try Self.sdkDoc(#"`networkProbeTimeout`, ([0-9.]+) s"#))
        #expect(o.networkProbeTimeout == .milliseconds(Int(Double(probe[0])! * 1000)))
        let restarts = try #require(try Self.sdkDoc(#"`maxMediaRestarts` \(([0-9]+)\) times"#))
        #expect(o.maxMediaRestarts == Int(restarts[0])!)
    }
}
