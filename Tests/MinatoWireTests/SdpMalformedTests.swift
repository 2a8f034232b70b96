import Testing
@testable import MinatoWire

@Suite struct SdpMalformedTests {
    static let header = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"

    /// Parses `text` and returns the error it must throw.
    func error(_ text: String) -> SdpError? {
        do {
            _ = try SessionDescription.parse(text)
            return nil
        } catch {
            return error
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var body: String  // appended after the 4 header lines; first body line is line 5
        var line: Int
        var reasonPrefix: String
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "m without port", body: "m=audio", line: 5, reasonPrefix: "m= line has no port"),
        Case(name: "m without proto", body: "m=audio 9", line: 5, reasonPrefix: "m= line has no protocol"),
        Case(name: "non-numeric port", body: "m=audio x UDP/TLS/RTP/SAVPF 111", line: 5, reasonPrefix: "m= port"),
        Case(name: "port too large", body: "m=audio 70000 UDP/TLS/RTP/SAVPF 111", line: 5, reasonPrefix: "m= port"),
        Case(name: "bad port count", body: "m=audio 9/x UDP/TLS/RTP/SAVPF 111", line: 5, reasonPrefix: "m= port count"),
        Case(name: "non-numeric pt", body: "m=video 9 UDP/TLS/RTP/SAVPF 96 vp8", line: 5, reasonPrefix: "m= payload type vp8"),
        Case(name: "pt over 127", body: "m=video 9 UDP/TLS/RTP/SAVPF 200", line: 5, reasonPrefix: "m= payload type 200"),
        Case(name: "rtpmap no clock", body: "m=audio 9 RTP/AVP 0\r\na=rtpmap:0 PCMU", line: 6, reasonPrefix: "bad rtpmap"),
        Case(name: "rtpmap bad pt", body: "m=audio 9 RTP/AVP 0\r\na=rtpmap:x PCMU/8000", line: 6, reasonPrefix: "bad rtpmap"),
        Case(name: "rtpmap bad channels", body: "a=x\r\nm=audio 9 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000/two", line: 7, reasonPrefix: "bad rtpmap"),
        Case(name: "extmap id 0", body: "m=audio 9 RTP/AVP 0\r\na=extmap:0 urn:x", line: 6, reasonPrefix: "bad extmap"),
        Case(name: "extmap no uri", body: "m=audio 9 RTP/AVP 0\r\na=extmap:3", line: 6, reasonPrefix: "bad extmap"),
        Case(name: "extmap bad direction", body: "m=audio 9 RTP/AVP 0\r\na=extmap:3/up urn:x", line: 6, reasonPrefix: "bad extmap"),
        Case(name: "extmap id too big", body: "m=audio 9 RTP/AVP 0\r\na=extmap:256 urn:x", line: 6, reasonPrefix: "bad extmap"),
        Case(name: "ssrc not a number", body: "m=audio 9 RTP/AVP 0\r\na=ssrc:abc cname:x", line: 6, reasonPrefix: "bad ssrc"),
        Case(name: "ssrc too big", body: "m=audio 9 RTP/AVP 0\r\na=ssrc:4294967296 cname:x", line: 6, reasonPrefix: "bad ssrc"),
        Case(name: "ssrc without attribute", body: "m=audio 9 RTP/AVP 0\r\na=ssrc:1", line: 6, reasonPrefix: "bad ssrc"),
        Case(name: "ssrc-group bad ssrc", body: "m=audio 9 RTP/AVP 0\r\na=ssrc-group:FID 1 x", line: 6, reasonPrefix: "bad ssrc-group"),
        Case(name: "fingerprint not hex", body: "a=fingerprint:sha-256 ZZ:00", line: 5, reasonPrefix: "bad fingerprint"),
        Case(name: "fingerprint no value", body: "a=fingerprint:sha-256", line: 5, reasonPrefix: "bad fingerprint"),
        Case(name: "fingerprint odd digits", body: "a=fingerprint:sha-256 A:BC", line: 5, reasonPrefix: "bad fingerprint"),
        Case(name: "fmtp bad pt", body: "m=audio 9 RTP/AVP 0\r\na=fmtp:opus x=1", line: 6, reasonPrefix: "bad fmtp"),
        Case(name: "rtcp-fb without type", body: "m=audio 9 RTP/AVP 0\r\na=rtcp-fb:0", line: 6, reasonPrefix: "bad rtcp-fb"),
        Case(name: "rid bad direction", body: "m=video 9 RTP/AVP 96\r\na=rid:q sideways", line: 6, reasonPrefix: "bad rid"),
        Case(name: "attribute without name", body: "a=:x", line: 5, reasonPrefix: "a= line has no attribute name"),
        Case(name: "not type=value", body: "m=audio 9 RTP/AVP 0\r\nhello", line: 6, reasonPrefix: "line is not in <type>=<value> form"),
        Case(name: "digit type", body: "1=x", line: 5, reasonPrefix: "line is not in"),
        Case(name: "space before =", body: "a =x", line: 5, reasonPrefix: "line is not in"),
        Case(name: "empty line in middle", body: "\r\na=x", line: 5, reasonPrefix: "empty line"),
        Case(name: "t= in media", body: "m=audio 9 RTP/AVP 0\r\nt=0 0", line: 6, reasonPrefix: "t= line inside a media section"),
        Case(name: "second v=", body: "v=0", line: 5, reasonPrefix: "duplicate v= line"),
        Case(name: "non-ASCII type", body: "é=x", line: 5, reasonPrefix: "line is not in"),
    ]

    @Test(arguments: cases)
    func rejected(_ c: Case) throws {
        let text = Self.header + c.body + "\r\n"
        let e = try #require(error(text))
        #expect(e.line == c.line)
        #expect(e.reason.hasPrefix(c.reasonPrefix), "\(e.reason)")
        #expect(e.description.hasPrefix("line \(c.line): "))
        let lines = normalizedLines(text)
        #expect(e.text == lines[c.line - 1])
    }

    @Test func headerOrder() {
        #expect(error("")?.line == 1)
        #expect(error("\r\n\r\n")?.line == 1)
        #expect(error("o=- 1 1 IN IP4 127.0.0.1\r\nv=0\r\n")?.reason == "first line must be v=")
        #expect(error("v=x\r\n")?.reason == "v= is not a number")
        #expect(error("v=0\r\ns=-\r\n").map { ($0.line, $0.reason) }! == (2, "second line must be o="))
        #expect(error("v=0\r\no=- 1 1 IN IP4\r\ns=-\r\n").map { ($0.line, $0.reason) }! == (2, "o= line needs 6 fields"))
        #expect(error("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\nt=0 0\r\n").map { ($0.line, $0.reason) }! == (3, "third line must be s="))
        #expect(error("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\n").map { ($0.line, $0.reason) }! == (3, "s= line missing"))
        #expect(error("v=0\r\n").map { ($0.line, $0.reason) }! == (2, "o= line missing"))
        #expect(error(Self.header + "o=- 1 1 IN IP4 127.0.0.1\r\n")?.reason == "duplicate o= line")
        #expect(error(Self.header + "s=again\r\n")?.reason == "duplicate s= line")
    }

    @Test func tolerated() throws {
        // Minimal description without t= or media; LF endings; trailing blank lines.
        let s = try SessionDescription.parse("v=0\no=- 1 1 IN IP4 127.0.0.1\ns=-\n\n\n")
        #expect(s.media.isEmpty && s.timing == nil)
        // Non-RTP m= line with non-numeric formats; empty attribute value; extmap with direction.
        let t = try SessionDescription.parse(Self.header + """
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
        a=foo:\r
        a=extmap:2/sendonly urn:x attr\r
        a=rtcp-fb:* nack\r
        a=rtcp-fb:96 ccm fir\r
        a=fingerprint:SHA-256 ab:cd\r

        """)
        let m = t.media[0]
        #expect(m.attributes[0] == SdpAttribute(name: "foo", value: ""))
        #expect(m.extMaps == [ExtMap(id: 2, direction: "sendonly", uri: "urn:x", extensionAttributes: "attr")])
        #expect(m.rtcpFeedback(for: 96) == ["nack", "ccm fir"])
        #expect(m.rtcpFeedback(for: 100) == ["nack"])
        #expect(m.fingerprint?.bytes == [0xAB, 0xCD])
        #expect(m.direction == .sendrecv)  // default
    }
}
