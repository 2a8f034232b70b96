import Testing
import MinatoWire
@testable import MinatoTransport
@testable import MinatoClient

/// The SDP the Swift client writes and reads (its interop with Minato and Janus is in
/// Tests/interop/test_swift_sdk.py and the benchmark; these pin the shapes).
@Suite struct ClientSdpTests {
    static let local = LocalTransportParameters(
        iceUfrag: "uF1x", icePwd: "pwdpwdpwdpwdpwdpwdpwdpwd",
        candidates: ["candidate:1 1 UDP 2013266431 127.0.0.1 50123 typ host"],
        fingerprint: "sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89")

    @Test func offerIsBundledSendonlyWithSsrcAndCandidates() throws {
        let tracks = [OfferedTrack(mid: "0", codec: .opus, ssrc: 1111, cname: "c"),
                      OfferedTrack(mid: "1", codec: .vp8, ssrc: 2222, cname: "c")]
        let sdp = try SessionDescription.parse(ClientSdp.offer(local: Self.local, tracks: tracks, sessionId: 7, version: 1))
        #expect(sdp.bundleGroup == ["0", "1"])
        #expect(sdp.media.map(\.kind) == ["audio", "video"])
        for (m, t) in zip(sdp.media, tracks) {
            #expect(m.mid == t.mid && m.direction == .sendonly && m.rtcpMux)
            #expect(m.ssrcIds == [t.ssrc])
            #expect(m.payloadTypes == [t.codec.payloadType])
            #expect(m.setup == "actpass" && m.iceUfrag == "uF1x")
            #expect(m.port == 50123)
        }
        #expect(sdp.media[0].candidates.count == 1 && sdp.media[0].endOfCandidates)
        #expect(sdp.media[1].rtpMap(for: 96)?.encodingName == "VP8")
        #expect(sdp.media[1].rtcpFeedback(for: 96) == ["nack pli", "ccm fir"])
    }

    static let serverOffer = """
        v=0\r
        o=- 1 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0 1 2\r
        a=ice-lite\r
        a=fingerprint:sha-256 11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF:11:22:33:44:55:66:77:88:99:00:AA:BB:CC:DD:EE:FF\r
        m=video 9 UDP/TLS/RTP/SAVPF 96 97\r
        c=IN IP4 127.0.0.1\r
        a=mid:0\r
        a=sendonly\r
        a=rtcp-mux\r
        a=ice-ufrag:srvU\r
        a=ice-pwd:srvpwdsrvpwdsrvpwdsrvpwd\r
        a=setup:actpass\r
        a=rtpmap:96 VP8/90000\r
        a=rtcp-fb:96 nack pli\r
        a=rtcp-fb:96 transport-cc\r
        a=rtpmap:97 rtx/90000\r
        a=fmtp:97 apt=96\r
        a=ssrc:3333 cname:janus\r
        a=candidate:1 1 udp 2015363327 127.0.0.1 42001 typ host\r
        a=end-of-candidates\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111\r
        c=IN IP4 127.0.0.1\r
        a=mid:1\r
        a=inactive\r
        a=rtcp-mux\r
        a=rtpmap:111 opus/48000/2\r
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
        c=IN IP4 127.0.0.1\r
        a=mid:2\r

        """

    @Test func answerReceivesFirstCodecKeepsInactiveAndRejectsDataChannels() throws {
        let offer = try SessionDescription.parse(Self.serverOffer)
        let (text, streams) = ClientSdp.answer(to: offer, local: Self.local, sessionId: 9, version: 1, dtlsRole: .server)
        let answer = try SessionDescription.parse(text)
        #expect(answer.bundleGroup == ["0", "1"])
        #expect(answer.media.map(\.mid) == ["0", "1", "2"])
        #expect(answer.media[0].direction == .recvonly && answer.media[0].payloadTypes == [96])
        #expect(answer.media[0].rtcpFeedback(for: 96) == ["nack pli"])   // transport-cc, rtx declined
        #expect(answer.media[0].setup == "passive")
        #expect(answer.media[1].direction == .inactive)
        #expect(answer.media[2].port == 0)
        #expect(streams.map(\.rejected) == [false, false, true])
        #expect(streams[0].ssrcs == [3333] && streams[0].codec?.encodingName == "VP8" && streams[0].direction == .sendonly)
        let active = try SessionDescription.parse(ClientSdp.answer(to: offer, local: Self.local, sessionId: 9, version: 1).sdp)
        #expect(active.media[0].setup == "active")
    }

    @Test func remoteTransportComesFromSessionOrFirstMedia() throws {
        let remote = try ClientSdp.remoteTransport(of: SessionDescription.parse(Self.serverOffer))
        #expect(remote.iceUfrag == "srvU" && remote.setup == "actpass")
        #expect(remote.fingerprintAlgorithm == "sha-256" && remote.fingerprint.hasPrefix("11:22"))
        // Attribute values (libnice takes them with or without the "candidate:" prefix).
        #expect(remote.candidates == ["1 1 udp 2015363327 127.0.0.1 42001 typ host"] && remote.endOfCandidates)
        #expect(ClientSdp.dtlsRole(answeringOurOffer: "active") == .server)
        #expect(ClientSdp.dtlsRole(answeringOurOffer: "passive") == .client)
    }

    @Test func sdpWithoutIceCredentialsIsAClearError() throws {
        let bare = try SessionDescription.parse("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n")
        #expect(throws: ClientSdpError.self) { try ClientSdp.remoteTransport(of: bare) }
    }

    @Test func jsonKeepsLargeIdsExact() throws {
        let id: JSON = .number(7_188_573_827_434_222)   // a Janus handle id (53-bit)
        #expect(JSON.object(["id": id]).serialized() == #"{"id":7188573827434222}"#)
        #expect(try JSON.parse(#"{"id":7188573827434222}"#)["id"]?.int == 7_188_573_827_434_222)
    }
}
