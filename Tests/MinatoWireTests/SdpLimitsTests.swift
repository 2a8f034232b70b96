import Foundation
import Testing
@testable import MinatoWire

/// `SdpLimits`: a parse stops at the first line over a limit, with the limit named, and reads
/// nothing after it; the lookups by payload type read an m-section once (`PayloadTypeIndex`)
/// and find what the one-line lookups find.
@Suite struct SdpLimitsTests {
    static let header = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
    static let limits = SdpLimits(maxMediaSections: 3, maxFormatsPerSection: 4, maxCandidatesPerSection: 2)

    static func section(_ i: Int, formats: String = "96") -> String {
        "m=video 9 UDP/TLS/RTP/SAVPF \(formats)\r\na=mid:\(i)\r\na=rtpmap:96 VP8/90000\r\n"
    }

    func limitError(_ text: String, _ limits: SdpLimits = Self.limits) -> SdpError? {
        do { _ = try SessionDescription.parse(text, limits: limits); return nil } catch { return error }
    }

    @Test func descriptionsWithinTheLimitsParse() throws {
        let text = Self.header + (0..<3).map { Self.section($0, formats: "96 97 98 99") }.joined()
            + "a=candidate:1 1 udp 1 127.0.0.1 5000 typ host\r\na=candidate:2 1 udp 1 127.0.0.1 5001 typ host\r\n"
        let sd = try SessionDescription.parse(text, limits: Self.limits)
        #expect(sd.media.count == 3 && sd.media[2].candidates.count == 2)
        // No limits by default.
        #expect(try SessionDescription.parse(Self.header + (0..<200).map { Self.section($0) }.joined()).media.count == 200)
    }

    @Test func tooManyMediaSectionsStopAtTheFirstOneOver() {
        // A malformed line after the fourth m= is never read: the limit is what is reported.
        let text = Self.header + (0..<4).map { Self.section($0) }.joined() + "garbage\r\n"
        let e = limitError(text)
        #expect(e?.limit == .mediaSections)
        #expect(e?.line == 5 + 3 * 3)                        // the fourth m= line
        #expect(e?.text == "m=video 9 UDP/TLS/RTP/SAVPF 96")
    }

    @Test func tooManyFormatsRtpmapsOrFmtps() {
        #expect(limitError(Self.header + Self.section(0, formats: "96 97 98 99 100"))?.limit == .formatsPerSection)
        let rtpmaps = Self.header + Self.section(0) + (97...100).map { "a=rtpmap:\($0) VP8/90000\r\n" }.joined()
        let e = limitError(rtpmaps)
        #expect(e?.limit == .formatsPerSection && e?.line == 5 + 3 + 3)   // the fifth rtpmap of the section
        let fmtps = Self.header + Self.section(0) + (0..<5).map { "a=fmtp:96 x=\($0)\r\n" }.joined()
        #expect(limitError(fmtps)?.limit == .formatsPerSection)
        // Counted per m-section: four in each of two sections is fine.
        let two = Self.header + (0..<2).map { i in
            Self.section(i) + (97...99).map { "a=rtpmap:\($0) VP8/90000\r\n" }.joined()
        }.joined()
        #expect(limitError(two) == nil)
    }

    @Test func tooManyCandidatesInOneSection() {
        let candidate = { (i: Int) in "a=candidate:\(i) 1 udp 1 127.0.0.1 \(5000 + i) typ host\r\n" }
        #expect(limitError(Self.header + Self.section(0) + (0..<3).map(candidate).joined())?.limit == .candidatesPerSection)
        // At session level too (not where candidates belong, but counted there as well).
        #expect(limitError(Self.header + (0..<3).map(candidate).joined() + Self.section(0))?.limit == .candidatesPerSection)
        #expect(limitError(Self.header + Self.section(0) + (0..<2).map(candidate).joined()
                           + Self.section(1) + (2..<4).map(candidate).joined()) == nil)
    }

    @Test func aHugeMediaLineIsRefusedBeforeItsFormatsAreKept() {
        let formats = Array(repeating: "0", count: 50_000).joined(separator: " ")
        let e = limitError(Self.header + "m=audio 9 RTP/AVP \(formats)\r\n")
        #expect(e?.limit == .formatsPerSection)
        #expect(e.map { $0.text.count <= 64 } == true)      // the error does not carry the whole line
    }

    @Test func blankLinesAreStillOnlyAllowedAtTheEnd() throws {
        let text = Self.header + Self.section(0)
        #expect(try SessionDescription.parse(text + "\r\n\r\n\n").media.count == 1)
        #expect(throws: SdpError.self) { try SessionDescription.parse(Self.header + "\r\n" + Self.section(0)) }
        #expect(throws: SdpError.self) { try SessionDescription.parse("\r\n\r\n") }
        #expect(throws: SdpError.self) { try SessionDescription.parse(text + "\r\r\n") }   // a stray CR is not a blank line
    }

    // MARK: Lookups by payload type

    static func fixture(_ name: String) throws -> SessionDescription {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/\(name).sdp")
        return try SessionDescription.parse(String(contentsOf: url, encoding: .utf8))
    }

    @Test(arguments: ["chromium-offer-audio-video", "chromium-offer-simulcast", "firefox-offer-audio-video",
                      "aiortc-offer-audio-video", "gstreamer-offer-audio-video", "minato-receive-offer"])
    func indexFindsWhatTheOneLineLookupsFind(_ name: String) throws {
        for m in try Self.fixture(name).media {
            let index = m.payloadTypeIndex
            for pt in UInt8(0)...127 {
                #expect(index.rtpMap(for: pt) == m.rtpMap(for: pt))
                #expect(index.fmtp(for: pt) == m.fmtp(for: pt))
                #expect(index.rtcpFeedback(for: pt) == m.rtcpFeedback(for: pt))
                #expect(index.lists(pt) == m.payloadTypes.contains(pt))
            }
        }
    }

    @Test func indexKeepsFirstLinesExactPayloadTypesAndFeedbackOrder() throws {
        let text = Self.header + """
            m=video 9 UDP/TLS/RTP/SAVPF 97 96 97 96\r
            a=rtpmap:96 VP8/90000\r
            a=rtpmap:96 VP9/90000\r
            a=fmtp:096 x=1\r
            a=fmtp:96 y=2\r
            a=fmtp:96 z=3\r
            a=rtcp-fb:* transport-cc\r
            a=rtcp-fb:96 nack\r
            a=rtcp-fb:97 nack pli\r
            a=rtcp-fb:* ccm fir\r
            a=rtcp-fb:96 goog-remb\r

            """
        let m = try SessionDescription.parse(text).media[0]
        let index = m.payloadTypeIndex
        #expect(index.listed == [97, 96])
        #expect(index.rtpMap(for: 96)?.encodingName == "VP8")
        #expect(index.fmtp(for: 96) == "y=2")                    // "096" is not 96's line
        #expect(index.rtcpFeedback(for: 96) == ["transport-cc", "nack", "ccm fir", "goog-remb"])
        #expect(index.rtcpFeedback(for: 97) == ["transport-cc", "nack pli", "ccm fir"])
        #expect(index.rtcpFeedback(for: 98) == ["transport-cc", "ccm fir"])
        #expect(m.forwardableCodecs.map(\.payloadType) == [96])   // 97 has no rtpmap
        #expect(m.forwardableCodecs.first?.feedback == index.rtcpFeedback(for: 96))
    }

    @Test func duplicatesAreReadOnce() throws {
        // Many repeats of one payload type and of one candidate: one codec, one candidate.
        let formats = Array(repeating: "96", count: 1000).joined(separator: " ")
        let candidate = "a=candidate:1 1 udp 1 127.0.0.1 5000 typ host\r\n"
        let text = Self.header + "a=group:BUNDLE 0 1\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
            + "a=fingerprint:sha-256 AB:CD\r\n"
            + "m=video 9 UDP/TLS/RTP/SAVPF \(formats)\r\na=mid:0\r\na=rtpmap:96 VP8/90000\r\na=ssrc:5 cname:x\r\na=ssrc:5 msid:a b\r\n"
            + String(repeating: candidate, count: 500)
            + "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:1\r\na=rtpmap:96 VP8/90000\r\n" + String(repeating: candidate, count: 500)
        let sd = try SessionDescription.parse(text)
        #expect(sd.media[0].forwardableCodecs.count == 1)
        #expect(sd.media[0].ssrcIds == [5])
        #expect(try sd.transport().candidates == ["1 1 udp 1 127.0.0.1 5000 typ host"])
        #expect(sd.mediaIndicesByMid == ["0": 0, "1": 1])
    }

    @Test func settingAnAttributeRemovesTheLaterOnesInOnePass() {
        var m = MediaDescription(kind: "audio", formats: ["111"],
                                 attributes: [SdpAttribute(name: "mid", value: "a"), SdpAttribute(name: "sendonly"),
                                              SdpAttribute(name: "mid", value: "b"), SdpAttribute(name: "recvonly"),
                                              SdpAttribute(name: "mid", value: "c")])
        m.mid = "z"
        #expect(m.attributes.map(\.description) == ["mid:z", "sendonly", "recvonly"])
        m.direction = .inactive
        #expect(m.attributes.map(\.description) == ["mid:z", "inactive"])
    }
}
