import Testing
@testable import MinatoWire

/// The data-channel section (RFC 8841) in the server's SDP: an answer accepts the offer's first
/// live data section only when the server takes data (`maxMessageSize`), and a receive offer
/// carries it at its place among the streams, BUNDLEd, with the candidates when it is first.
@Suite struct SdpDataTests {
    static let local = SfuSdpTests.local

    static let offer = """
        v=0\r
        o=- 1 1 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0 1\r
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
        c=IN IP4 127.0.0.1\r
        a=ice-ufrag:abcd\r
        a=ice-pwd:abcdefghijklmnopqrstuvwx\r
        a=fingerprint:sha-256 AB:CD\r
        a=setup:actpass\r
        a=mid:0\r
        a=sctp-port:5001\r
        a=max-message-size:262144\r
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
        c=IN IP4 127.0.0.1\r
        a=mid:1\r
        """

    @Test func answerAcceptsTheFirstDataSectionWhenAsked() throws {
        let sd = try SessionDescription.parse(Self.offer)
        #expect(SdpData.isDataChannelSection(sd.media[0]))
        #expect(SdpData.sctpPort(sd.media[0]) == 5001 && SdpData.sctpPort(sd.media[1]) == 5000)
        #expect(SdpData.maxMessageSize(sd.media[0]) == 262144)
        let rejected = try SfuSdp.answer(toSenderOffer: sd, local: Self.local, sessionId: 1, version: 1)
        #expect(rejected.media.allSatisfy { $0.port == 0 })
        let answer = try SfuSdp.answer(toSenderOffer: sd, local: Self.local, sessionId: 1, version: 1, maxMessageSize: 65536)
        let m = answer.media[0]
        #expect(m.port == 9 && m.proto == "UDP/DTLS/SCTP" && m.formats == ["webrtc-datachannel"] && m.mid == "0")
        #expect(m.attributes.firstValue(named: "sctp-port") == "5000")
        #expect(m.attributes.firstValue(named: "max-message-size") == "65536")
        #expect(m.attributes.firstValue(named: "setup") == "passive" || m.attributes.firstValue(named: "setup") == "active")
        #expect(m.attributes.contains(named: "candidate"))
        #expect(answer.media[1].port == 0)   // one association per connection: the second is rejected
        #expect(answer.bundleGroup == ["0"])
    }

    @Test func receiveOfferPlacesTheDataSection() throws {
        let stream = try #require(try Fixture.chromiumOffer.parsed().media.first { $0.kind == "video" }.flatMap(SfuSdp.chosenCodec))
        let s = SfuSdp.ReceiverStream(mid: "0", kind: "video", codec: stream, active: true, ssrc: 11, streamId: "p", trackId: "t", cname: "c")
        let withData = SfuSdp.receiveOffer(streams: [s], local: Self.local, sessionId: 1, version: 2,
                                           data: (mid: "1", position: 1, maxMessageSize: 65536))
        #expect(withData.media.map(\.kind) == ["video", "application"])
        #expect(withData.bundleGroup == ["0", "1"])
        #expect(withData.media[1].attributes.firstValue(named: "setup") == "actpass")
        #expect(!withData.media[1].attributes.contains(named: "candidate"))
        let dataFirst = SfuSdp.receiveOffer(streams: [s], local: Self.local, sessionId: 1, version: 2,
                                            data: (mid: "5", position: 0, maxMessageSize: 1024))
        #expect(dataFirst.media.map(\.mid) == ["5", "0"])
        #expect(dataFirst.media[0].attributes.contains(named: "candidate"))
        #expect(dataFirst.media[0].attributes.firstValue(named: "max-message-size") == "1024")
        // Serialized and parsed back, it is a data-channel section.
        let again = try SessionDescription.parse(dataFirst.serialize())
        #expect(SdpData.isDataChannelSection(again.media[0]))
    }
}
