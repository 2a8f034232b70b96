import Foundation
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

    @Test func answerReceivesFirstCodecKeepsInactiveAndAcceptsDataChannels() throws {
        let offer = try SessionDescription.parse(Self.serverOffer)
        let (text, streams) = ClientSdp.answer(to: offer, local: Self.local, sessionId: 9, version: 1, dtlsRole: .server)
        let answer = try SessionDescription.parse(text)
        #expect(answer.bundleGroup == ["0", "1", "2"])
        #expect(answer.media.map(\.mid) == ["0", "1", "2"])
        #expect(answer.media[0].direction == .recvonly && answer.media[0].payloadTypes == [96])
        #expect(answer.media[0].rtcpFeedback(for: 96) == ["nack pli"])   // transport-cc, rtx declined
        #expect(answer.media[0].setup == "passive")
        #expect(answer.media[1].direction == .inactive)
        // The data section: accepted with our SCTP port and message size, same transport.
        #expect(SdpData.isDataChannelSection(answer.media[2]) && answer.media[2].setup == "passive")
        #expect(answer.media[2].attributes.firstValue(named: "sctp-port") == "5000")
        #expect(answer.media[2].attributes.firstValue(named: "max-message-size") == String(clientMaxDataMessageBytes))
        #expect(streams.map(\.rejected) == [false, false, false])
        #expect(streams[2].kind == "application" && streams[2].sctpPort == 5000 && streams[2].maxMessageSize == nil)
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

    /// A captured or golden SDP from Tests/MinatoWireTests/Fixtures.
    static func fixture(_ name: String) throws -> SessionDescription {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("MinatoWireTests/Fixtures/\(name).sdp")
        return try SessionDescription.parse(String(contentsOf: url, encoding: .utf8))
    }

    static func lines(_ text: String) -> [String] { text.split(separator: "\r\n").map(String.init) }

    @Test func offerWithADataSectionBundlesIt() throws {
        let tracks = [OfferedTrack(mid: "0", codec: .opus, ssrc: 1111, cname: "c"), OfferedTrack.data(mid: "1")]
        let offer = try SessionDescription.parse(ClientSdp.offer(local: Self.local, tracks: tracks, sessionId: 7, version: 1))
        #expect(offer.bundleGroup == ["0", "1"])
        #expect(SdpData.isDataChannelSection(offer.media[1]) && offer.media[1].mid == "1")
        #expect(offer.media[1].setup == "actpass" && SdpData.sctpPort(offer.media[1]) == 5000)
        #expect(offer.media[1].attributes.firstValue(named: "ice-ufrag") == "uF1x")
    }

    @Test func offerPinsTheImportantLines() throws {
        let tracks = [OfferedTrack(mid: "0", codec: .opus, ssrc: 1111, cname: "c"),
                      OfferedTrack(mid: "1", codec: .vp8, ssrc: 2222, cname: "c", active: false)]
        let lines = Self.lines(ClientSdp.offer(local: Self.local, tracks: tracks, sessionId: 7, version: 3))
        #expect(Array(lines.prefix(6)) == ["v=0", "o=- 7 3 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1",
                                          "a=msid-semantic: WMS *"])
        let audio = Array(lines.drop { !$0.hasPrefix("m=audio") }.prefix { !$0.hasPrefix("m=video") })
        #expect(audio == [
            "m=audio 50123 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 127.0.0.1", "a=ice-ufrag:uF1x", "a=ice-pwd:pwdpwdpwdpwdpwdpwdpwdpwd",
            "a=fingerprint:" + Self.local.fingerprint, "a=setup:actpass", "a=mid:0", "a=sendonly", "a=msid:c 0", "a=rtcp-mux",
            "a=rtpmap:111 opus/48000/2", "a=fmtp:111 minptime=10;useinbandfec=1", "a=ssrc:1111 cname:c",
            "a=candidate:1 1 UDP 2013266431 127.0.0.1 50123 typ host", "a=end-of-candidates"])
        let video = Array(lines.drop { !$0.hasPrefix("m=video") })
        #expect(video.contains("a=inactive") && video.contains("a=rtpmap:96 VP8/90000"))
        #expect(video.filter { $0.hasPrefix("a=rtcp-fb:") } == ["a=rtcp-fb:96 nack pli", "a=rtcp-fb:96 ccm fir"])
        #expect(!video.contains { $0.hasPrefix("a=candidate") })
    }

    @Test func offerWritesCodecsFromTheCodecMapAndRebuildsFmtp() throws {
        // Spelling and clock rate come from the map; unsafe fmtp text is dropped, not copied.
        let odd = RtpCodec(mimeType: "VIDEO/h264", payloadType: 102, clockRate: 1,
                           fmtp: "packetization-mode=1;profile-level-id=42e01f;evil=a b\"c; flag")
        let unknown = RtpCodec(mimeType: "audio/PCMU", payloadType: 0, clockRate: 8000)
        let tracks = [OfferedTrack(mid: "v", codec: odd, ssrc: 1, cname: "c"), OfferedTrack(mid: "a", codec: unknown, ssrc: 2, cname: "c")]
        let sdp = try SessionDescription.parse(ClientSdp.offer(local: Self.local, tracks: tracks, sessionId: 1, version: 1))
        #expect(sdp.media[0].rtpMaps == [RtpMap(payloadType: 102, encodingName: "H264", clockRate: 90000)])
        #expect(sdp.media[0].fmtp(for: 102) == "packetization-mode=1;profile-level-id=42e01f")
        // A codec outside the map cannot be sent: rejected, not bundled.
        #expect(sdp.bundleGroup == ["v"])
        #expect(sdp.media[1].port == 0 && sdp.media[1].mid == "a")
        #expect(RtpCodec.opus.kind == .audio && RtpCodec.vp8.kind == .video && RtpCodec.vp8.forwardedCodec == .vp8)
        #expect(RtpCodec.opus.mimeType == ForwardedCodec.opus.mimeType && RtpCodec.opus.clockRate == 48_000)
    }

    @Test func answerToMinatosReceiveOfferPinsTheImportantLines() throws {
        let offer = try Self.fixture("minato-receive-offer")
        let (text, streams) = ClientSdp.answer(to: offer, local: Self.local, sessionId: 9, version: 2)
        let lines = Self.lines(text)
        #expect(lines.contains("a=group:BUNDLE 0 1 2") && !lines.contains("a=ice-lite"))
        #expect(lines.filter { $0.hasPrefix("m=") } == ["m=audio 50123 UDP/TLS/RTP/SAVPF 111", "m=video 50123 UDP/TLS/RTP/SAVPF 96",
                                                       "m=video 50123 UDP/TLS/RTP/SAVPF 102"])
        #expect(lines.filter { $0.hasPrefix("a=setup:") } == ["a=setup:active", "a=setup:active", "a=setup:active"])
        #expect(lines.filter { ["a=recvonly", "a=inactive", "a=sendonly"].contains($0) } == ["a=recvonly", "a=recvonly", "a=inactive"])
        #expect(lines.filter { $0.hasPrefix("a=rtpmap:") } == ["a=rtpmap:111 opus/48000/2", "a=rtpmap:96 VP8/90000",
                                                              "a=rtpmap:102 H264/90000"])
        #expect(lines.filter { $0.hasPrefix("a=fmtp:") } == [
            "a=fmtp:111 minptime=10;useinbandfec=1",
            "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f"])
        #expect(lines.filter { $0.hasPrefix("a=rtcp-fb:") } == ["a=rtcp-fb:96 nack pli", "a=rtcp-fb:96 ccm fir",
                                                               "a=rtcp-fb:102 nack pli", "a=rtcp-fb:102 ccm fir"])
        #expect(lines.filter { $0.hasPrefix("a=candidate:") }.count == 1 && lines.filter { $0 == "a=end-of-candidates" }.count == 1)
        #expect(!lines.contains { $0.hasPrefix("a=extmap") || $0.hasPrefix("a=ssrc") || $0.hasPrefix("a=msid:") })
        #expect(streams.map(\.mid) == ["0", "1", "2"])
        // The offer lists RED first for opus and RTX after VP8/H264; the answer takes only the
        // primary codec (the client decodes neither), so the server sends plain opus and VP8.
        #expect(offer.media.map(\.formats) == [["63", "111"], ["96", "97"], ["102", "103"]])
        #expect(!lines.contains { $0.contains("rtx") || $0.contains("red/") || $0 == "a=rtcp-fb:96 nack" })
        #expect(streams.map(\.ssrcs) == [[1001], [1002, 2002], []])   // media SSRC first, then the RTX SSRC
        #expect(streams.map(\.direction) == [.sendonly, .sendonly, .inactive])
        #expect(streams.map { $0.codec?.encodingName } == ["opus", "VP8", "H264"])
        // The transport the client reads from Minato's offer.
        let remote = try ClientSdp.remoteTransport(of: offer)
        #expect(remote.iceUfrag == "mInAtOuF" && remote.setup == "actpass" && remote.fingerprint.hasPrefix("AB:CD"))
        #expect(remote.candidates == ["1 1 UDP 2015363327 127.0.0.1 40001 typ host"] && remote.endOfCandidates)
    }

    @Test(arguments: ["aiortc-offer-audio-video", "chromium-offer-audio-video", "chromium-offer-simulcast", "gstreamer-offer-audio-video"])
    func answersToCapturedOffers(_ name: String) throws {
        let offer = try Self.fixture(name)
        let (text, streams) = ClientSdp.answer(to: offer, local: Self.local, sessionId: 9, version: 2, dtlsRole: .server)
        let answer = try SessionDescription.parse(text)
        #expect(answer.media.map(\.mid) == offer.media.map(\.mid))
        for (m, o) in zip(answer.media, offer.media) where m.port != 0 {
            let codec = try #require(o.forwardableCodecs.first)
            #expect(m.payloadTypes == [codec.payloadType] && m.setup == "passive" && m.direction == .recvonly)
            #expect(m.rtpMaps == [codec.rtpMap])
            #expect(m.fmtp(for: codec.payloadType) == codec.parameters.text)
            #expect(m.rtcpFeedback(for: codec.payloadType) == o.rtcpFeedback(for: codec.payloadType).filter { $0 == "nack pli" || $0 == "ccm fir" })
        }
        #expect(answer.bundleGroup == answer.media.filter { $0.port != 0 }.compactMap(\.mid))
        #expect(streams.map(\.rejected) == answer.media.map { $0.port == 0 })
        #expect(answer.media.first { $0.port != 0 }?.endOfCandidates == true)
    }

    @Test func answerRebuildsFmtpInsteadOfCopyingIt() throws {
        let offer = try SessionDescription.parse("""
            v=0\r
            o=- 1 1 IN IP4 127.0.0.1\r
            s=-\r
            t=0 0\r
            a=group:BUNDLE 0\r
            m=video 9 UDP/TLS/RTP/SAVPF 96\r
            a=mid:0\r
            a=sendonly\r
            a=ice-ufrag:u\r
            a=ice-pwd:pppppppppppppppppppppp\r
            a=fingerprint:sha-256 11:22\r
            a=rtpmap:96 vp8/90000\r
            a=fmtp:96 x-google-start-bitrate=1000; note=<b>;max-fr=30;flag\r

            """)
        let answer = try SessionDescription.parse(ClientSdp.answer(to: offer, local: Self.local, sessionId: 1, version: 1).sdp)
        #expect(answer.media[0].fmtp(for: 96) == "x-google-start-bitrate=1000;max-fr=30")
        #expect(answer.media[0].rtpMaps == [RtpMap(payloadType: 96, encodingName: "VP8", clockRate: 90000)])
    }

    @Test func remoteTransportPrefersTheMediaLevel() throws {
        // Session-level and media-level values disagree: the BUNDLE-tagged m-section wins
        // (the old client preferred the session level, the server the media level).
        let offer = try SessionDescription.parse("""
            v=0\r
            o=- 1 1 IN IP4 127.0.0.1\r
            s=-\r
            t=0 0\r
            a=group:BUNDLE 0\r
            a=ice-ufrag:session\r
            a=ice-pwd:sessionsessionsession\r
            a=setup:passive\r
            m=video 9 UDP/TLS/RTP/SAVPF 96\r
            a=mid:0\r
            a=ice-ufrag:media\r
            a=ice-pwd:mediamediamediamedia\r
            a=fingerprint:sha-256 11:22\r
            a=setup:active\r

            """)
        let remote = try ClientSdp.remoteTransport(of: offer)
        #expect(remote.iceUfrag == "media" && remote.icePwd == "mediamediamediamedia" && remote.setup == "active")
        #expect(remote.candidates.isEmpty && !remote.endOfCandidates)
    }

    @Test func packetCollectorReadsPacketsThroughRtpPacketView() throws {
        // V=2, P=1, X=1, CC=1; one CSRC; one-byte extension block (1 word); payload 3 bytes; 2 padding.
        var bytes: [UInt8] = [0xB1, 0x80 | 96, 0x12, 0x34, 0, 0, 0, 9, 0, 0, 0, 7, 0, 0, 0, 5,
                              0xBE, 0xDE, 0x00, 0x01, 0x10, 0xAA, 0x00, 0x00, 1, 2, 3, 0, 2]
        let packet = try #require(bytes.withUnsafeMutableBytes { PacketCollector.Packet($0) })
        #expect(packet.payloadType == 96 && packet.marker && packet.sequenceNumber == 0x1234 && packet.header.ssrc == 7)
        #expect(Array(packet.payload) == [1, 2, 3])
        // Malformed (extension longer than the packet) or short: not a packet.
        bytes[19] = 0x40
        #expect(bytes.withUnsafeMutableBytes { PacketCollector.Packet($0) } == nil)
        var short: [UInt8] = [0x80, 96, 0, 1]
        #expect(short.withUnsafeMutableBytes { PacketCollector.Packet($0) } == nil)
    }

    @Test func jsonKeepsLargeIdsExact() throws {
        let id: JSON = .number(7_188_573_827_434_222)   // a Janus handle id (53-bit)
        #expect(JSON.object(["id": id]).serialized() == #"{"id":7188573827434222}"#)
        #expect(try JSON.parse(#"{"id":7188573827434222}"#)["id"]?.int == 7_188_573_827_434_222)
    }
}

/// A room with a data publication (published by a browser) decodes in the Swift SDK.
@Suite struct DataPublicationDecodingTests {
    @Test func snapshotWithADataPublicationDecodes() throws {
        let json = """
            {"id":"r","name":"n","metadata":"","version":3,"members":[],"subscriptions":[],
             "publications":[{"id":"p","publisherId":"m","contentType":"data","metadata":"","state":"enabled",
                              "codecCapabilities":[],"encodings":[],"maxSubscribers":50,
                              "dataChannel":{"label":"chat","ordered":true}}]}
            """
        let snapshot = try JSONDecoder().decode(RoomSnapshot.self, from: Data(json.utf8))
        #expect(snapshot.publications?.first?.contentType == .data)
    }
}

/// Recordings in a room snapshot and in the recording events decode in the Swift SDK.
@Suite struct RecordingDecodingTests {
    @Test func snapshotAndEventsCarryTheRecording() throws {
        let json = """
            {"id":"r","name":"n","metadata":"","version":3,"members":[],"subscriptions":[],"publications":[],
             "recordings":[{"id":"rec","memberId":"m","publicationIds":["v","a"],"startedAt":"2026-11-27T06:18:22Z"}]}
            """
        let snapshot = try JSONDecoder().decode(RoomSnapshot.self, from: Data(json.utf8))
        #expect(snapshot.recordings == [Recording(id: "rec", memberId: "m", publicationIds: ["v", "a"], startedAt: "2026-11-27T06:18:22Z")])
        let event = try #require(RoomEvent(JSON.parse("""
            {"roomId":"r","version":4,"type":"recordingStopped","reason":"diskFull",
             "data":{"recording":{"id":"rec","memberId":"m","publicationIds":["v"],"startedAt":"2026-11-27T06:18:22Z"}}}
            """)))
        #expect(event.recording?.memberId == "m" && event.recording?.publicationIds == ["v"] && event.reason == "diskFull")
        let none = try JSONDecoder().decode(RoomSnapshot.self, from: Data(#"{"id":"r"}"#.utf8))
        #expect(none.recordings == nil)
    }
}
