import Foundation
import Testing
import MinatoWire
@testable import MinatoRooms

/// Firefox under `bundlePolicy: 'max-bundle'` offers every m-section after the first as
/// `m=<kind> 0 …` with `a=bundle-only` (RFC 8843): part of the bundle, not rejected. The room
/// layer's parse takes such an m-section in the BUNDLE group as live (port 9), so a Firefox
/// member can publish its camera next to its microphone.
@Suite struct BundleOnlyOfferTests {
    static let local = SdpLocalTransport(
        iceUfrag: "mInAtOuF", icePwd: "minatopwdminatopwdminato",
        fingerprint: "sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89",
        candidates: ["candidate:1 1 UDP 2015363327 127.0.0.1 40001 typ host"], iceLite: true)

    static func firefoxOffer() throws -> String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("MinatoWireTests/Fixtures/firefox-offer-audio-video.sdp")
        return try String(contentsOf: url, encoding: .utf8)
    }

    @Test func firefoxBundleOnlyVideoIsPublishable() throws {
        let text = try Self.firefoxOffer()
        // As captured: the video m-line is port 0 + bundle-only, inside the BUNDLE group.
        let raw = try SessionDescription.parse(text)
        #expect(raw.media[1].kind == "video" && raw.media[1].port == 0 && raw.media[1].bundleOnly)
        #expect(raw.bundleGroup == ["0", "1"])

        let sd = try SdpNegotiation.parse(text)
        #expect(sd.media.map(\.port) == [9, 9])
        #expect(sd.media.map(\.direction) == [.sendonly, .sendonly])
        let video = try SdpNegotiation.publishedStream(sd.media[1])
        #expect(video.codec.name == "VP8" && video.kind == "video" && video.mid == "1")

        // The answer accepts both m-lines (recvonly, bundled), the video one included.
        let answer = try SfuSdp.answer(toSenderOffer: sd, local: Self.local, sessionId: 1, version: 1)
        #expect(answer.media.map(\.port) == [9, 9])
        #expect(answer.media.map(\.direction) == [.recvonly, .recvonly])
        #expect(answer.bundleGroup == ["0", "1"])
    }

    @Test func onlyBundledBundleOnlySectionsAreRevived() throws {
        let head = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
        func section(_ kind: String, _ port: Int, _ mid: String, bundleOnly: Bool) -> String {
            "m=\(kind) \(port) UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 127.0.0.1\r\na=rtpmap:96 VP8/90000\r\n"
                + (bundleOnly ? "a=bundle-only\r\n" : "") + "a=sendonly\r\na=mid:\(mid)\r\n"
        }
        // A rejected m-section (port 0, no bundle-only) stays rejected; a bundle-only one outside
        // the BUNDLE group too; the one in the group is live.
        let text = head + "a=group:BUNDLE 0 2\r\n" + section("video", 9, "0", bundleOnly: false)
            + section("video", 0, "1", bundleOnly: true) + section("video", 0, "2", bundleOnly: true)
            + section("video", 0, "3", bundleOnly: false)
        let sd = try SdpNegotiation.parse(text)
        #expect(sd.media.map(\.port) == [9, 0, 9, 0])
        // Without a BUNDLE group nothing changes.
        let plain = try SdpNegotiation.parse(head + section("video", 0, "0", bundleOnly: true))
        #expect(plain.media.map(\.port) == [0])
    }
}
