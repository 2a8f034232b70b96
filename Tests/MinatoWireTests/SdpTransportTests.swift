import Testing
@testable import MinatoWire

/// `SessionDescription.transport()`: the one reading of a peer's ICE/DTLS parameters the server
/// and the client SDK share. Precedence: the BUNDLE-tagged m-section's own attributes, then
/// session level.
@Suite struct SdpTransportTests {
    static let fpA = "sha-256 AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA:AA"
    static let fpB = "sha-256 BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB:BB"

    func sdp(_ body: String) throws -> SessionDescription {
        try SessionDescription.parse("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n" + body)
    }

    @Test(arguments: [Fixture.aiortcOffer, .aiortcAnswer, .chromiumOffer, .chromiumSimulcast, .gstreamerOffer])
    func fixturesYieldTheirFirstSectionsTransport(_ fixture: Fixture) throws {
        let sd = try fixture.parsed()
        let t = try sd.transport()
        let first = sd.media[0]
        #expect(t.iceUfrag == first.iceUfrag && t.icePwd == first.icePwd)
        #expect(t.fingerprint == first.fingerprint)
        #expect(t.setup.rawValue == first.setup)
        #expect(!t.iceLite)
    }

    @Test func candidatesComeFromTheBundleWithoutDuplicates() throws {
        // aiortc repeats its candidates in every m-section; Chromium puts its in the first.
        let aiortc = try Fixture.aiortcOffer.parsed().transport()
        #expect(aiortc.candidates == ["16572de626da4e5384a0ce2d0d93678a 1 udp 2130706431 127.0.0.1 40985 typ host",
                                      "16572de626da4e5384a0ce2d0d93678a 1 udp 2130706431 127.0.0.1 43524 typ host"])
        #expect(aiortc.endOfCandidates)
        let chromium = try Fixture.chromiumOffer.parsed().transport()
        // Chromium (bundle policy balanced) gathers per m-section: 2 + 2, the repeated TCP one dropped.
        #expect(chromium.candidates.count == 3 && !chromium.endOfCandidates)
        #expect(chromium.candidates[0].hasPrefix("1997622950 1 udp 2122260223 127.0.0.1 44037 typ host"))
        let gst = try Fixture.gstreamerOffer.parsed().transport()
        #expect(gst.candidates.isEmpty && gst.iceUfrag == "HkAErihrf4w7Q1Um8+KneFkhsgnX6joR")
    }

    @Test func mediaLevelWinsOverSessionLevel() throws {
        let sd = try sdp("""
            a=group:BUNDLE a b\r
            a=ice-ufrag:sess\r
            a=ice-pwd:sessionpasswordsessionpw\r
            a=fingerprint:\(Self.fpA)\r
            a=setup:active\r
            m=audio 9 UDP/TLS/RTP/SAVPF 111\r
            a=mid:a\r
            a=ice-ufrag:med\r
            a=fingerprint:\(Self.fpB)\r
            a=setup:passive\r
            m=video 9 UDP/TLS/RTP/SAVPF 96\r
            a=mid:b\r

            """)
        let t = try sd.transport()
        #expect(t.iceUfrag == "med")                           // media
        #expect(t.icePwd == "sessionpasswordsessionpw")         // session (absent at media level)
        #expect(t.fingerprint.value.hasPrefix("BB:"))           // media
        #expect(t.setup == .passive)                            // media
    }

    @Test func theBundleTaggedSectionCarriesTheTransport() throws {
        // The first mid of the BUNDLE group is "v", the second m-section.
        let sd = try sdp("""
            a=group:BUNDLE v a\r
            m=audio 9 UDP/TLS/RTP/SAVPF 111\r
            a=mid:a\r
            a=ice-ufrag:second\r
            a=ice-pwd:secondsecondsecondsecond\r
            a=fingerprint:\(Self.fpA)\r
            a=candidate:2 1 udp 1 127.0.0.1 2 typ host\r
            m=video 9 UDP/TLS/RTP/SAVPF 96\r
            a=mid:v\r
            a=ice-ufrag:tagged\r
            a=ice-pwd:taggedtaggedtaggedtagged\r
            a=fingerprint:\(Self.fpB)\r
            a=setup:active\r
            a=candidate:1 1 udp 1 127.0.0.1 1 typ host\r
            a=end-of-candidates\r
            m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
            a=mid:d\r
            a=candidate:3 1 udp 1 127.0.0.1 3 typ host\r

            """)
        #expect(sd.transportMediaIndex == 1)
        let t = try sd.transport()
        #expect(t.iceUfrag == "tagged" && t.fingerprint.value.hasPrefix("BB:") && t.setup == .active)
        // Candidates of the bundled sections only (the data channel is not in the group).
        #expect(t.candidates == ["2 1 udp 1 127.0.0.1 2 typ host", "1 1 udp 1 127.0.0.1 1 typ host"])
        #expect(t.endOfCandidates)
    }

    @Test func withoutBundleTheFirstLiveSectionCarriesIt() throws {
        let sd = try sdp("""
            a=ice-lite\r
            m=audio 0 UDP/TLS/RTP/SAVPF 111\r
            a=ice-ufrag:dead\r
            a=ice-pwd:deaddeaddeaddeaddeaddead\r
            m=video 9 UDP/TLS/RTP/SAVPF 96\r
            a=ice-ufrag:live\r
            a=ice-pwd:livelivelivelivelivelive\r
            a=fingerprint:\(Self.fpA)\r

            """)
        let t = try sd.transport()
        #expect(t.iceUfrag == "live" && t.setup == .actpass && t.iceLite)
    }

    @Test func missingOrBadValuesAreNamedErrors() throws {
        #expect(throws: SdpNegotiationError.noMediaSection) { try sdp("").transport() }
        #expect(throws: SdpNegotiationError.missingIceCredentials) {
            try sdp("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=ice-ufrag:u\r\n").transport()
        }
        #expect(throws: SdpNegotiationError.missingFingerprint) {
            try sdp("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=ice-ufrag:u\r\na=ice-pwd:pppppppppppppppppppppp\r\n").transport()
        }
        #expect(throws: SdpNegotiationError.badSetup("holdconn")) {
            try sdp("a=fingerprint:\(Self.fpA)\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=ice-ufrag:u\r\na=ice-pwd:pppppppppppppppppppppp\r\na=setup:holdconn\r\n").transport()
        }
        #expect(SdpNegotiationError.badSetup("holdconn").description == "Line 'a=setup:holdconn': expected actpass, active or passive.")
    }

    @Test func answeringSetup() {
        #expect(DtlsSetup.actpass.answer == .passive)
        #expect(DtlsSetup.active.answer == .passive)
        #expect(DtlsSetup.passive.answer == .active)
    }

    @Test func localTransportAttributes() {
        let local = SdpLocalTransport(iceUfrag: "u", icePwd: "p", fingerprint: Self.fpA,
                                      candidates: ["candidate:1 1 UDP 2013266431 127.0.0.1 50123 typ host"])
        #expect(local.attributes(setup: .actpass).map(\.description) == ["ice-ufrag:u", "ice-pwd:p", "fingerprint:" + Self.fpA, "setup:actpass"])
        #expect(local.candidateAttributes.map(\.description) == ["candidate:1 1 UDP 2013266431 127.0.0.1 50123 typ host", "end-of-candidates"])
        #expect(local.defaultAddress?.address == "127.0.0.1" && local.defaultAddress?.port == 50123)
        #expect(SdpLocalTransport(iceUfrag: "u", icePwd: "p", fingerprint: "", candidates: ["candidate:x"]).defaultAddress == nil)
    }
}

/// The codec map (`ForwardedCodec`): name, kind, clock rate and MIME type in one table.
@Suite struct CodecMapTests {
    @Test func everyCodecRoundTripsThroughItsNamesAndMimeType() {
        for c in ForwardedCodec.allCases {
            #expect(ForwardedCodec(kind: c.kind, encodingName: c.encodingName) == c)
            #expect(ForwardedCodec(kind: c.kind, encodingName: c.encodingName.lowercased()) == c)
            #expect(ForwardedCodec(mimeType: c.mimeType) == c)
            #expect(ForwardedCodec(mimeType: c.mimeType.uppercased()) == c)
            #expect(c.clockRate == (c.kind == "audio" ? 48_000 : 90_000))
        }
        #expect(ForwardedCodec.opus.mimeType == "audio/opus" && ForwardedCodec.h264.mimeType == "video/H264")
        #expect(ForwardedCodec(mimeType: "video/opus") == nil && ForwardedCodec(mimeType: "audio/VP8") == nil)
        #expect(ForwardedCodec(mimeType: "VP8") == nil && ForwardedCodec(mimeType: "video/rtx") == nil)
        #expect(VideoCodecKind(encodingName: "vp9") == .vp9 && VideoCodecKind(encodingName: "opus") == .other)
    }

    @Test func writtenCodecUsesTheMapsSpellingAndRebuiltFmtp() {
        let c = ForwardableCodec(payloadType: 111, codec: .opus, channels: nil,
                                 parameters: FmtpParameters(parsing: "minptime=10; useinbandfec=1;x=\"y\";flag"))
        #expect(c.channels == 2 && c.clockRate == 48_000)
        #expect(c.attributes(feedback: []).map(\.description) == ["rtpmap:111 opus/48000/2", "fmtp:111 minptime=10;useinbandfec=1"])
        let v = ForwardableCodec(payloadType: 96, codec: .vp8, channels: 2)
        #expect(v.channels == nil)
        #expect(v.attributes(feedback: ["nack pli", "ccm fir"]).map(\.description) ==
                ["rtpmap:96 VP8/90000", "rtcp-fb:96 nack pli", "rtcp-fb:96 ccm fir"])
    }
}
