import Testing
import MinatoWire
@testable import MinatoRooms
@testable import MinatoSignaling

/// The room layer's SDP limits (docs/protocol.md "Limits"): `server.maxSdpBytes` before a
/// description is read, `media.sdp.maxMediaSections`, `media.sdp.maxCodecsPerSection` and
/// `media.maxRemoteCandidates` while it is read, each refused with `limitExceeded` (code 413)
/// naming its key; and the candidates of a description counted with trickled ones.
@Suite struct SdpLimitsRoomTests {
    static let head = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
    static let transport = "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
        + "a=fingerprint:sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89\r\n"

    static func offer(sections: Int = 1, extra: String = "") -> String {
        head + transport + (0..<sections).map {
            "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:\($0)\r\na=sendonly\r\na=rtpmap:96 VP8/90000\r\na=ssrc:\($0 + 1) cname:x\r\n"
        }.joined() + extra
    }

    static func refusal(_ body: () throws -> Void) -> RoomError? {
        do { try body(); return nil } catch let e as RoomError { return e } catch { return .internalError("\(error)") }
    }

    @Test func sizeIsCheckedBeforeAnythingIsRead() {
        var c = RoomConfiguration()
        c.maxSdpBytes = 4096
        // Over the size: refused whatever it holds (this is not SDP at all).
        let e = Self.refusal { _ = try SdpNegotiation.parse(String(repeating: "x", count: 4097), limits: c) }
        #expect(e?.name == "limitExceeded" && e?.code == 413)
        #expect(e?.detail.contains("server.maxSdpBytes") == true && e?.detail.contains("4097") == true)
        // At the size: read (and here refused as what it is).
        #expect(Self.refusal { _ = try SdpNegotiation.parse(String(repeating: "x", count: 4096), limits: c) }?.name == "invalidSdp")
    }

    @Test func shapeLimitsNameTheirKeys() {
        var c = RoomConfiguration()
        c.maxSdpMediaSections = 4
        c.maxSdpCodecsPerSection = 8
        c.maxRemoteCandidates = 3
        c.maxSubscriptionsPerMember = 3
        func key(_ text: String, answer: Bool = false) -> String? {
            guard let e = Self.refusal({ _ = try SdpNegotiation.parse(text, limits: c, answer: answer) }) else { return nil }
            #expect(e.name == "limitExceeded" && e.code == 413)
            return ["server.maxSdpBytes", "media.sdp.maxMediaSections", "media.sdp.maxCodecsPerSection", "media.maxRemoteCandidates"]
                .first { e.detail.contains($0) }
        }
        #expect(key(Self.offer(sections: 4)) == nil)
        #expect(key(Self.offer(sections: 5)) == "media.sdp.maxMediaSections")
        // An answer mirrors the server's offer: up to twice rooms.maxSubscriptionsPerMember.
        #expect(key(Self.offer(sections: 6), answer: true) == nil)
        #expect(key(Self.offer(sections: 7), answer: true) == "media.sdp.maxMediaSections")
        #expect(key(Self.offer(extra: (0..<8).map { "a=rtpmap:\(97 + $0) VP8/90000\r\n" }.joined())) == "media.sdp.maxCodecsPerSection")
        #expect(key(Self.offer(extra: (0..<4).map { "a=candidate:\($0) 1 udp 1 127.0.0.1 \(5000 + $0) typ host\r\n" }.joined()))
                == "media.maxRemoteCandidates")
    }

    @Test func distinctCandidatesAcrossTheBundleAreCounted() throws {
        let candidates = (0..<3).map { "a=candidate:\($0) 1 udp 1 127.0.0.1 \(5000 + $0) typ host\r\n" }.joined()
        // Two bundled m-sections with the same three candidates each: three candidates.
        let text = Self.head + "a=group:BUNDLE 0 1\r\n" + Self.transport
            + (0..<2).map { "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:\($0)\r\na=rtpmap:96 VP8/90000\r\n" + candidates }.joined()
        let sd = try SdpNegotiation.parse(text)
        #expect(try SdpNegotiation.remoteTransport(of: sd, maxCandidates: 3).candidates.count == 3)
        let e = Self.refusal { _ = try SdpNegotiation.remoteTransport(of: sd, maxCandidates: 2) }
        #expect(e?.code == 413 && e?.detail.contains("media.maxRemoteCandidates") == true)
    }

    @Test func candidatesOfTheDescriptionCountWithTrickledOnes() throws {
        var t = PeerTransport()
        _ = t.need(1)
        for i in 0..<3 { _ = try t.trickle("candidate:\(i) 1 udp 1 127.0.0.1 500\(i) typ host", maxCount: 5, maxHeldBytes: 10_000) }
        // 3 trickled + 3 in the description > 5: refused, nothing applied.
        #expect(throws: RoomError.self) { _ = try t.applyRemote(candidates: 3, maxCount: 5) }
        #expect(try t.applyRemote(candidates: 2, maxCount: 5)?.count == 3)
        // All 5 used: the next trickle is over.
        #expect(throws: RoomError.self) { _ = try t.trickle(nil, maxCount: 5, maxHeldBytes: 10_000) }
    }

    // MARK: Over JSON-RPC (no media worker is reached: the offer is refused first)

    @Test func publishAndNegotiateRefuseOversizedAndHostileOffers() async throws {
        let s = RoomSafetyTests.service()
        let a = RoomSafetyTests.Client(id: 1)
        let room = try await RoomSafetyTests.call(s, a, "createRoom", ["name": "r"])
        let roomId = try #require(room["room"]?["id"]?.stringValue)
        let joined = try await RoomSafetyTests.call(s, a, "join", ["roomId": .string(roomId), "name": "m"])
        let member = try #require(joined["member"]?["id"]?.stringValue)
        func refusal(_ method: String, _ sdp: String) async -> RoomError? {
            var params: [String: JSONValue] = ["memberId": .string(member), "offer": ["type": "offer", "sdp": .string(sdp)]]
            if method == "publish" { params["contentType"] = "video"; params["mid"] = "0" }
            do { _ = try await RoomSafetyTests.call(s, a, method, .object(params)); return nil } catch let e as RoomError { return e } catch {
                return RoomError.internalError("\(error)")
            }
        }
        // Over 64 KiB: refused by size.
        let big = Self.offer(extra: String(repeating: "a=x-padding:0123456789abcdef\r\n", count: 2300))
        #expect(big.utf8.count > 65536)
        for method in ["publish", "negotiate"] {
            let e = await refusal(method, big)
            #expect(e?.name == "limitExceeded" && e?.code == 413 && e?.detail.contains("server.maxSdpBytes") == true)
        }
        // Under 64 KiB but thousands of rtpmap lines, m-sections or candidates: refused by shape.
        let rtpmaps = Self.offer(extra: (0..<2000).map { "a=rtpmap:\(96 + $0 % 32) VP8/90000\r\n" }.joined())
        let sections = Self.offer(sections: 600)
        let candidates = Self.offer(extra: (0..<1000).map { "a=candidate:\($0) 1 udp 1 127.0.0.1 \(5000 + $0) typ host\r\n" }.joined())
        for (sdp, key) in [(rtpmaps, "media.sdp.maxCodecsPerSection"), (sections, "media.sdp.maxMediaSections"),
                           (candidates, "media.maxRemoteCandidates")] {
            #expect(sdp.utf8.count <= 65536)
            let e = await refusal("publish", sdp)
            #expect(e?.name == "limitExceeded" && e?.detail.contains(key) == true, "\(key): \(String(describing: e))")
        }
        // An answer with no server offer out is refused before it is read.
        let name = await RoomSafetyTests.errorName {
            try await RoomSafetyTests.call(s, a, "answer", ["memberId": .string(member), "answer": ["type": "answer", "sdp": .string(big)]])
        }
        #expect(name == "invalidParameter")
    }
}
