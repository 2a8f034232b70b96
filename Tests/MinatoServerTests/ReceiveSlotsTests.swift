import Testing
import MinatoWire
@testable import MinatoRooms

/// A subscriber's receive m-lines are reused (`ReceiveSlots`): an ended one of the kind is taken
/// again, with its mid (and new SSRCs), once the subscriber has answered an offer that carried it
/// `inactive`; so the server's offer follows the live subscriptions, not how many came and went.
@Suite struct ReceiveSlotsTests {
    static func stream(_ kind: String, pt: UInt8 = 96, codec: String = "VP8") throws -> PublishedStream {
        let clock = kind == "audio" ? "48000/2" : "90000"
        let text = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
            + "m=\(kind) 9 UDP/TLS/RTP/SAVPF \(pt)\r\na=mid:0\r\na=sendonly\r\na=rtpmap:\(pt) \(codec)/\(clock)\r\na=ssrc:7 cname:x\r\n"
        return try SdpNegotiation.publishedStream(try SessionDescription.parse(text).media[0])
    }

    static let local = SdpLocalTransport(
        iceUfrag: "mInAtOuF", icePwd: "minatopwdminatopwdminato",
        fingerprint: "sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89",
        candidates: ["candidate:1 1 UDP 2015363327 127.0.0.1 40001 typ host"], iceLite: true)

    /// Subscribes, offers, answers; returns the slot.
    static func subscribe(_ slots: inout ReceiveSlots, _ stream: PublishedStream, _ id: String, version: inout Int,
                          max: Int = 128) -> ReceiveSlot {
        let slot = slots.take(stream, subscriptionId: id, streamId: "pub", trackId: id, cname: "c", maxSubscriptions: max)
        version += 1
        slots.offered(version: version)
        slots.answered(version: version)
        return slot
    }

    static func unsubscribe(_ slots: inout ReceiveSlots, _ id: String, version: inout Int) {
        slots.end(id)
        version += 1
        slots.offered(version: version)
        slots.answered(version: version)
    }

    @Test func anEndedSlotTheSubscriberSawEndIsTakenAgain() throws {
        var slots = ReceiveSlots(), v = 0
        let video = try Self.stream("video")
        let first = Self.subscribe(&slots, video, "s1", version: &v)
        Self.unsubscribe(&slots, "s1", version: &v)
        let again = Self.subscribe(&slots, video, "s2", version: &v)
        // Same mid; new SSRCs (a receiver sets its stream up again for them).
        #expect(again.mid == first.mid && again.ssrc != first.ssrc && again.rtxSsrc != nil && again.rtxSsrc != again.ssrc)
        #expect(again.subscriptionId == "s2" && again.trackId == "s2")
        #expect(slots.slots.count == 1 && slots.slot(carrying: "s2")?.mid == first.mid && slots.slot(carrying: "s1") == nil)
    }

    @Test func anEndNotYetAnsweredIsNotReused() throws {
        var slots = ReceiveSlots(), v = 0
        let video = try Self.stream("video")
        _ = Self.subscribe(&slots, video, "s1", version: &v)
        slots.end("s1")
        // No offer has shown the end yet: a new m-line (the client would not see the track change).
        let b = slots.take(video, subscriptionId: "s2", streamId: "p", trackId: "t", cname: "c", maxSubscriptions: 128)
        #expect(b.mid == "1")
        v += 1
        slots.offered(version: v)                           // carries mid 0 inactive...
        let c = slots.take(video, subscriptionId: "s3", streamId: "p", trackId: "t", cname: "c", maxSubscriptions: 128)
        #expect(c.mid == "2")                               // ...but it is not answered yet
        slots.answered(version: v)
        slots.end("s3")
        let d = slots.take(video, subscriptionId: "s4", streamId: "p", trackId: "t", cname: "c", maxSubscriptions: 128)
        #expect(d.mid == "0")
    }

    @Test func kindsAndFormatsAreKeptApartWhileThereIsRoom() throws {
        var slots = ReceiveSlots(), v = 0
        let vp8 = try Self.stream("video"), vp9 = try Self.stream("video", pt: 102, codec: "VP9"), opus = try Self.stream("audio", pt: 111, codec: "opus")
        _ = Self.subscribe(&slots, vp8, "v1", version: &v)
        Self.unsubscribe(&slots, "v1", version: &v)
        // Audio never takes a video m-line; another video format takes a new one while there is room.
        #expect(Self.subscribe(&slots, opus, "a1", version: &v).mid == "1")
        #expect(Self.subscribe(&slots, vp9, "v2", version: &v).mid == "2")
        #expect(Self.subscribe(&slots, vp8, "v3", version: &v).mid == "0")
        // At the limit, an ended m-line of another format is taken (its codec changes).
        Self.unsubscribe(&slots, "v3", version: &v)
        let other = Self.subscribe(&slots, vp9, "v4", version: &v, max: 3)
        #expect(other.mid == "0" && other.codec.payloadType == 102 && slots.slots.count == 3)
    }

    @Test func churnLeavesTheOfferAsItWas() throws {
        var slots = ReceiveSlots(), v = 0
        let video = try Self.stream("video"), audio = try Self.stream("audio", pt: 111, codec: "opus")
        func offer() -> String {
            SfuSdp.receiveOffer(streams: slots.slots.map(\.stream), local: Self.local, sessionId: 1, version: 1).serialize()
        }
        _ = Self.subscribe(&slots, audio, "a", version: &v)
        _ = Self.subscribe(&slots, video, "v0", version: &v)
        let first = offer().utf8.count
        for i in 1...300 {
            Self.unsubscribe(&slots, "v\(i - 1)", version: &v)
            _ = Self.subscribe(&slots, video, "v\(i)", version: &v)
        }
        #expect(slots.slots.count == 2)
        // Only the track id and the SSRCs (their digits) differ: nothing per cycle.
        #expect(abs(offer().utf8.count - first) <= 64)
    }

    @Test func eachKindStaysWithinTheSubscriptionLimitUnderAnyChurn() throws {
        var rng = SystemRandomNumberGenerator()
        let max = 6
        let streams = try [Self.stream("video"), Self.stream("video", pt: 100, codec: "VP9"), Self.stream("video", pt: 98, codec: "AV1"),
                           Self.stream("audio", pt: 111, codec: "opus"), Self.stream("audio", pt: 109, codec: "opus")]
        var slots = ReceiveSlots(), v = 0
        var live: [(String, String)] = []    // (subscription, kind)
        for step in 0..<3000 {
            let kind = Bool.random(using: &rng) ? "audio" : "video"
            let count = live.filter { $0.1 == kind }.count
            if count < max, Int.random(in: 0..<3, using: &rng) > 0 {
                let s = streams.filter { $0.kind == kind }.randomElement(using: &rng)!
                let id = "s\(step)"
                _ = slots.take(s, subscriptionId: id, streamId: "p", trackId: id, cname: "c", maxSubscriptions: max)
                live.append((id, kind))
            } else if let i = live.indices.filter({ live[$0].1 == kind }).randomElement(using: &rng) {
                slots.end(live[i].0)
                live.remove(at: i)
            }
            if Int.random(in: 0..<4, using: &rng) == 0 {
                v += 1
                slots.offered(version: v)
                if Bool.random(using: &rng) { slots.answered(version: v) }
            }
            for k in ["audio", "video"] { #expect(slots.slots.filter { $0.kind == k }.count <= max) }
            for (id, k) in live { #expect(slots.slot(carrying: id)?.kind == k) }
        }
        #expect(Set(slots.slots.map(\.mid)).count == slots.slots.count)
    }
}
