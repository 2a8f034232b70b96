import Foundation
import Testing
import MinatoWire
@testable import MinatoRooms

/// The room layer's side of RTX and RED: what a publication records from its publisher's offer
/// (and gives the engine's Producer), what each subscription's slot offers, and what the
/// subscriber's answer lets its Consumer use.
@Suite struct RtxRedNegotiationTests {
    /// A captured SDP from Tests/MinatoWireTests/Fixtures.
    static func fixture(_ name: String) throws -> SessionDescription {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("MinatoWireTests/Fixtures/\(name).sdp")
        return try SessionDescription.parse(String(contentsOf: url, encoding: .utf8))
    }

    static func chromiumStreams() throws -> (audio: PublishedStream, video: PublishedStream) {
        let offer = try fixture("chromium-offer-audio-video")
        return (try SdpNegotiation.publishedStream(offer.media[0]), try SdpNegotiation.publishedStream(offer.media[1]))
    }

    @Test func chromiumPublicationRecordsRtxRedAndNack() throws {
        let (audio, video) = try Self.chromiumStreams()
        #expect(audio.codec.payloadType == 111 && audio.redPayloadType == 63 && audio.rtxPayloadType == nil && !audio.nack)
        #expect(video.codec.payloadType == 96 && video.rtxPayloadType == 97 && video.redPayloadType == nil && video.nack)
        #expect(video.ssrc == 3301255606 && video.rtxSsrc == 197313334)
    }

    @Test func publicationsWithoutThemRecordNone() throws {
        // GStreamer: VP8 with "nack pli" and "ccm fir" but no plain nack and no RTX.
        let gst = try SdpNegotiation.publishedStream(Self.fixture("gstreamer-offer-audio-video").media[0])
        #expect(gst.rtxPayloadType == nil && gst.redPayloadType == nil && !gst.nack)
        // aiortc: VP8 97 with RTX 98 and nack; opus without RED.
        let aiortc = try Self.fixture("aiortc-offer-audio-video")
        let a = try SdpNegotiation.publishedStream(aiortc.media[0]), v = try SdpNegotiation.publishedStream(aiortc.media[1])
        #expect(a.redPayloadType == nil && v.rtxPayloadType == 98 && v.nack)
    }

    static func slot(_ stream: PublishedStream, mid: String = "0", ssrc: UInt32 = 5000) -> ReceiveSlot {
        ReceiveSlot(mid: mid, subscribing: stream, subscriptionId: "sub-\(mid)", ssrc: ssrc, streamId: "pub", trackId: "track",
                    cname: "minato-pub")
    }

    @Test func slotsOfferThePublicationsFormatsAndTheirOwnRtxSsrc() throws {
        let (audio, video) = try Self.chromiumStreams()
        let a = Self.slot(audio, mid: "0"), v = Self.slot(video, mid: "1", ssrc: 6000)
        #expect(a.redPayloadType == 63 && a.rtxPayloadType == nil && a.rtxSsrc == nil)
        #expect(v.rtxPayloadType == 97 && v.redPayloadType == nil)
        let rtxSsrc = try #require(v.rtxSsrc)
        #expect(rtxSsrc != 0 && rtxSsrc != 6000)
        // Another subscription to the same publication gets another RTX SSRC (random 32 bits).
        let others = (0..<8).compactMap { _ in Self.slot(video, mid: "2", ssrc: 6000).rtxSsrc }
        #expect(Set(others + [rtxSsrc]).count > 1)
        // A publication without RTX still gets RTX offered to its subscribers (a free PT).
        var plain = video
        plain.rtxPayloadType = nil
        #expect(Self.slot(plain).rtxPayloadType == 97)
        // The offer written from the slots.
        let local = SdpLocalTransport(iceUfrag: "u", icePwd: "p", fingerprint: "sha-256 AB:CD", candidates: [], iceLite: true)
        let offer = SfuSdp.receiveOffer(streams: [a, v].map(\.stream), local: local, sessionId: 1, version: 1)
        #expect(offer.media[0].formats == ["63", "111"] && offer.media[1].formats == ["96", "97"])
        #expect(offer.media[1].ssrcGroups == [SsrcGroup(semantics: "FID", ssrcs: [6000, rtxSsrc])])
    }

    @Test func slotRandomSsrcIsNeverTheOther() {
        for other in [UInt32(1), 5000, UInt32.max] {
            for _ in 0..<32 {
                let s = ReceiveSlot.randomSsrc(besides: other)
                #expect(s != 0 && s != other)
            }
        }
    }

    /// A browser answer to the offer of slots `a` (audio, mid 0) and `v` (video, mid 1).
    static func answer(audioFormats: String, videoFormats: String, extra: String = "") throws -> SessionDescription {
        try SessionDescription.parse("""
            v=0\r
            o=- 5 2 IN IP4 127.0.0.1\r
            s=-\r
            t=0 0\r
            a=group:BUNDLE 0 1\r
            m=audio 9 UDP/TLS/RTP/SAVPF \(audioFormats)\r
            a=mid:0\r
            a=recvonly\r
            a=rtpmap:63 red/48000/2\r
            a=fmtp:63 111/111\r
            a=rtpmap:111 opus/48000/2\r
            m=video 9 UDP/TLS/RTP/SAVPF \(videoFormats)\r
            a=mid:1\r
            a=recvonly\r
            a=rtpmap:96 VP8/90000\r
            a=rtpmap:97 rtx/90000\r
            a=fmtp:97 apt=96\r
            \(extra)
            """)
    }

    @Test func consumersTakeWhatTheAnswerAccepted() throws {
        let (audio, video) = try Self.chromiumStreams()
        let a = Self.slot(audio, mid: "0"), v = Self.slot(video, mid: "1", ssrc: 6000)
        let both = try Self.answer(audioFormats: "63 111", videoFormats: "96 97")
        let af = a.acceptedFormats(in: both), vf = v.acceptedFormats(in: both)
        #expect(af.redPayloadType == 63 && af.rtxSsrc == nil && af.rtxPayloadType == nil)
        #expect(vf.rtxPayloadType == 97 && vf.rtxSsrc == v.rtxSsrc && vf.rtxSsrc != nil && vf.redPayloadType == nil)
        // The Swift client's answer: only the primary codec.
        let plain = try Self.answer(audioFormats: "111", videoFormats: "96")
        #expect(a.acceptedFormats(in: plain).redPayloadType == nil)
        #expect(v.acceptedFormats(in: plain).rtxSsrc == nil && v.acceptedFormats(in: plain).rtxPayloadType == nil)
        // Rejected or missing m-sections accept nothing.
        let rejected = try SessionDescription.parse(
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 0 UDP/TLS/RTP/SAVPF 63 111\r\na=mid:0\r\n")
        #expect(a.acceptedFormats(in: rejected).redPayloadType == nil && v.acceptedFormats(in: rejected).rtxPayloadType == nil)
    }

    @Test func hostileAnswersAreRefusedOrIgnored() throws {
        // Not SDP at all, or SDP with out-of-range payload types: a clear invalidSdp.
        for text in ["hello", "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96 300\r\n"] {
            #expect {
                _ = try SdpNegotiation.parse(text)
            } throws: { error in
                (error as? RoomError)?.name == "invalidSdp"
            }
        }
        // Parseable but wrong: RTX described as another codec, RED of another payload type.
        let (audio, video) = try Self.chromiumStreams()
        let a = Self.slot(audio, mid: "0"), v = Self.slot(video, mid: "1", ssrc: 6000)
        let odd = try Self.answer(audioFormats: "63 111 62", videoFormats: "96 97 98",
                                  extra: "a=rtpmap:98 rtx/90000\r\na=fmtp:98 apt=97\r\n")
        #expect(v.acceptedFormats(in: odd).rtxPayloadType == 97)     // 98 is not what was offered
        let wrong = try SessionDescription.parse(
            try Self.answer(audioFormats: "63 111", videoFormats: "96 97").serialize()
                .replacingOccurrences(of: "a=fmtp:97 apt=96", with: "a=fmtp:97 apt=97")
                .replacingOccurrences(of: "a=fmtp:63 111/111", with: "a=fmtp:63 63/63"))
        #expect(a.acceptedFormats(in: wrong).redPayloadType == nil && v.acceptedFormats(in: wrong).rtxPayloadType == nil)
    }
}
