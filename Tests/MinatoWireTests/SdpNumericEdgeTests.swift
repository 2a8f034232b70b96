import Testing
@testable import MinatoWire

/// Numeric edge cases and stray bytes in SDP: each is either an exact parse error
/// or a codec Minato does not choose, never a trap.
@Suite struct SdpNumericEdgeTests {
    static let header = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"

    func parseError(_ body: String) -> SdpError? {
        do {
            _ = try SessionDescription.parse(Self.header + body)
            return nil
        } catch {
            return error
        }
    }

    func media(_ body: String) throws -> MediaDescription {
        try #require(try SessionDescription.parse(Self.header + body).media.first)
    }

    static func video(_ rtpmaps: String, formats: String = "96", extra: String = "") -> String {
        "m=video 9 UDP/TLS/RTP/SAVPF \(formats)\r\na=mid:0\r\n\(rtpmaps)\(extra)"
    }

    // MARK: Stray CR and NUL

    @Test func loneCarriageReturnInsideALineIsAnError() throws {
        let e = try #require(parseError("a=mid:0\ra=injected:1\r\n"))
        #expect(e.line == 5)
        #expect(e.reason == "line contains a CR or NUL byte")
        #expect(e.text == "a=mid:0\\ra=injected:1")
    }

    @Test func nulInsideALineIsAnError() throws {
        let e = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\0\r\n"))
        #expect(e.line == 6)
        #expect(e.reason == "line contains a CR or NUL byte")
        #expect(e.text == "a=rtpmap:96 VP8/90000\\0")
    }

    @Test func doubleCarriageReturnBeforeTheLineFeedIsAnError() throws {
        let e = try #require(parseError("a=x\r\r\n"))
        #expect(e.line == 5 && e.reason == "line contains a CR or NUL byte")
    }

    @Test func carriageReturnsAsTheOnlyLineEndingsAreAnError() throws {
        let e = try #require(parseError("a=x\ra=y\r"))
        #expect(e.line == 5 && e.reason == "line contains a CR or NUL byte")
        #expect(throws: SdpError.self) { try SessionDescription.parse("v=0\ro=- 1 1 IN IP4 127.0.0.1\rs=-\r\n") }
    }

    @Test func crlfAndLfLineEndingsStillParse() throws {
        _ = try SessionDescription.parse(Self.header + "a=x\r\n")
        _ = try SessionDescription.parse("v=0\no=- 1 1 IN IP4 127.0.0.1\ns=-\nt=0 0\na=x\n")
    }

    // MARK: Payload types, ports, SSRCs

    @Test(arguments: ["128", "255", "-1", "256", "99999999999999999999", "+96", "0x60"])
    func mediaLinePayloadTypeOutOfRangeIsAnError(pt: String) throws {
        let e = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF \(pt)\r\n"))
        #expect(e.line == 5 && e.reason == "m= payload type \(pt) is not a number in 0...127")
    }

    @Test(arguments: ["128", "255", "-1", "99999999999999999999"])
    func rtpmapPayloadTypeOutOfRangeIsAnError(pt: String) throws {
        let e = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:\(pt) VP8/90000\r\n"))
        #expect(e.line == 6 && e.reason.hasPrefix("bad rtpmap"))
    }

    @Test(arguments: ["128", "-1"])
    func fmtpAndRtcpFbPayloadTypeOutOfRangeIsAnError(pt: String) throws {
        let fmtp = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=fmtp:\(pt) x=1\r\n"))
        #expect(fmtp.line == 6 && fmtp.reason.hasPrefix("bad fmtp"))
        let fb = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtcp-fb:\(pt) nack\r\n"))
        #expect(fb.line == 6 && fb.reason.hasPrefix("bad rtcp-fb"))
    }

    @Test func payloadTypesZeroAnd127AreAccepted() throws {
        let m = try media("m=video 9 UDP/TLS/RTP/SAVPF 0 127\r\na=rtpmap:127 VP8/90000\r\n")
        #expect(m.payloadTypes == [0, 127])
        #expect(m.forwardableCodecs.map(\.payloadType) == [127])
    }

    @Test(arguments: ["65536", "99999999999999999999", "-1", "65536/2"])
    func portOutOfRangeIsAnError(port: String) throws {
        let e = try #require(parseError("m=video \(port) UDP/TLS/RTP/SAVPF 96\r\n"))
        #expect(e.line == 5 && e.reason == "m= port is not a number in 0...65535")
    }

    @Test func hugePortCountIsAnError() throws {
        let e = try #require(parseError("m=video 9/99999999999999999999 UDP/TLS/RTP/SAVPF 96\r\n"))
        #expect(e.reason == "m= port count is not a positive number")
    }

    @Test(arguments: ["99999999999999999999", "4294967296", "-1"])
    func ssrcOutOfRangeIsAnError(ssrc: String) throws {
        let e = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=ssrc:\(ssrc) cname:x\r\n"))
        #expect(e.line == 6 && e.reason.hasPrefix("bad ssrc"))
        let g = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=ssrc-group:FID 1 \(ssrc)\r\n"))
        #expect(g.line == 6 && g.reason.hasPrefix("bad ssrc-group"))
    }

    @Test func ssrcZeroAndMaxAreAccepted() throws {
        let m = try media("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=ssrc:0 cname:x\r\na=ssrc:4294967295 cname:x\r\n")
        #expect(m.ssrcIds == [0, UInt32.max])
    }

    // MARK: Clock rates and channels

    @Test(arguments: ["99999999999", "4294967296", "48000", "90001", "1"])
    func videoClockRateOtherThan90000IsNotChosen(rate: String) throws {
        let m = try media(Self.video("a=rtpmap:96 VP8/\(rate)\r\n"))
        #expect(m.forwardableCodecs.isEmpty)
    }

    @Test func clockRateTooLargeForAnIntegerIsAParseError() throws {
        let e = try #require(parseError(Self.video("a=rtpmap:96 VP8/99999999999999999999999\r\n")))
        #expect(e.line == 7 && e.reason.hasPrefix("bad rtpmap"))
        let zero = try #require(parseError(Self.video("a=rtpmap:96 VP8/0\r\n")))
        #expect(zero.reason.hasPrefix("bad rtpmap"))
    }

    @Test func aBadClockRateFallsBackToTheNextCodec() throws {
        let m = try media(Self.video("a=rtpmap:96 VP8/99999999999\r\na=rtpmap:98 VP9/90000\r\n", formats: "96 98"))
        let codecs = m.forwardableCodecs
        #expect(codecs.map(\.payloadType) == [98])
        #expect(codecs.first?.codec == .vp9 && codecs.first?.clockRate == 90_000)
    }

    @Test func everyCodecHasItsOwnClockRate() throws {
        let maps = "a=rtpmap:96 VP8/90000\r\na=rtpmap:97 vp9/90000\r\na=rtpmap:98 AV1/90000\r\n"
            + "a=rtpmap:99 H264/90000\r\na=fmtp:99 packetization-mode=1\r\n"
        let m = try media(Self.video(maps, formats: "96 97 98 99"))
        #expect(m.forwardableCodecs.map(\.codec) == [.vp8, .vp9, .av1, .h264])
        #expect(m.forwardableCodecs.allSatisfy { $0.clockRate == 90_000 })
        #expect(m.forwardableCodecs[1].codec.encodingName == "VP9")
    }

    @Test func opusMustBe48000() throws {
        let wrong = try media("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=rtpmap:111 opus/90000/2\r\n")
        #expect(wrong.forwardableCodecs.isEmpty)
        let right = try media("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=rtpmap:111 OPUS/48000/2\r\n")
        let c = try #require(right.forwardableCodecs.first)
        #expect(c.codec == .opus && c.clockRate == 48_000 && c.channels == 2 && c.codec.encodingName == "opus")
    }

    @Test func opusChannels() throws {
        func channels(_ rtpmap: String) throws -> [UInt8?] {
            try media("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=rtpmap:111 \(rtpmap)\r\n").forwardableCodecs.map(\.channels)
        }
        #expect(try channels("opus/48000") == [2])      // absent: RFC 7587 says 2
        #expect(try channels("opus/48000/2") == [2])
        #expect(try channels("opus/48000/1") == [1])
        #expect(try channels("opus/48000/3").isEmpty)
        #expect(try channels("opus/48000/4294967296").isEmpty)
        #expect(throws: SdpError.self) { try channels("opus/48000/99999999999999999999") }
    }

    @Test func codecOfTheOtherMediaKindIsNotChosen() throws {
        let audio = try media("m=audio 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:0\r\na=rtpmap:96 VP8/90000\r\n")
        #expect(audio.forwardableCodecs.isEmpty)
        let video = try media(Self.video("a=rtpmap:96 opus/48000/2\r\n"))
        #expect(video.forwardableCodecs.isEmpty)
    }

    @Test func formatWithoutRtpmapOrUnknownCodecIsNotChosen() throws {
        #expect(try media(Self.video("")).forwardableCodecs.isEmpty)
        #expect(try media(Self.video("a=rtpmap:96 rtx/90000\r\n")).forwardableCodecs.isEmpty)
        #expect(try media(Self.video("a=rtpmap:96 AV1X/90000\r\n")).forwardableCodecs.isEmpty)
    }

    @Test func h264NeedsPacketizationModeExactlyOne() throws {
        func chosen(_ fmtp: String) throws -> Bool {
            try !media(Self.video("a=rtpmap:96 H264/90000\r\n", extra: fmtp)).forwardableCodecs.isEmpty
        }
        #expect(try chosen("a=fmtp:96 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n"))
        #expect(try chosen("a=fmtp:96 Packetization-Mode=1\r\n"))
        #expect(try !chosen(""))
        #expect(try !chosen("a=fmtp:96 packetization-mode=10\r\n"))
        #expect(try !chosen("a=fmtp:96 packetization-mode=0\r\n"))
        #expect(try !chosen("a=fmtp:96 xpacketization-mode=1\r\n"))
    }

    // MARK: fmtp rebuilt from safe tokens

    @Test func fmtpKeepsSafeKeyValueParametersInOrder() {
        let f = FmtpParameters(parsing: "minptime=10; useinbandfec=1 ;stereo=1")
        #expect(f.text == "minptime=10;useinbandfec=1;stereo=1")
        #expect(f["USEINBANDFEC"] == "1")
        #expect(FmtpParameters(parsing: "profile-level-id=42e01f;x_y=a.b/c,d").text == "profile-level-id=42e01f;x_y=a.b/c,d")
    }

    @Test func fmtpDropsEverythingElse() {
        let f = FmtpParameters(parsing: "a=1;flag;=2;b=;c=<script>;d=x y;e=\"q\";f=a=b;g=sprop+/==;h=\u{e9};i=ok")
        #expect(f.text == "a=1;i=ok")
        #expect(FmtpParameters(parsing: "").text == nil)
        #expect(FmtpParameters(parsing: "0-15").text == nil)   // telephone-event style, no key
    }

    @Test func fmtpLengthAndCountLimits() {
        let key32 = String(repeating: "k", count: 32), key33 = String(repeating: "k", count: 33)
        let value64 = String(repeating: "v", count: 64), value65 = String(repeating: "v", count: 65)
        let f = FmtpParameters(parsing: "\(key32)=1;\(key33)=1;a=\(value64);b=\(value65)")
        #expect(f.parameters.map(\.key) == [key32, "a"])
        let many = (0..<20).map { "p\($0)=v" }.joined(separator: ";")
        let g = FmtpParameters(parsing: many)
        #expect(g.parameters.count == 16)
        #expect(g.parameters.last?.key == "p15")
    }

    @Test func chosenCodecCarriesRebuiltFmtp() throws {
        let m = try media(Self.video("a=rtpmap:96 VP8/90000\r\n",
                                     extra: "a=fmtp:96 max-fs=12288;<evil>=1;max-fr=60;x=a\tb\r\n"))
        #expect(m.forwardableCodecs.first?.parameters.text == "max-fs=12288;max-fr=60")
    }

    // MARK: mid

    @Test(arguments: ["", "a b", "a\tb", "a:b", "{uuid}", "m\u{e9}", String(repeating: "m", count: 33), "a.b"])
    func badMidIsAnError(mid: String) throws {
        let e = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:\(mid)\r\n"))
        #expect(e.line == 6 && e.reason == "bad mid (want 1-32 characters of A-Z a-z 0-9 _ -)")
    }

    @Test func midWithoutValueIsAnError() throws {
        let e = try #require(parseError("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid\r\n"))
        #expect(e.reason.hasPrefix("bad mid"))
    }

    @Test(arguments: ["0", "1", "audio", "video0", "sdparta_0", "A-z_9", String(repeating: "m", count: 32)])
    func goodMidIsAccepted(mid: String) throws {
        #expect(try media("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:\(mid)\r\n").mid == mid)
        #expect(isValidMid(mid))
    }
}
