import Foundation
import Testing
@testable import MinatoServer

/// The defaults README.md and docs/ quote for configuration keys are the embedded defaults:
/// every "`key`, N", "`key` (N" and Limits-table row "| `key` | N" in them names the value
/// `minato check-config` prints for that key with no file (KiB/MiB and seconds for a `…Ms` key
/// converted).
@Suite struct DocumentedDefaultsTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func everyDefaultTheDocsQuoteIsTheEmbeddedOne() throws {
        let defaults = Dictionary(ServerConfiguration().effectiveValues.map { ($0.key, $0.value) }, uniquingKeysWith: { a, _ in a })
        let files = ["README.md", "docs/protocol.md", "docs/architecture.md", "docs/sdk.md", "docs/sdk-swift.md"]
        let pattern = try NSRegularExpression(
            pattern: #"`([a-z]+\.[A-Za-z.]+)`\s*(?:,|\(|\|)\s*([0-9][0-9_]*)(?:\s*(KiB|MiB|s)\b)?"#)
        var checked = 0
        for file in files {
            let text = try String(contentsOf: Self.root.appendingPathComponent(file), encoding: .utf8)
            let ns = text as NSString
            for m in pattern.matches(in: text, range: NSRange(location: 0, length: ns.length)) {
                let key = ns.substring(with: m.range(at: 1))
                guard let value = defaults[key], let embedded = Int(value) else { continue }
                var quoted = Int(ns.substring(with: m.range(at: 2)).replacingOccurrences(of: "_", with: ""))!
                if m.range(at: 3).location != NSNotFound {
                    switch ns.substring(with: m.range(at: 3)) {
                    case "KiB": quoted *= 1024
                    case "MiB": quoted *= 1024 * 1024
                    default: if key.hasSuffix("Ms") { quoted *= 1000 }
                    }
                }
                let line = ns.substring(to: m.range.location).filter { $0 == "\n" }.count + 1
                #expect(quoted == embedded, "\(file):\(line) quotes \(key) as \(quoted); the default is \(embedded)")
                checked += 1
            }
        }
        // The docs quote most keys' defaults; far fewer matches means the pattern broke.
        #expect(checked >= 40, "only \(checked) documented defaults found")
    }
}
