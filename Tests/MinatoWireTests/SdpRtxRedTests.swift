import Foundation
import Testing
@testable import MinatoWire

/// RTX (RFC 4588) and RED (RFC 2198) in the SDP the server writes and reads: accepted from a
/// publisher's offer beside the chosen codec (RED first), offered to subscribers (RTX with an
/// SSRC of its own per subscription), and read back from a subscriber's answer.
@Suite struct SdpRtxRedTests {
    static let local = SfuSdpTests.local

    static func answer(_ offer: SessionDescription) throws -> SessionDescription {
        try SfuSdp.answer(toSenderOffer: offer, local: local, sessionId: 1, version: 1)
    }

    static func lines(_ m: MediaDescription) -> [String] { m.attributes.map { "a=" + $0.description } }

    // MARK: The answer to a publisher

    @Test func answerToChromiumAcceptsRtxAndPutsRedFirst() throws {
        let answer = try Self.answer(Fixture.chromiumOffer.parsed())
        let audio = answer.media[0], video = answer.media[1]
        #expect(audio.formats == ["63", "111"])
        let a = Self.lines(audio).filter { $0.hasPrefix("a=rtpmap") || $0.hasPrefix("a=fmtp") || $0.hasPrefix("a=rtcp-fb") }
        #expect(a == ["a=rtpmap:63 red/48000/2", "a=fmtp:63 111/111", "a=rtpmap:111 opus/48000/2",
                      "a=fmtp:111 minptime=10;useinbandfec=1", "a=rtcp-fb:111 transport-cc"])
        #expect(video.formats == ["96", "97"])
        let v = Self.lines(video).filter { $0.hasPrefix("a=rtpmap") || $0.hasPrefix("a=fmtp") || $0.hasPrefix("a=rtcp-fb") }
        #expect(v == ["a=rtpmap:96 VP8/90000", "a=rtcp-fb:96 nack", "a=rtcp-fb:96 nack pli", "a=rtcp-fb:96 ccm fir",
                      "a=rtcp-fb:96 transport-cc", "a=rtpmap:97 rtx/90000", "a=fmtp:97 apt=96"])
        // What the answer accepted reads back as what the room layer gives the engine.
        let offer = try Fixture.chromiumOffer.parsed()
        let opus = try #require(SfuSdp.chosenCodec(offer.media[0])), vp8 = try #require(SfuSdp.chosenCodec(offer.media[1]))
        #expect(SfuSdp.acceptedRed(offer.media[0], for: opus) == 63 && SfuSdp.acceptedRtx(offer.media[0], for: opus) == nil)
        #expect(SfuSdp.acceptedRtx(offer.media[1], for: vp8) == 97 && SfuSdp.acceptedRed(offer.media[1], for: vp8) == nil)
        #expect(SfuSdp.sendsNack(for: vp8) && !SfuSdp.sendsNack(for: opus))
    }

    @Test func answerTakesTheRtxOfTheChosenCodec() throws {
        // Simulcast offer: H264 102 is chosen, its RTX is 103 (not VP8's 97, listed later).
        let sim = try Self.answer(Fixture.chromiumSimulcast.parsed())
        #expect(sim.media[1].formats == ["102", "103"] && sim.media[1].fmtp(for: 103) == "apt=102")
        // aiortc: VP8 97 with RTX 98; opus 96 without RED or fmtp gets useinbandfec=1.
        let aiortc = try Self.answer(Fixture.aiortcOffer.parsed())
        #expect(aiortc.media[0].formats == ["96"] && aiortc.media[0].fmtp(for: 96) == "useinbandfec=1")
        #expect(aiortc.media[1].formats == ["97", "98"] && aiortc.media[1].rtpMap(for: 98)?.encodingName == "rtx")
        // aiortc offers no "ccm fir": the answer keeps only what was offered (RFC 4585 4.2).
        #expect(aiortc.media[1].rtcpFeedback(for: 97) == ["nack", "nack pli"])
    }

    @Test func noRtxOrRedWhenNotOffered() throws {
        // GStreamer offers VP8 without RTX; its opus m-section is rejected (bundle-only, port 0).
        let gst = try Self.answer(Fixture.gstreamerOffer.parsed())
        #expect(gst.media[0].formats == ["96"] && gst.media[0].rtpMaps.count == 1)
        // GStreamer offers no plain "nack": the answer does not add it (and Minato does not NACK it).
        #expect(gst.media[0].rtcpFeedback(for: 96) == ["nack pli", "ccm fir", "transport-cc"])
        #expect(!gst.serialize().contains("rtx") && !gst.serialize().contains("red/"))
        // Chromium's offer without its RED and RTX formats.
        var offer = try Fixture.chromiumOffer.parsed()
        offer.media[0].formats.removeAll { $0 == "63" }
        offer.media[1].formats.removeAll { $0 == "97" }
        let answer = try Self.answer(offer)
        #expect(answer.media[0].formats == ["111"] && answer.media[1].formats == ["96"])
        #expect(!answer.serialize().contains("rtx") && !answer.serialize().contains("red/"))
    }

    /// The Chromium offer's audio and video m-sections with `edit` applied to one attribute.
    static func editedOffer(audio: Bool, _ edit: (inout [SdpAttribute]) -> Void) throws -> SessionDescription {
        var offer = try Fixture.chromiumOffer.parsed()
        edit(&offer.media[audio ? 0 : 1].attributes)
        return offer
    }

    static func replace(_ name: String, _ old: String, _ new: String) -> (inout [SdpAttribute]) -> Void {
        { attributes in
            for i in attributes.indices where attributes[i].name == name && attributes[i].value == old {
                attributes[i].value = new
            }
        }
    }

    @Test(arguments: [
        ("fmtp", "97 apt=96", "97 apt=98"),              // RTX of another codec
        ("fmtp", "97 apt=96", "97 apt=096"),             // not the payload type's spelling
        ("fmtp", "97 apt=96", "97 rtx-time=3000"),       // no apt
        ("rtpmap", "97 rtx/90000", "97 rtx/48000"),      // wrong clock rate
        ("rtpmap", "97 rtx/90000", "97 rtx/90000/2"),    // channels on video
        ("rtpmap", "97 rtx/90000", "97 ulpfec/90000"),   // not RTX
    ])
    func rtxIsDeclinedUnlessItIsExactlyRtxOfTheCodec(_ name: String, _ old: String, _ new: String) throws {
        let answer = try Self.answer(Self.editedOffer(audio: false, Self.replace(name, old, new)))
        #expect(answer.media[1].formats == ["96"])
        #expect(!answer.serialize().contains("rtx"))
    }

    @Test(arguments: [
        ("fmtp", "63 111/111", "63 111/110"),            // RED of something else too
        ("fmtp", "63 111/111", "63 111"),
        ("fmtp", "63 111/111", "63 111/111/111"),
        ("fmtp", "63 111/111", "63 111/111 x"),
        ("rtpmap", "63 red/48000/2", "63 red/90000"),
        ("rtpmap", "63 red/48000/2", "63 red/48000/1"),
        ("rtpmap", "63 red/48000/2", "63 ulpfec/48000/2"),
    ])
    func redIsDeclinedUnlessItIsExactlyRedOfOpus(_ name: String, _ old: String, _ new: String) throws {
        let answer = try Self.answer(Self.editedOffer(audio: true, Self.replace(name, old, new)))
        #expect(answer.media[0].formats == ["111"])
        #expect(!answer.serialize().contains("red/"))
    }

    @Test func rtxAndRedMustBeOnTheMLineAndOfTheRightKind() throws {
        var offer = try Fixture.chromiumOffer.parsed()
        // Formats with rtpmap/fmtp but absent from the m= line are not offered.
        offer.media[0].formats.removeAll { $0 == "63" }
        offer.media[1].formats.removeAll { $0 == "97" }
        // RTX lines in the audio section and RED lines in the video section are ignored.
        offer.media[0].formats.append("98")
        offer.media[0].attributes += [SdpAttribute(name: "rtpmap", value: "98 rtx/90000"),
                                      SdpAttribute(name: "fmtp", value: "98 apt=111")]
        offer.media[1].formats.append("62")
        offer.media[1].attributes += [SdpAttribute(name: "rtpmap", value: "62 red/48000/2"),
                                      SdpAttribute(name: "fmtp", value: "62 96/96")]
        let answer = try Self.answer(offer)
        #expect(answer.media[0].formats == ["111"] && answer.media[1].formats == ["96"])
        // RED naming its own payload type as the block is not RED of opus.
        #expect(offer.media[0].redPayloadType(wrapping: 63) == nil)
    }

    @Test func opusAnswerAlwaysAsksForInBandFec() throws {
        let offer = try Self.editedOffer(audio: true, Self.replace("fmtp", "111 minptime=10;useinbandfec=1", "111 useinbandfec=0;stereo=1"))
        let answer = try Self.answer(offer)
        #expect(answer.media[0].fmtp(for: 111) == "useinbandfec=1;stereo=1")
        // Video fmtp is untouched.
        #expect(answer.media[1].fmtp(for: 96) == nil)
    }

    @Test func fmtpSetReplacesAppendsAndRefusesUnsafeText() {
        var p = FmtpParameters(parsing: "minptime=10;UseInBandFec=0")
        p.set("useinbandfec", to: "1")
        #expect(p.text == "minptime=10;UseInBandFec=1")
        p.set("stereo", to: "1")
        #expect(p.text == "minptime=10;UseInBandFec=1;stereo=1")
        p.set("bad key", to: "1")
        p.set("x", to: "a;b")
        p.set("", to: "1")
        #expect(p.text == "minptime=10;UseInBandFec=1;stereo=1")
        var full = FmtpParameters(parsing: (0..<FmtpParameters.maxCount).map { "k\($0)=v" }.joined(separator: ";"))
        full.set("useinbandfec", to: "1")
        #expect(full.parameters.count == FmtpParameters.maxCount && full["useinbandfec"] == "1" && full["k15"] == nil)
    }

    // MARK: The offer to a subscriber

    static func streams(active: Bool = true) throws -> [SfuSdp.ReceiverStream] {
        let offer = try Fixture.chromiumOffer.parsed()
        let opus = try #require(SfuSdp.chosenCodec(offer.media[0])), vp8 = try #require(SfuSdp.chosenCodec(offer.media[1]))
        return [
            .init(mid: "0", kind: "audio", codec: opus, active: active, ssrc: 1001, streamId: "pub-a", trackId: "track-a",
                  cname: "minato", redPayloadType: 63),
            .init(mid: "1", kind: "video", codec: vp8, active: active, ssrc: 1002, streamId: "pub-v", trackId: "track-v",
                  cname: "minato", rtxPayloadType: 97, rtxSsrc: 2002),
        ]
    }

    static func receiveOffer(_ streams: [SfuSdp.ReceiverStream]) -> SessionDescription {
        SfuSdp.receiveOffer(streams: streams, local: local, sessionId: 777, version: 5)
    }

    @Test func receiveOfferCarriesRedFirstAndRtxWithItsOwnSsrc() throws {
        let offer = Self.receiveOffer(try Self.streams())
        let audio = offer.media[0], video = offer.media[1]
        #expect(audio.formats == ["63", "111"])
        #expect(audio.rtpMap(for: 63) == RtpMap(payloadType: 63, encodingName: "red", clockRate: 48000, channels: 2))
        #expect(audio.fmtp(for: 63) == "111/111" && audio.ssrcIds == [1001] && audio.ssrcGroups.isEmpty)
        #expect(video.formats == ["96", "97"])
        #expect(video.fmtp(for: 97) == "apt=96" && video.rtcpFeedback(for: 96) == ["nack", "nack pli", "ccm fir", "rrtr", "transport-cc"])
        #expect(video.ssrcGroups == [SsrcGroup(semantics: "FID", ssrcs: [1002, 2002])])
        #expect(Self.lines(video).filter { $0.hasPrefix("a=ssrc") } == [
            "a=ssrc-group:FID 1002 2002",
            "a=ssrc:1002 cname:minato", "a=ssrc:1002 msid:pub-v track-v",
            "a=ssrc:2002 cname:minato", "a=ssrc:2002 msid:pub-v track-v"])
        // It parses back as a publisher's offer would: the same formats are found again.
        let vp8 = try #require(SfuSdp.chosenCodec(video))
        #expect(SfuSdp.acceptedRtx(video, for: vp8) == 97)
        let opus = try #require(SfuSdp.chosenCodec(audio))
        #expect(opus.payloadType == 111 && SfuSdp.acceptedRed(audio, for: opus) == 63)
    }

    @Test func inactiveStreamsKeepTheirFormatsWithoutSsrcs() throws {
        let offer = Self.receiveOffer(try Self.streams(active: false))
        #expect(offer.media.map(\.formats) == [["63", "111"], ["96", "97"]])
        #expect(offer.media.allSatisfy { $0.ssrcs.isEmpty && $0.ssrcGroups.isEmpty && $0.direction == .inactive })
    }

    @Test func rtxSsrcIsWrittenOnlyWhenUsable() throws {
        var streams = try Self.streams()
        streams[1].rtxSsrc = 1002        // the media SSRC itself
        #expect(Self.receiveOffer(streams).media[1].ssrcIds == [1002])
        streams[1].rtxSsrc = 0
        #expect(Self.receiveOffer(streams).media[1].ssrcIds == [1002])
        streams[1].rtxSsrc = nil
        #expect(Self.receiveOffer(streams).media[1].ssrcGroups.isEmpty)
        // RTX on audio or RED on video is not written.
        streams[0].rtxPayloadType = 98
        streams[0].rtxSsrc = 3003
        streams[1].redPayloadType = 63
        let offer = Self.receiveOffer(streams)
        #expect(offer.media[0].formats == ["63", "111"] && offer.media[0].ssrcIds == [1001])
        #expect(offer.media[1].formats == ["96", "97"])
    }

    @Test func receiverRtxPayloadTypeIsTheSendersOrAFreeOne() throws {
        let offer = try Fixture.chromiumOffer.parsed()
        let vp8 = try #require(SfuSdp.chosenCodec(offer.media[1])), opus = try #require(SfuSdp.chosenCodec(offer.media[0]))
        #expect(SfuSdp.receiverRtxPayloadType(for: vp8, senderRtx: 97) == 97)
        #expect(SfuSdp.receiverRtxPayloadType(for: vp8, senderRtx: nil) == 97)
        #expect(SfuSdp.receiverRtxPayloadType(for: vp8, senderRtx: 96) == 97)      // never the codec's own
        #expect(SfuSdp.receiverRtxPayloadType(for: opus, senderRtx: 112) == nil)
        var codec = vp8
        codec.payloadType = 127
        #expect(SfuSdp.receiverRtxPayloadType(for: codec, senderRtx: nil) == 96)
        codec.payloadType = 45
        #expect(SfuSdp.receiverRtxPayloadType(for: codec, senderRtx: nil) == 96)
        #expect(SfuSdp.receiverRtxPayloadType(for: codec, senderRtx: 46) == 46)
        codec.payloadType = 102
        #expect(SfuSdp.receiverRtxPayloadType(for: codec, senderRtx: nil) == 103)
    }

    // MARK: The subscriber's answer

    @Test func aiortcAnswerAcceptsRtxButNotRed() throws {
        // aiortc's captured answer to Chromium's offer: mids 0 (opus 111 only) and 1 (VP8 96, RTX 97).
        let answer = try Fixture.aiortcAnswer.parsed()
        let streams = try Self.streams()
        #expect(SfuSdp.acceptance(of: streams[0], in: answer) == SfuSdp.ReceiverAcceptance(codec: true, rtx: false, red: false))
        #expect(SfuSdp.acceptance(of: streams[1], in: answer) == SfuSdp.ReceiverAcceptance(rtx: true, red: false))
    }

    /// A subscriber that cannot decode the codec (Firefox here has no H264) answers its m-section
    /// rejected or without the payload type: the codec is not accepted, so the room ends that
    /// subscription instead of forwarding into a section nobody decodes.
    @Test(arguments: [
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=video 0 UDP/TLS/RTP/SAVPF 96 97"),  // rejected
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=video 9 UDP/TLS/RTP/SAVPF 97"),     // codec dropped
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=video 9 UDP/TLS/RTP/SAVPF 120"),    // another codec
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=audio 9 UDP/TLS/RTP/SAVPF 96 97"),  // other kind
        ("a=mid:1", "a=mid:7"),                                                       // missing
    ])
    func codecIsNotAcceptedByAnAnswerWithoutIt(_ old: String, _ new: String) throws {
        let answer = try SessionDescription.parse(Self.browserAnswer.replacingOccurrences(of: old, with: new))
        #expect(SfuSdp.acceptance(of: try Self.streams()[1], in: answer).codec == false)
        #expect(SfuSdp.acceptance(of: try Self.streams()[0], in: answer).codec == true)
    }

    @Test func bundleOnlySectionWithPortZeroAcceptsTheCodec() throws {
        let text = Self.browserAnswer
            .replacingOccurrences(of: "m=video 9 UDP/TLS/RTP/SAVPF 96 97", with: "m=video 0 UDP/TLS/RTP/SAVPF 96 97")
            .replacingOccurrences(of: "a=mid:1\r\n", with: "a=mid:1\r\na=bundle-only\r\n")
        let answer = try SessionDescription.parse(text)
        #expect(SfuSdp.acceptance(of: try Self.streams()[1], in: answer) == SfuSdp.ReceiverAcceptance(rtx: true, red: false))
    }

    /// A browser-like answer to `receiveOffer(streams())`: both formats kept, RED first.
    static let browserAnswer = """
        v=0\r
        o=- 5 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0 1\r
        m=audio 9 UDP/TLS/RTP/SAVPF 63 111\r
        a=mid:0\r
        a=recvonly\r
        a=rtpmap:63 red/48000/2\r
        a=fmtp:63 111/111\r
        a=rtpmap:111 opus/48000/2\r
        a=fmtp:111 minptime=10;useinbandfec=1\r
        m=video 9 UDP/TLS/RTP/SAVPF 96 97\r
        a=mid:1\r
        a=recvonly\r
        a=rtpmap:96 VP8/90000\r
        a=rtcp-fb:96 nack\r
        a=rtpmap:97 rtx/90000\r
        a=fmtp:97 apt=96\r

        """

    @Test func browserAnswerAcceptsBoth() throws {
        let answer = try SessionDescription.parse(Self.browserAnswer)
        let streams = try Self.streams()
        #expect(SfuSdp.acceptance(of: streams[0], in: answer) == SfuSdp.ReceiverAcceptance(rtx: false, red: true))
        #expect(SfuSdp.acceptance(of: streams[1], in: answer) == SfuSdp.ReceiverAcceptance(rtx: true, red: false))
    }

    @Test(arguments: [
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=video 9 UDP/TLS/RTP/SAVPF 96"),     // RTX not kept
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=video 0 UDP/TLS/RTP/SAVPF 96 97"),  // rejected
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=video 9 UDP/TLS/RTP/SAVPF 97"),     // codec dropped
        ("m=video 9 UDP/TLS/RTP/SAVPF 96 97", "m=audio 9 UDP/TLS/RTP/SAVPF 96 97"),  // other kind
        ("a=mid:1", "a=mid:7"),                                                       // missing
        ("a=fmtp:97 apt=96", "a=fmtp:97 apt=100"),
        ("a=rtpmap:97 rtx/90000", "a=rtpmap:97 VP8/90000"),
        ("a=rtpmap:97 rtx/90000", "a=rtpmap:98 rtx/90000"),                           // no rtpmap for 97
    ])
    func rtxIsNotAcceptedByAnythingLess(_ old: String, _ new: String) throws {
        let answer = try SessionDescription.parse(Self.browserAnswer.replacingOccurrences(of: old, with: new))
        #expect(SfuSdp.acceptance(of: try Self.streams()[1], in: answer).rtx == false)
    }

    @Test(arguments: [
        ("m=audio 9 UDP/TLS/RTP/SAVPF 63 111", "m=audio 9 UDP/TLS/RTP/SAVPF 111"),
        ("m=audio 9 UDP/TLS/RTP/SAVPF 63 111", "m=audio 9 UDP/TLS/RTP/SAVPF 63"),
        ("m=audio 9 UDP/TLS/RTP/SAVPF 63 111", "m=audio 0 UDP/TLS/RTP/SAVPF 63 111"),
        ("a=fmtp:63 111/111", "a=fmtp:63 111/0"),
        ("a=fmtp:63 111/111", "a=fmtp:63 111/111 111"),
        ("a=rtpmap:63 red/48000/2", "a=rtpmap:63 red/8000"),
    ])
    func redIsNotAcceptedByAnythingLess(_ old: String, _ new: String) throws {
        let answer = try SessionDescription.parse(Self.browserAnswer.replacingOccurrences(of: old, with: new))
        #expect(SfuSdp.acceptance(of: try Self.streams()[0], in: answer).red == false)
    }

    @Test func garbageAnswersAcceptNothingAndNeverTrap() throws {
        let streams = try Self.streams()
        let answers = [
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n",
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF\r\na=mid:1\r\n",
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 RTP/AVP 96 97\r\na=mid:1\r\na=rtpmap:97 rtx/90000/99999999999999999999\r\na=fmtp:97 apt=\r\n",
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 x/y 96 97 x\r\na=mid:1\r\na=rtpmap:97 rtx/90000\r\na=fmtp:97 apt=96;apt=97\r\n",
        ]
        for text in answers {
            guard let answer = try? SessionDescription.parse(text) else { continue }
            for s in streams { #expect(SfuSdp.acceptance(of: s, in: answer) == .nothing) }
        }
    }
}
