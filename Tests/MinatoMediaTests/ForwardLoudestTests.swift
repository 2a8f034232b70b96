import Testing
@testable import MinatoMedia
import MinatoWire

/// The engine with audio levels: speaker events out of its timer, and forward-loudest-N on the
/// packet path (numbering continuous for a consumer whose packets were left out).
final class AudioRoom {
    let engine: MediaEngine
    var now: Nanoseconds = 1_000_000_000
    let router = RouterId(1)
    var publishers: [TransportIndex] = []
    var producers: [ProducerId] = []
    var seq: [UInt16] = []
    var ts: [UInt32] = []
    let subscriber: TransportIndex
    var consumers: [ConsumerId] = []
    var events: [[SpeakerLevel]] = []

    init(members: Int, forwardLoudest: Int, pinned: Set<Int> = [], levels: Bool = true) throws {
        var tuning = EngineTuning()
        tuning.speakers.forwardLoudest = forwardLoudest
        engine = MediaEngine(tuning: tuning)
        subscriber = engine.addTransport(router: router, feedbackSsrc: 0xABCD)
        for m in 0..<members {
            let t = engine.addTransport(router: router, feedbackSsrc: UInt32(0x100 + m))
            var p = ProducerParameters(transport: t, kind: .audio, ssrc: UInt32(0x1000 + m), payloadType: 111,
                                       clockRate: 48_000, codec: .vp8, keyFrameRequest: .none)
            p.audioLevelExtensionId = levels ? 2 : 0
            let producer = try engine.addProducer(p)
            var ids = ExtensionIdMap()
            ids[2] = 1
            var c = ConsumerParameters(producer: producer, transport: subscriber, ssrc: UInt32(0x2000 + m),
                                       payloadType: 111, extensionIds: ids)
            c.pinned = pinned.contains(m)
            consumers.append(try engine.addConsumer(c, now: now))
            publishers.append(t)
            producers.append(producer)
            seq.append(UInt16(truncatingIfNeeded: 1000 * m))
            ts.append(UInt32(48_000 * m))
        }
        _ = engine.transmitCount
        engine.clearTransmits()
    }

    /// 20 ms of audio: one packet per member at `level(member)` (RFC 6464 byte; nil: none sent).
    /// Returns the packets the subscriber got, by member: (sequence, timestamp, level byte).
    @discardableResult
    func step(_ level: (Int) -> UInt8?) -> [Int: (seq: UInt16, ts: UInt32, level: UInt8?)] {
        now &+= 20_000_000
        for m in publishers.indices {
            seq[m] &+= 1
            ts[m] &+= 960
            guard let l = level(m) else { continue }
            var bytes = [UInt8](repeating: 0, count: 12 + 4 + 40)
            bytes.withUnsafeMutableBytes { b in
                _ = RtpPacketView.writeHeader(into: b, payloadType: 111, sequenceNumber: seq[m], timestamp: ts[m],
                                              ssrc: UInt32(0x1000 + m))
                b[0] |= 0x10
                b[12] = 0xBE; b[13] = 0xDE; b[14] = 0; b[15] = 1
                b[16] = 0x20                       // id 2, one byte
                b[17] = l                          // V=0, level
            }
            bytes.withUnsafeMutableBytes { engine.handleRtp(from: publishers[m], packet: $0, now: now) }
        }
        if let due = engine.nextDeadline, due <= now { engine.handleTimeout(now: now) }
        for e in engine.takeSpeakerEvents(now: now) where e.router == router { events.append(e.speakers) }
        var out: [Int: (UInt16, UInt32, UInt8?)] = [:]
        for i in 0..<engine.transmitCount {
            let tx = engine.transmit(at: i)
            guard !tx.isRtcp, let v = RtpPacketView(UnsafeMutableRawBufferPointer(start: tx.bytes, count: tx.length)) else { continue }
            let m = Int(v.ssrc) - 0x2000
            out[m] = (v.sequenceNumber, v.timestamp, v.extensionValue(id: 1).map { $0[0] & 0x7F })
        }
        engine.clearTransmits()
        return out
    }

    func run(_ ms: Int, _ level: (Int) -> UInt8?) -> [[Int: (seq: UInt16, ts: UInt32, level: UInt8?)]] {
        (0..<(ms / 20)).map { _ in step(level) }
    }
}

@Suite struct ForwardLoudestTests {
    @Test func speakerEventsComeFromTheTimerLoudestFirst() throws {
        let r = try AudioRoom(members: 3, forwardLoudest: 0)
        _ = r.run(600) { m in [30, 10, 127][m] }
        let last = try #require(r.events.last)
        #expect(last.map(\.producer) == [r.producers[1], r.producers[0]])
        #expect(last[0].level > 0.25 && last[0].level <= 0.32, "-10 dBov is 0.316, smoothed: \(last[0].level)")
        #expect(r.engine.producerStats(r.producers[1])?.audioLevel ?? 0 > 0.3)
        #expect(r.engine.producerStats(r.producers[1])?.speaking == true)
        #expect(r.engine.producerStats(r.producers[2])?.speaking == false)
        // All silent: the list empties, then the timer stops.
        _ = r.run(1000) { _ in 127 }
        #expect(r.events.last?.isEmpty == true)
        _ = r.run(3000) { _ in nil }
        #expect(r.engine.nextDeadline == nil)
    }

    @Test func withoutForwardLoudestEverythingIsForwardedWithItsLevel() throws {
        let r = try AudioRoom(members: 2, forwardLoudest: 0)
        let out = r.step { m in [127, 20][m] }
        #expect(out[0]?.level == 127 && out[1]?.level == 20, "the level is forwarded under the subscriber's id")
        #expect(r.engine.drops(.notLoudest) == 0)
    }

    @Test func onlyTheLoudestAreForwardedAndNumberingStaysContinuous() throws {
        let r = try AudioRoom(members: 4, forwardLoudest: 1)
        // Member 0 speaks; the others are silent: only member 0 is forwarded.
        var got = r.run(1000) { m in m == 0 ? 20 : 127 }
        #expect(got.allSatisfy { Set($0.keys) == [0] })
        #expect(r.engine.drops(.notLoudest) == 3 * 50)
        // Member 0 stops, member 2 starts 220 ms later: its very first packet is forwarded.
        _ = r.run(220) { _ in 127 }
        let start = r.step { m in m == 2 ? 20 : 127 }
        #expect(start[2]?.level == 20, "the first voiced packet of the newcomer goes out")
        got = r.run(400) { m in m == 2 ? 20 : 127 }
        #expect(got.allSatisfy { Set($0.keys) == [2] })
        // A member that comes back continues its numbering from its last forwarded packet (no
        // gap to NACK), its timestamp moved on by the time it was left out.
        let r2 = try AudioRoom(members: 2, forwardLoudest: 1)
        var last0: (seq: UInt16, ts: UInt32, at: Nanoseconds)?
        func track(_ ms: Int, _ level: (Int) -> UInt8?) {
            for _ in 0..<(ms / 20) {
                if let p = r2.step(level)[0] { last0 = (p.seq, p.ts, r2.now) }
            }
        }
        track(400) { m in m == 0 ? 20 : 127 }
        track(400) { _ in 127 }                     // forwarded until the hangover frees the slot
        track(400) { m in m == 1 ? 20 : 127 }       // member 1 takes it
        track(400) { _ in 127 }
        let previous = try #require(last0)
        #expect(r2.now - previous.at >= 700_000_000, "member 0 was left out for a while")
        let back = r2.step { m in m == 0 ? 20 : 127 }
        let resumed = try #require(back[0])
        #expect(resumed.seq == previous.seq &+ 1, "sequence continues: \(previous.seq) -> \(resumed.seq)")
        let elapsedMs = (r2.now - previous.at) / 1_000_000
        #expect(resumed.ts &- previous.ts == UInt32(48 * elapsedMs), "timestamp advanced by the time left out")
        #expect(r2.engine.drops(.notLoudest) > 0)
    }

    @Test func aPinnedSubscriptionGetsEverything() throws {
        let r = try AudioRoom(members: 3, forwardLoudest: 1, pinned: [2])
        let got = r.run(600) { m in m == 0 ? 20 : 127 }
        #expect(got.allSatisfy { Set($0.keys) == [0, 2] })
    }

    @Test func audioWithoutLevelsIsAlwaysForwarded() throws {
        let r = try AudioRoom(members: 3, forwardLoudest: 1, levels: false)
        let got = r.run(200) { _ in 127 }
        #expect(got.allSatisfy { Set($0.keys) == [0, 1, 2] })
        #expect(r.engine.nextDeadline == nil || r.events.isEmpty)
    }

    @Test func removingAProducerLeavesTheListAndFreesTheRoom() throws {
        let r = try AudioRoom(members: 2, forwardLoudest: 1)
        _ = r.run(600) { m in m == 0 ? 20 : 127 }
        #expect(r.events.last?.map(\.producer) == [r.producers[0]])
        r.engine.removeProducer(r.producers[0])
        _ = r.run(400) { m in m == 1 ? 20 : 127 }
        #expect(r.events.last?.map(\.producer) == [r.producers[1]])
        r.engine.removeProducer(r.producers[1])
        #expect(r.engine.speakerRoomByRouter.isEmpty)
    }
}
