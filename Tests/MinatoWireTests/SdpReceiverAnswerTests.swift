import Testing
import MinatoWire

/// The SFU's answer to a WHEP player's own offer (`SfuSdp.answer(toReceiverOffer:)`), with the
/// offer GStreamer 1.22's webrtcbin makes here (VP8 + H264 + RTX for VP8, Opus; video bundle-only).
@Suite struct SdpReceiverAnswerTests {
    static let gstreamerOffer = """
        v=0\r
        o=- 4312880246432289764 0 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=ice-options:trickle\r
        a=group:BUNDLE audio0 video1\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111\r
        c=IN IP4 127.0.0.1\r
        a=setup:actpass\r
        a=ice-ufrag:yrlt/wu7C64y2YjzRAVqQ+zEkk03Q3mj\r
        a=ice-pwd:nVGtL2iTJkcYlaT0XTFCcC2qJ6yq/lCl\r
        a=rtcp-mux\r
        a=rtcp-rsize\r
        a=recvonly\r
        a=rtpmap:111 OPUS/48000/2\r
        a=rtcp-fb:111 transport-cc\r
        a=mid:audio0\r
        a=fingerprint:sha-256 70:24:57:3F:5D:46:71:26:71:C3:AD:EA:48:7A:A1:4A:C3:36:BB:87:D4:88:95:FA:C8:34:09:37:0A:A3:B5:9F\r
        a=candidate:1 1 UDP 2015363327 127.0.0.1 35229 typ host\r
        m=video 0 UDP/TLS/RTP/SAVPF 96 102 97\r
        c=IN IP4 127.0.0.1\r
        a=setup:actpass\r
        a=ice-ufrag:yrlt/wu7C64y2YjzRAVqQ+zEkk03Q3mj\r
        a=ice-pwd:nVGtL2iTJkcYlaT0XTFCcC2qJ6yq/lCl\r
        a=bundle-only\r
        a=rtcp-mux\r
        a=rtcp-rsize\r
        a=recvonly\r
        a=rtpmap:96 VP8/90000\r
        a=rtcp-fb:96 nack\r
        a=rtcp-fb:96 nack pli\r
        a=rtcp-fb:96 ccm fir\r
        a=rtcp-fb:96 transport-cc\r
        a=rtpmap:102 H264/90000\r
        a=rtcp-fb:102 nack\r
        a=rtcp-fb:102 nack pli\r
        a=fmtp:102 packetization-mode=1;profile-level-id=42e01f;level-asymmetry-allowed=1\r
        a=rtpmap:97 rtx/90000\r
        a=fmtp:97 apt=96\r
        a=mid:video1\r
        a=fingerprint:sha-256 70:24:57:3F:5D:46:71:26:71:C3:AD:EA:48:7A:A1:4A:C3:36:BB:87:D4:88:95:FA:C8:34:09:37:0A:A3:B5:9F\r
        a=rtcp-mux-only\r

        """

    /// A publisher's codec as the room has it, from a one-line publisher m-section.
    static func published(_ rtpmap: String, fmtp: String? = nil, pt: UInt8 = 120) throws -> ForwardableCodec {
        var text = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF \(pt)\r\na=mid:0\r\na=sendonly\r\na=rtpmap:\(pt) \(rtpmap)\r\n"
        if let fmtp { text += "a=fmtp:\(pt) \(fmtp)\r\n" }
        let m = try #require(try SessionDescription.parse(text).media.first)
        return try #require(m.forwardableCodecs.first)
    }

    static let local = SdpLocalTransport(iceUfrag: "srvU", icePwd: "serverpasswordserverpass", fingerprint: "sha-256 AA:BB",
                                         candidates: ["candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host"], iceLite: true)

    @Test func thePlayersOwnPayloadTypeForThePublishersCodec() throws {
        let offer = try SessionDescription.parse(Self.gstreamerOffer)
        let video = offer.media[1]
        let h264 = try #require(SfuSdp.receiverCodec(in: video, for: try Self.published("H264/90000",
                                                                                     fmtp: "packetization-mode=1;profile-level-id=42e01f")))
        #expect(h264.payloadType == 102)
        let vp8 = try #require(SfuSdp.receiverCodec(in: video, for: try Self.published("VP8/90000")))
        #expect(vp8.payloadType == 96)
        #expect(video.rtxPayloadType(associatedWith: 96) == 97)
        #expect(video.rtxPayloadType(associatedWith: 102) == nil)
        // A codec the player did not offer: it cannot decode the stream.
        #expect(SfuSdp.receiverCodec(in: video, for: try Self.published("VP9/90000")) == nil)
        #expect(SfuSdp.receiverCodec(in: video, for: try Self.published("AV1/90000")) == nil)
    }

    @Test func h264PrefersThePublishersProfile() throws {
        let text = Self.gstreamerOffer
            .replacingOccurrences(of: "m=video 0 UDP/TLS/RTP/SAVPF 96 102 97", with: "m=video 0 UDP/TLS/RTP/SAVPF 96 100 102 97")
            .replacingOccurrences(of: "a=rtpmap:102 H264/90000\r\n",
                                  with: "a=rtpmap:100 H264/90000\r\na=fmtp:100 packetization-mode=1;profile-level-id=640c1f\r\na=rtpmap:102 H264/90000\r\n")
        let video = try SessionDescription.parse(text).media[1]
        let baseline = try Self.published("H264/90000", fmtp: "packetization-mode=1;profile-level-id=42E01F")
        #expect(SfuSdp.receiverCodec(in: video, for: baseline)?.payloadType == 102)
        let high = try Self.published("H264/90000", fmtp: "packetization-mode=1;profile-level-id=640c1f")
        #expect(SfuSdp.receiverCodec(in: video, for: high)?.payloadType == 100)
        // No matching profile: the first H264 the player offered.
        let other = try Self.published("H264/90000", fmtp: "packetization-mode=1;profile-level-id=4d001f")
        #expect(SfuSdp.receiverCodec(in: video, for: other)?.payloadType == 100)
    }

    @Test func answerSendsEachStreamInThePlayersFormats() throws {
        let offer = try SessionDescription.parse(Self.gstreamerOffer)
        let audioCodec = try #require(offer.media[0].forwardableCodecs.first)
        let videoCodec = try #require(SfuSdp.receiverCodec(in: offer.media[1], for: try Self.published("VP8/90000")))
        let streams = [
            SfuSdp.AnsweredReceiverStream(mid: "audio0", codec: audioCodec, rtxPayloadType: nil, ssrc: 11, rtxSsrc: nil,
                                          streamId: "minato", trackId: "audio-audio0", cname: "c", extensions: []),
            SfuSdp.AnsweredReceiverStream(mid: "video1", codec: videoCodec, rtxPayloadType: 97, ssrc: 22, rtxSsrc: 23,
                                          streamId: "minato", trackId: "video-video1", cname: "c", extensions: []),
        ]
        let answer = SfuSdp.answer(toReceiverOffer: offer, streams: streams, local: Self.local, sessionId: 7, version: 1)
        let text = answer.serialize()
        let again = try SessionDescription.parse(text)
        #expect(again.bundleGroup == ["audio0", "video1"])
        #expect(text.contains("a=ice-lite\r\n"))
        #expect(again.media.map(\.direction) == [.sendonly, .sendonly])
        #expect(again.media.map(\.payloadTypes) == [[111], [96, 97]])
        #expect(again.media[1].ssrcGroups.first?.ssrcs == [22, 23])
        #expect(again.media.allSatisfy { $0.attributes.contains(named: "setup") })
        #expect(text.contains("a=setup:passive\r\n") && !text.contains("a=setup:actpass"))
        // Only feedback the player offered for the codec (no rrtr; transport-cc, which it offered).
        #expect(text.contains("a=rtcp-fb:96 nack\r\n") && text.contains("a=rtcp-fb:96 nack pli\r\n"))
        #expect(!text.contains("rrtr") && text.contains("a=rtcp-fb:96 transport-cc\r\n"))
        // Candidates once, in the first m-section.
        #expect(text.components(separatedBy: "a=candidate:").count == 2)
        #expect(again.media[0].attributes.contains(named: "candidate"))
    }

    @Test func mSectionsWithoutAStreamAreRejected() throws {
        let offer = try SessionDescription.parse(Self.gstreamerOffer)
        let audioCodec = try #require(offer.media[0].forwardableCodecs.first)
        let streams = [SfuSdp.AnsweredReceiverStream(mid: "audio0", codec: audioCodec, rtxPayloadType: nil, ssrc: 11,
                                                     rtxSsrc: nil, streamId: "s", trackId: "t", cname: "c", extensions: [])]
        let answer = SfuSdp.answer(toReceiverOffer: offer, streams: streams, local: Self.local, sessionId: 7, version: 1)
        #expect(answer.media.count == 2)
        #expect(answer.media[1].port == 0)
        #expect(answer.bundleGroup == ["audio0"])
    }
}
