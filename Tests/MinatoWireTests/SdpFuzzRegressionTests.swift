import Testing
@testable import MinatoWire

/// Inputs the fuzzers found (fuzz/Sources/FuzzSdp), kept as tests.
@Suite struct SdpFuzzRegressionTests {
    /// FuzzSdp, first CI run: session lines out of RFC 4566 order (t= before i=, repeated) with
    /// invalid UTF-8. It parses; serialization puts the lines in order, and that canonical text
    /// is a fixed point of parse -> serialize.
    @Test func outOfOrderSessionLinesSerializeCanonically() throws {
        let bytes: [UInt8] = Array("v=0\r\no=- 1477786834790098766 0 IN IP4 127.0.0.1\r\ns=-\r\nt=".utf8) + [0xFF, 0xFF, 0xFF, 0xFF]
            + Array("Decodabla\r\ni=0ce-AptiSequencek\nt=".utf8) + [0xFF, 0xFF, 0xFF, 0xFF]
            + Array("Decodabla\r\ni=0ce-AptiSequencekle\r\na=group:BUNDcp-mule\r\na=group:BUNDcp-mux-only\r\n".utf8)
        let text = String(decoding: bytes, as: UTF8.self)
        let first = try SessionDescription.parse(text)
        let canonical = first.serialize()
        let second = try SessionDescription.parse(canonical)
        #expect(second.serialize() == canonical)
        #expect(try SessionDescription.parse(second.serialize()) == second)
        // In order: every i= before the first t=.
        let lines = canonical.split(separator: "\r\n").map(String.init)
        let firstT = try #require(lines.firstIndex { $0.hasPrefix("t=") })
        #expect(lines.lastIndex { $0.hasPrefix("i=") }! < firstT)
    }
}
