import Foundation
import Testing
@testable import MinatoWire

/// The SDP the server writes (`SfuSdp`, serialized by `SdpNegotiation` in MinatoRooms): its
/// answers to the captured publisher offers and a receive offer, pinned byte for byte against
/// `Fixtures/minato-*.sdp` (captured from the string-concatenating writer this replaced, so a
/// difference is a change browsers and aiortc would see) and line by line for what matters.
@Suite struct SfuSdpTests {
    static let local = SdpLocalTransport(
        iceUfrag: "mInAtOuF", icePwd: "minatopwdminatopwdminato",
        fingerprint: "sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89",
        candidates: ["candidate:1 1 UDP 2015363327 127.0.0.1 40001 typ host"], iceLite: true)

    static func golden(_ name: String) throws -> String {
        let dir = try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil))
        return try String(contentsOf: dir.appendingPathComponent(name + ".sdp"), encoding: .utf8)
    }

    static func answer(_ fixture: Fixture) throws -> String {
        try SfuSdp.answer(toSenderOffer: fixture.parsed(), local: local, sessionId: 4242, version: 3).serialize()
    }

    static let publisherOffers: [Fixture] = [.aiortcOffer, .chromiumOffer, .chromiumSimulcast, .gstreamerOffer]

    @Test(arguments: publisherOffers)
    func answerMatchesGolden(_ fixture: Fixture) throws {
        #expect(try Self.answer(fixture) == Self.golden("minato-answer-to-" + fixture.rawValue))
    }

    @Test func answerToChromiumPinsTheImportantLines() throws {
        let text = try Self.answer(.chromiumOffer)
        let lines = normalizedLines(text)
        #expect(Array(lines.prefix(7)) == ["v=0", "o=minato 4242 3 IN IP4 127.0.0.1", "s=minato", "t=0 0",
                                          "a=group:BUNDLE 0 1", "a=ice-lite", "a=msid-semantic: WMS *"])
        #expect(lines.filter { $0.hasPrefix("m=") } == ["m=audio 9 UDP/TLS/RTP/SAVPF 63 111", "m=video 9 UDP/TLS/RTP/SAVPF 96 97"])
        #expect(lines.filter { $0 == "a=setup:passive" }.count == 2)
        #expect(lines.filter { $0 == "a=recvonly" }.count == 2)
        #expect(lines.contains("a=rtpmap:111 opus/48000/2") && lines.contains("a=fmtp:111 minptime=10;useinbandfec=1"))
        #expect(lines.contains("a=rtpmap:63 red/48000/2") && lines.contains("a=fmtp:63 111/111"))
        #expect(lines.contains("a=rtpmap:96 VP8/90000"))
        #expect(lines.contains("a=rtpmap:97 rtx/90000") && lines.contains("a=fmtp:97 apt=96"))
        #expect(lines.filter { $0.hasPrefix("a=rtcp-fb:") } == ["a=rtcp-fb:111 transport-cc", "a=rtcp-fb:96 nack",
                                                                 "a=rtcp-fb:96 nack pli", "a=rtcp-fb:96 ccm fir",
                                                                 "a=rtcp-fb:96 transport-cc"])
        // Only extensions Minato knows, with the publisher's ids; transport-cc (it feeds back).
        #expect(lines.contains("a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"))
        #expect(lines.contains("a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level"))
        #expect(lines.contains("a=extmap:14 urn:ietf:params:rtp-hdrext:toffset"))
        // Candidates and end-of-candidates once, in the first m-section.
        let audio = try #require(lines.firstIndex(of: "m=audio 9 UDP/TLS/RTP/SAVPF 63 111"))
        let video = try #require(lines.firstIndex(of: "m=video 9 UDP/TLS/RTP/SAVPF 96 97"))
        let candidate = try #require(lines.firstIndex(of: "a=candidate:1 1 UDP 2015363327 127.0.0.1 40001 typ host"))
        #expect(candidate > audio && candidate < video)
        #expect(lines.filter { $0 == "a=end-of-candidates" }.count == 1)
        #expect(lines.filter { $0.hasPrefix("a=candidate:") }.count == 1)
    }

    @Test func answerRejectsWhatItCannotForward() throws {
        // GStreamer's bundle-only audio m-section has port 0: rejected, kept inactive with its mid.
        let gst = try SessionDescription.parse(Self.answer(.gstreamerOffer))
        #expect(gst.bundleGroup == ["video0"])
        #expect(gst.media[1].port == 0 && gst.media[1].mid == "audio1" && gst.media[1].direction == .inactive)
        #expect(gst.media[1].mediaLine == "audio 0 UDP/TLS/RTP/SAVPF 97")
        // Simulcast offer: H264 (packetization-mode=1) is preferred and chosen with its RTX; fmtp rebuilt.
        let sim = try SessionDescription.parse(Self.answer(.chromiumSimulcast))
        #expect(sim.media[1].rtpMaps == [RtpMap(payloadType: 102, encodingName: "H264", clockRate: 90000),
                                         RtpMap(payloadType: 103, encodingName: "rtx", clockRate: 90000)])
        #expect(sim.media[1].fmtp(for: 102) == "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f")
        // An offerer's `a=setup:passive` makes Minato active.
        var passive = try Fixture.aiortcOffer.parsed()
        for i in passive.media.indices { passive.media[i].attributes.set("setup", "passive") }
        let answer = try SfuSdp.answer(toSenderOffer: passive, local: Self.local, sessionId: 1, version: 1)
        #expect(answer.media.allSatisfy { $0.setup == "active" })
    }

    @Test func answerNeedsMidsOnAcceptedSections() throws {
        var offer = try Fixture.chromiumOffer.parsed()
        offer.media[1].mid = nil
        #expect(throws: SdpNegotiationError.missingMid) {
            try SfuSdp.answer(toSenderOffer: offer, local: Self.local, sessionId: 1, version: 1)
        }
        offer.media[1].attributes.append(SdpAttribute(name: "mid", value: "bad mid"))
        #expect(throws: SdpNegotiationError.missingMid) {
            try SfuSdp.answer(toSenderOffer: offer, local: Self.local, sessionId: 1, version: 1)
        }
    }

    static func receiverStreams() throws -> [SfuSdp.ReceiverStream] {
        let chromium = try Fixture.chromiumOffer.parsed()
        let simulcast = try Fixture.chromiumSimulcast.parsed()
        let opus = try #require(SfuSdp.chosenCodec(chromium.media[0]))
        let vp8 = try #require(SfuSdp.chosenCodec(chromium.media[1]))
        let h264 = try #require(SfuSdp.chosenCodec(simulcast.media[1]))
        return [
            .init(mid: "0", kind: "audio", codec: opus, active: true, ssrc: 1001, streamId: "pub-a", trackId: "track-a", cname: "minato",
                  redPayloadType: 63),
            .init(mid: "1", kind: "video", codec: vp8, active: true, ssrc: 1002, streamId: "pub-v", trackId: "track-v", cname: "minato",
                  rtxPayloadType: 97, rtxSsrc: 2002),
            .init(mid: "2", kind: "video", codec: h264, active: false, ssrc: 1003, streamId: "pub-h", trackId: "track-h", cname: "minato",
                  rtxPayloadType: 103, rtxSsrc: 2003),
        ]
    }

    @Test func receiveOfferMatchesGolden() throws {
        let offer = SfuSdp.receiveOffer(streams: try Self.receiverStreams(), local: Self.local, sessionId: 777, version: 5)
        #expect(offer.serialize() == (try Self.golden("minato-receive-offer")))
    }

    @Test func receiveOfferPinsTheImportantLines() throws {
        let text = SfuSdp.receiveOffer(streams: try Self.receiverStreams(), local: Self.local, sessionId: 777, version: 5).serialize()
        let lines = normalizedLines(text)
        #expect(lines.contains("a=group:BUNDLE 0 1 2") && lines.contains("a=ice-lite"))
        #expect(lines.filter { $0 == "a=setup:actpass" }.count == 3)
        #expect(lines.filter { $0.hasPrefix("a=sendonly") || $0 == "a=inactive" } == ["a=sendonly", "a=sendonly", "a=inactive"])
        #expect(lines.filter { $0.hasPrefix("a=msid:") } == ["a=msid:pub-a track-a", "a=msid:pub-v track-v"])
        #expect(lines.filter { $0.hasPrefix("a=ssrc") } == ["a=ssrc:1001 cname:minato", "a=ssrc:1001 msid:pub-a track-a",
                                                             "a=ssrc-group:FID 1002 2002",
                                                             "a=ssrc:1002 cname:minato", "a=ssrc:1002 msid:pub-v track-v",
                                                             "a=ssrc:2002 cname:minato", "a=ssrc:2002 msid:pub-v track-v"])
        #expect(lines.filter { $0.hasPrefix("m=") } == ["m=audio 9 UDP/TLS/RTP/SAVPF 63 111", "m=video 9 UDP/TLS/RTP/SAVPF 96 97",
                                                       "m=video 9 UDP/TLS/RTP/SAVPF 102 103"])
        #expect(lines.filter { $0 == "a=rtcp-rsize" }.count == 3)
        // Minato's own extension ids: audio 1, 2, 5; video 2, 3, 4, 5; never the MID or RIDs.
        let twcc = "a=extmap:5 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
        #expect(lines.filter { $0.hasPrefix("a=extmap:") } == [
            "a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level",
            "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time", twcc,
            "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time", "a=extmap:3 urn:3gpp:video-orientation",
            "a=extmap:4 urn:ietf:params:rtp-hdrext:toffset", twcc,
            "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time", "a=extmap:3 urn:3gpp:video-orientation",
            "a=extmap:4 urn:ietf:params:rtp-hdrext:toffset", twcc])
        #expect(lines.filter { $0.hasPrefix("a=candidate:") }.count == 1)
        let parsed = try SessionDescription.parse(text)
        #expect(parsed.media[0].endOfCandidates && !parsed.media[1].endOfCandidates)
        #expect(parsed.media[2].rtcpFeedback(for: 102) == ["nack", "nack pli", "ccm fir", "rrtr", "transport-cc"])
    }

    @Test func emptyReceiveOfferHasNoBundleGroup() {
        let offer = SfuSdp.receiveOffer(streams: [], local: Self.local, sessionId: 1, version: 1)
        #expect(offer.serialize() == "v=0\r\no=minato 1 1 IN IP4 127.0.0.1\r\ns=minato\r\nt=0 0\r\na=ice-lite\r\na=msid-semantic: WMS *\r\n")
    }
}

/// Which `a=simulcast` lines the SFU takes (`SfuSdp.simulcastRids`) and what its answer says.
@Suite struct SimulcastSdpTests {
    static func media(_ lines: [String]) throws -> MediaDescription {
        let sdp = (["v=0", "o=- 1 1 IN IP4 127.0.0.1", "s=-", "t=0 0", "m=video 9 UDP/TLS/RTP/SAVPF 96", "a=mid:0",
                    "a=rtpmap:96 VP8/90000"] + lines).joined(separator: "\r\n") + "\r\n"
        return try #require(try SessionDescription.parse(sdp).media.first)
    }

    @Test func theSendersLayersInItsOrder() throws {
        let m = try Self.media(["a=rid:q send", "a=rid:h send", "a=rid:f send", "a=simulcast:send q;~h;f,x"])
        #expect(SfuSdp.simulcastRids(m) == .layers(["q", "h", "f"]))
        #expect(SfuSdp.simulcastRids(try Self.media(["a=rid:q send"])) == nil)
        #expect(SfuSdp.simulcastRids(try Self.media(["a=rid:q recv", "a=simulcast:recv q"])) == nil)
    }

    @Test func linesItCannotTakeSayWhy() throws {
        for lines in [["a=rid:q send", "a=simulcast:send q;z"],                // z never declared
                      ["a=rid:q send", "a=simulcast:send q;q"],                // twice
                      ["a=rid:q-is-far-too-long-for-one-byte send", "a=simulcast:send q-is-far-too-long-for-one-byte"],
                      ["a=rid:q send", "a=simulcast:send"],
                      ["a=rid:q.1 send", "a=simulcast:send q.1"]] {
            guard case .invalid? = SfuSdp.simulcastRids(try Self.media(lines)) else {
                Issue.record("accepted \(lines)")
                continue
            }
        }
    }
}
