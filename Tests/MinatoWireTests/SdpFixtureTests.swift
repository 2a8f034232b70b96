import Foundation
import Testing
@testable import MinatoWire

/// Real SDPs captured from aiortc 1.16, Chromium 156 and GStreamer 1.22 webrtcbin on loopback.
enum Fixture: String, CaseIterable, CustomTestStringConvertible {
    case aiortcOffer = "aiortc-offer-audio-video"
    case aiortcAnswer = "aiortc-answer-to-chromium"
    case chromiumOffer = "chromium-offer-audio-video"
    case chromiumSimulcast = "chromium-offer-simulcast"
    case gstreamerOffer = "gstreamer-offer-audio-video"

    var testDescription: String { rawValue }

    func text() throws -> String {
        let dir = try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil))
        return try String(contentsOf: dir.appendingPathComponent(rawValue + ".sdp"), encoding: .utf8)
    }

    func parsed() throws -> SessionDescription { try SessionDescription.parse(text()) }
}

/// Lines of `text` with CR/LF endings normalised and trailing blank lines dropped.
func normalizedLines(_ text: String) -> [String] {
    var lines = text.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false)
        .map(String.init)
    while lines.last == "" { lines.removeLast() }
    return lines
}

@Suite struct SdpFixtureTests {
    @Test(arguments: Fixture.allCases)
    func parsesAndRoundTrips(_ fixture: Fixture) throws {
        let text = try fixture.text()
        let sdp = try SessionDescription.parse(text)
        let out = sdp.serialize()
        #expect(out.hasSuffix("\r\n"))
        #expect(!out.replacingOccurrences(of: "\r\n", with: "").contains("\n"))
        #expect(normalizedLines(out) == normalizedLines(text))
        #expect(try SessionDescription.parse(out) == sdp)
        // LF-only endings and a trailing blank line parse to the same thing.
        let lf = text.replacingOccurrences(of: "\r\n", with: "\n") + "\n"
        #expect(try SessionDescription.parse(lf) == sdp)
    }

    @Test func aiortcOffer() throws {
        let sdp = try Fixture.aiortcOffer.parsed()
        #expect(sdp.version == 0)
        #expect(sdp.origin.sessionId == "4004342447")
        #expect(sdp.timing == "0 0")
        #expect(sdp.bundleGroup == ["0", "1"])
        #expect(!sdp.iceLite)
        #expect(sdp.media.map(\.mid) == ["0", "1"])
        #expect(sdp.media.map(\.kind) == ["audio", "video"])
        let audio = sdp.media[0], video = sdp.media[1]
        #expect(audio.direction == .sendonly)
        #expect(video.direction == .sendrecv)
        #expect(audio.port == 40985 && audio.proto == "UDP/TLS/RTP/SAVPF")
        #expect(audio.connection == "IN IP4 127.0.0.1")
        #expect(audio.payloadTypes == [96, 9, 0, 8])
        #expect(audio.rtpMaps.first == RtpMap(payloadType: 96, encodingName: "opus", clockRate: 48000, channels: 2))
        #expect(audio.rtpMap(for: 0) == RtpMap(payloadType: 0, encodingName: "PCMU", clockRate: 8000))
        #expect(audio.extMaps == [
            ExtMap(id: 1, uri: "urn:ietf:params:rtp-hdrext:sdes:mid"),
            ExtMap(id: 2, uri: "urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
        ])
        #expect(audio.ssrcIds == [505_058_827])
        #expect(audio.ssrcs.first?.attribute == "cname")
        #expect(audio.rtcpMux)
        #expect(audio.candidates == ["16572de626da4e5384a0ce2d0d93678a 1 udp 2130706431 127.0.0.1 40985 typ host"])
        #expect(audio.endOfCandidates)
        #expect(audio.iceUfrag == "SCWI" && audio.icePwd == "UMdL4uYJhxCYFbensSxSrA")
        #expect(audio.setup == "actpass")
        #expect(audio.fingerprints.map(\.algorithm) == ["sha-256", "sha-384", "sha-512"])
        #expect(audio.fingerprint?.bytes.count == 32)
        #expect(audio.fingerprint?.value.hasPrefix("E1:A9:CA:78") == true)
        #expect(audio.msid == "628372f6-eb99-4c11-94d1-c39d0edfd0c8 4cb37823-6eda-4504-9df9-bcae0fb5d2d3")
        #expect(video.rtpMaps.map(\.encodingName) == ["VP8", "rtx", "H264", "rtx", "H264", "rtx"])
        #expect(video.rtcpFeedback(for: 97) == ["nack", "nack pli", "goog-remb"])
        #expect(video.fmtp(for: 98) == "apt=97")
        #expect(video.fmtp(for: 99) == "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f")
        #expect(video.fmtp(for: 97) == nil)
        #expect(video.ssrcGroups == [SsrcGroup(semantics: "FID", ssrcs: [279_403_196, 3_556_429_370])])
        #expect(video.ssrcIds == [279_403_196, 3_556_429_370])
        #expect(video.extMaps.map(\.id) == [1, 3])
    }

    @Test func aiortcAnswer() throws {
        let sdp = try Fixture.aiortcAnswer.parsed()
        #expect(sdp.media.map(\.mid) == ["0", "1"])
        #expect(sdp.media.map(\.direction) == [.recvonly, .recvonly])
        #expect(sdp.media.allSatisfy { $0.setup == "active" })
        #expect(sdp.media[0].rtpMaps.first?.encodingName == "opus")
        #expect(sdp.media[1].payloadTypes == [96, 97, 102, 103, 108, 109])
        #expect(sdp.media[1].ssrcGroups.first?.ssrcs == [3_033_241_091, 1_418_519_680])
        #expect(sdp.media[0].iceUfrag == "QDXd")
    }

    @Test func chromiumOffer() throws {
        let sdp = try Fixture.chromiumOffer.parsed()
        #expect(sdp.origin.sessionId == "1202960162749847511")
        #expect(sdp.origin.sessionVersion == "2")
        #expect(sdp.bundleGroup == ["0", "1"])
        #expect(sdp.attributes.contains(named: "extmap-allow-mixed"))
        #expect(sdp.attributes.firstValue(named: "msid-semantic") == " WMS 8fc975e7-5c41-4d76-b9f0-159ae87ca16d")
        let audio = try #require(sdp.media(mid: "0"))
        let video = try #require(sdp.media(mid: "1"))
        #expect(audio.direction == .sendonly && video.direction == .sendonly)
        #expect(audio.rtpMaps.first == RtpMap(payloadType: 111, encodingName: "opus", clockRate: 48000, channels: 2))
        #expect(audio.fmtp(for: 111) == "minptime=10;useinbandfec=1")
        #expect(audio.rtcpFeedback(for: 111) == ["transport-cc"])
        #expect(audio.ssrcIds == [1_842_050_467])
        #expect(audio.iceOptions == "trickle")
        #expect(audio.endOfCandidates == false)
        #expect(audio.candidates.count == 2)
        #expect(audio.candidates[0].hasPrefix("1997622950 1 udp 2122260223 127.0.0.1 44037 typ host"))
        #expect(audio.extMaps.first(where: { $0.uri.hasSuffix("transport-wide-cc-extensions-01") })?.id == 3)
        #expect(video.formats.count == 23)
        #expect(video.rtpMap(for: 96)?.encodingName == "VP8")
        #expect(video.rtpMap(for: 98)?.encodingName == "VP9")
        #expect(video.rtpMap(for: 45)?.encodingName == "AV1")
        #expect(video.rtpMap(for: 102)?.encodingName == "H264")
        #expect(video.rtcpFeedback(for: 96) == ["goog-remb", "transport-cc", "ccm fir", "nack", "nack pli"])
        #expect(video.ssrcGroups == [SsrcGroup(semantics: "FID", ssrcs: [3_301_255_606, 197_313_334])])
        #expect(video.extMaps.first == ExtMap(id: 14, uri: "urn:ietf:params:rtp-hdrext:toffset"))
        #expect(video.fingerprint == Fingerprint(
            algorithm: "sha-256",
            value: "87:9A:73:F9:68:DA:30:61:6D:D6:07:79:17:AD:5F:EC:43:F6:00:96:28:05:E8:AC:A7:FC:30:31:76:D1:31:A1"))
        #expect(video.rids.isEmpty && video.simulcast == nil)
    }

    @Test func chromiumSimulcast() throws {
        let sdp = try Fixture.chromiumSimulcast.parsed()
        let video = sdp.media[1]
        #expect(video.mid == "1")
        #expect(video.rids == [Rid(id: "q", direction: "send"), Rid(id: "h", direction: "send"), Rid(id: "f", direction: "send")])
        #expect(video.simulcast == "send q;h;f")
        #expect(video.payloadTypes.first == 102)
        #expect(video.rtpMaps.first?.encodingName == "H264")
        #expect(video.ssrcs.isEmpty)
        #expect(video.extMaps.contains { $0.uri == "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id" })
        #expect(sdp.media[0].ssrcIds == [3_877_401_405])
    }

    @Test func gstreamerOffer() throws {
        let sdp = try Fixture.gstreamerOffer.parsed()
        #expect(sdp.bundleGroup == ["video0", "audio1"])
        #expect(sdp.iceOptions == "trickle")
        #expect(sdp.media.map(\.mid) == ["video0", "audio1"])
        let video = sdp.media[0], audio = sdp.media[1]
        #expect(video.port == 9 && audio.port == 0)
        #expect(audio.bundleOnly && !video.bundleOnly)
        #expect(video.rtpMaps == [RtpMap(payloadType: 96, encodingName: "VP8", clockRate: 90000)])
        #expect(audio.rtpMaps == [RtpMap(payloadType: 97, encodingName: "OPUS", clockRate: 48000, channels: 2)])
        #expect(video.rtcpFeedback(for: 96) == ["nack pli", "ccm fir", "transport-cc"])
        #expect(audio.fmtp(for: 97) == "sprop-stereo=0;sprop-maxcapturerate=48000")
        #expect(video.ssrcIds == [1_975_719_335] && audio.ssrcIds == [1_948_256_781])
        #expect(video.direction == .sendrecv)
        #expect(video.candidates.isEmpty)
        #expect(video.iceUfrag == "HkAErihrf4w7Q1Um8+KneFkhsgnX6joR")
        #expect(video.attributes.contains(named: "rtcp-mux-only"))
        #expect(video.rtcpReducedSize)
    }
}

@Suite struct SdpEditingTests {
    @Test func settersEditInPlace() throws {
        var sdp = try Fixture.chromiumOffer.parsed()
        var video = sdp.media[1]
        let count = video.attributes.count
        let index = try #require(video.attributes.firstIndex { $0.name == "sendonly" })
        video.direction = .recvonly
        #expect(video.direction == .recvonly)
        #expect(video.attributes[index] == SdpAttribute(name: "recvonly"))
        #expect(video.attributes.count == count)
        video.mid = "v"
        #expect(video.mid == "v")
        video.rtcpMux = false
        #expect(!video.rtcpMux && video.attributes.count == count - 1)
        sdp.media[1] = video
        sdp.iceLite = true
        sdp.bundleGroup = ["0", "v"]
        let again = try SessionDescription.parse(sdp.serialize())
        #expect(again == sdp)
        #expect(again.iceLite)
        #expect(again.bundleGroup == ["0", "v"])
        #expect(again.media[1].direction == .recvonly)
    }

    @Test func buildFromScratch() throws {
        var m = MediaDescription(kind: "video", formats: ["96", "97"])
        m.mid = "0"
        m.direction = .sendonly
        m.rtcpMux = true
        m.attributes.append(SdpAttribute(name: "rtpmap", value: RtpMap(payloadType: 96, encodingName: "VP8", clockRate: 90000).attributeValue))
        m.attributes.append(SdpAttribute(name: "rtpmap", value: "97 rtx/90000"))
        m.attributes.append(SdpAttribute(name: "fmtp", value: "97 apt=96"))
        m.attributes.append(SdpAttribute(name: "extmap", value: ExtMap(id: 4, uri: "urn:ietf:params:rtp-hdrext:sdes:mid").attributeValue))
        m.attributes.append(SdpAttribute(name: "ssrc", value: SsrcLine(ssrc: 1234, attribute: "cname", value: "minato").attributeValue))
        m.attributes.append(SdpAttribute(name: "candidate", value: "1 1 udp 2130706431 127.0.0.1 5000 typ host"))
        m.attributes.append(SdpAttribute(name: "end-of-candidates"))
        let sdp = SessionDescription(
            origin: SdpOrigin(sessionId: "1", sessionVersion: "1"), attributes: [SdpAttribute(name: "ice-lite")], media: [m])
        let text = sdp.serialize()
        #expect(text.hasPrefix("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=ice-lite\r\nm=video 9 UDP/TLS/RTP/SAVPF 96 97\r\nc=IN IP4 0.0.0.0\r\n"))
        let back = try SessionDescription.parse(text)
        #expect(back == sdp)
        #expect(back.media[0].rtpMaps.count == 2)
        #expect(back.media[0].fmtp(for: 97) == "apt=96")
        #expect(back.media[0].ssrcs == [SsrcLine(ssrc: 1234, attribute: "cname", value: "minato")])
        #expect(back.media[0].candidates == ["1 1 udp 2130706431 127.0.0.1 5000 typ host"])
        #expect(MediaDirection.sendonly.reversed == .recvonly)
    }

    @Test func keepsUnknownAndOptionalLines() throws {
        let text = """
        v=0
        o=alice 1 2 IN IP6 ::1
        s=A session
        i=info
        u=http://example.invalid/
        e=a@example.invalid
        c=IN IP4 127.0.0.1
        b=AS:1000
        t=0 0
        r=604800 3600 0 90000
        z=2882844526 -1h
        x=unknown letter
        a=recvonly
        m=audio 5000/2 RTP/AVP 0 8
        i=audio title
        c=IN IP4 127.0.0.1
        b=TIAS:64000
        k=prompt
        a=rtpmap:0 PCMU/8000
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        a=sctp-port:5000
        a=max-message-size:262144
        """
        let sdp = try SessionDescription.parse(text)
        #expect(sdp.origin.username == "alice" && sdp.origin.addressType == "IP6" && sdp.origin.address == "::1")
        #expect(sdp.sessionName == "A session")
        #expect(sdp.connection == "IN IP4 127.0.0.1")
        #expect(sdp.bandwidths == ["AS:1000"])
        #expect(sdp.otherLines.map(\.type) == ["i", "u", "e", "r", "z", "x"])
        #expect(sdp.media[0].portCount == 2)
        #expect(sdp.media[0].bandwidths == ["TIAS:64000"])
        #expect(sdp.media[0].otherLines == [SdpLine(type: "i", value: "audio title"), SdpLine(type: "k", value: "prompt")])
        #expect(sdp.media[1].formats == ["webrtc-datachannel"])
        #expect(sdp.media[1].attributes.firstValue(named: "sctp-port") == "5000")
        #expect(normalizedLines(sdp.serialize()) == normalizedLines(text))
    }
}
