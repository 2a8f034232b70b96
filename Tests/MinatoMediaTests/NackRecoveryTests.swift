import Testing
@testable import MinatoMedia
import MinatoWire

extension EngineHarness {
    /// A subscriber's generic NACK for `sequences` of consumer SSRC `ssrc`, received on `t`.
    func nack(_ sequences: [UInt16], ssrc: UInt32, on t: TransportIndex) {
        var bytes = [UInt8](repeating: 0, count: 256)
        let n = bytes.withUnsafeMutableBytes { b in
            sequences.withUnsafeBufferPointer { s in
                RtcpWriter.nack(into: b, senderSsrc: 0x5555, mediaSsrc: ssrc, sequences: s.baseAddress!, count: s.count)
            }
        }
        bytes.withUnsafeBytes { engine.handleRtcp(from: t, packet: UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: now) }
    }

    /// Hands the engine raw RTP bytes from the publisher.
    func inject(_ bytes: [UInt8]) -> [Sent] {
        var copy = bytes
        copy.withUnsafeMutableBytes { engine.handleRtp(from: publisher, packet: $0, now: now) }
        return drain()
    }

    /// An RTP packet as the publisher would send it (VP8 descriptor first).
    func packet(ssrc: UInt32 = 0x1111, pt: UInt8 = 96, seq: UInt16, ts: UInt32, payload: [UInt8]) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 12 + payload.count)
        bytes.withUnsafeMutableBytes { b in
            _ = RtpPacketView.writeHeader(into: b, payloadType: pt, sequenceNumber: seq, timestamp: ts, ssrc: ssrc)
        }
        bytes.replaceSubrange(12..., with: payload)
        return bytes
    }

    /// The NACKed sequence numbers in an RTCP packet sent to the publisher.
    static func nackedSequences(_ sent: Sent) -> [UInt16] {
        sent.bytes.withUnsafeBytes { b in
            var it = RtcpIterator(b)
            var out: [UInt16] = []
            while let p = it.next() {
                guard let nack = GenericNack(p) else { continue }
                for i in 0..<nack.pairCount {
                    guard let (pid, blp) = nack.pair(at: i) else { continue }
                    out.append(pid)
                    for bit in 0..<16 where blp & (1 << bit) != 0 { out.append(pid &+ UInt16(bit) &+ 1) }
                }
            }
            return out
        }
    }
}

/// NACK both ways on a simulated clock: subscribers' NACKs answered from the retransmission
/// store (RTX or plain, once per round-trip time), publishers' gaps NACKed, retried and given up.
@Suite struct NackRecoveryTests {
    func rtxConsumer(_ h: EngineHarness, _ p: ProducerId, on t: TransportIndex) throws -> ConsumerId {
        try h.engine.addConsumer(ConsumerParameters(producer: p, transport: t, ssrc: 0xB0B0, payloadType: 100,
                                                    extensionIds: .identity, rtxSsrc: 0xB1B1, rtxPayloadType: 101), now: h.now)
    }

    @Test func aSubscriberNackIsAnsweredWithRtxOncePerRoundTrip() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        let c = try rtxConsumer(h, p, on: b)
        _ = h.drain()
        var sent: [EngineHarness.Sent] = []
        sent += h.send(keyframe: true)
        for _ in 0..<5 { sent += h.send() }
        let third = try #require(sent[2].rtp)
        h.nack([third.seq], ssrc: 0xB0B0, on: b)
        let resent = h.drain()
        #expect(resent.count == 1 && resent[0].transport == b)
        let rtx = try #require(resent[0].rtp)
        #expect(rtx.ssrc == 0xB1B1 && rtx.pt == 101 && rtx.ts == third.ts)
        // RFC 4588: the original sequence number, then the original payload.
        #expect(resent[0].bytes[12] == UInt8(third.seq >> 8) && resent[0].bytes[13] == UInt8(third.seq & 0xFF))
        #expect(Array(resent[0].bytes[14...]) == Array(sent[2].bytes[12...]))
        // Asked again at once: not resent (no RTT measured: the default 40 ms applies).
        h.nack([third.seq], ssrc: 0xB0B0, on: b)
        #expect(h.drain().isEmpty)
        #expect(h.engine.retransmissionsThrottled == 1)
        h.now &+= 41_000_000
        h.nack([third.seq], ssrc: 0xB0B0, on: b)
        let again = h.drain()
        #expect(again.count == 1 && again[0].rtp?.seq == rtx.seq &+ 1)   // the RTX stream's own numbering
        #expect(h.engine.consumerStats(c)?.packetsRetransmitted == 2)
        #expect(h.engine.consumerStats(c)?.nacksReceived == 3)
        // The repeat within the round trip was refused before the store was looked up.
        #expect(h.engine.packetsRetransmitted == 2 && h.engine.retransmissionHits == 2)
    }

    @Test func withoutRtxThePacketIsResentAsFirstSent() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0, pt: 100)
        _ = h.drain()
        var sent = h.send(keyframe: true)
        sent += h.send()
        sent += h.send()
        h.nack([sent[0].rtp!.seq, sent[1].rtp!.seq], ssrc: 0xB0B0, on: b)
        let resent = h.drain()
        #expect(resent.map(\.bytes) == [sent[0].bytes, sent[1].bytes])
    }

    @Test func packetsNeverSentToTheConsumerOrTooOldAreMisses() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try rtxConsumer(h, p, on: b)
        _ = h.drain()
        #expect(h.send().isEmpty)                          // dropped: waiting for a keyframe
        let first = try #require(h.send(keyframe: true).first?.rtp)
        h.nack([first.seq &- 1, first.seq &+ 1], ssrc: 0xB0B0, on: b)   // before the run; not sent yet
        #expect(h.drain().isEmpty)
        #expect(h.engine.retransmissionMisses == 2)
        h.now &+= 2_100_000_000                            // older than the store keeps packets
        h.nack([first.seq], ssrc: 0xB0B0, on: b)
        #expect(h.drain().isEmpty && h.engine.retransmissionMisses == 3)
    }

    @Test func aPublisherGapIsNackedRetriedAndGivenUpForAKeyFrame() throws {
        let h = EngineHarness()
        let p = try h.engine.addProducer(ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0x1111, payloadType: 96,
                                                            clockRate: 90_000, codec: .vp8, keyFrameRequest: .pli, nack: true))
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        h.send(keyframe: true)
        let lost = h.publisherSeq &+ 1
        h.publisherSeq &+= 1                                // one packet lost on the way in
        let out = h.send()
        let nack = try #require(out.first { $0.transport == h.publisher && $0.isRtcp })
        #expect(EngineHarness.nackedSequences(nack) == [lost])
        #expect(h.engine.nacksSent == 1)
        // Retried after 1.5 x the default RTT (60 ms), not before.
        let due = try #require(h.engine.nextDeadline)
        #expect(due == h.now + 60_000_000)
        h.engine.handleTimeout(now: due - 1)
        #expect(h.drain().isEmpty)
        h.now = due
        h.engine.handleTimeout(now: h.now)
        #expect(h.drain().map(EngineHarness.nackedSequences) == [[lost]])
        // Never arrives: after 10 NACKs (or 1 s) it is given up and a keyframe is asked for.
        var pli = 0
        for _ in 0..<20 {
            h.now &+= 60_000_000
            h.engine.handleTimeout(now: h.now)
            pli += h.drain().filter(\.isPli).count
        }
        #expect(h.engine.nacksSent == 10)
        #expect(pli == 1 && h.engine.keyFrameRequests(.nackGaveUp) == 1)
    }

    @Test func relayHopsCountTheirLossAndResendsApart() throws {
        let h = EngineHarness()
        // A client's stream with two packets missing: not a relay's loss.
        let p = try h.nackedVideoToOneSubscriber()
        h.send(keyframe: true)
        h.publisherSeq &+= 2
        h.send()
        #expect(h.engine.nacksSent == 1 && h.engine.relayPacketsMissing == 0)
        // A stream arriving over a relay from another node, three packets missing.
        let inbound = h.engine.addTransport(router: h.router, feedbackSsrc: 0xCAFE, relay: true)
        _ = try h.engine.addProducer(ProducerParameters(transport: inbound, kind: .video, ssrc: 0x2222, payloadType: 96,
                                                        clockRate: 90_000, codec: .vp8, keyFrameRequest: .pli, nack: true))
        for seq: UInt16 in [10, 11, 15] {
            var bytes = h.packet(ssrc: 0x2222, seq: seq, ts: UInt32(seq) * 3000, payload: [0x10, 0x00])
            bytes.withUnsafeMutableBytes { h.engine.handleRtp(from: inbound, packet: $0, now: h.now) }
        }
        _ = h.drain()
        #expect(h.engine.relayPacketsMissing == 3)
        // Resends: over a relay to another node counted apart, to a client not.
        let outbound = h.engine.addTransport(router: h.router, feedbackSsrc: 0xBEEF, relay: true)
        _ = try h.consumer(p, on: outbound, ssrc: 0xC0C0)
        let sent = h.send(keyframe: true).compactMap { $0.transport == outbound ? $0.rtp : nil }
        let seq = try #require(sent.first).seq
        h.nack([seq], ssrc: 0xC0C0, on: outbound)
        #expect(h.drain().count == 1)
        #expect(h.engine.relayPacketsRetransmitted == 1 && h.engine.packetsRetransmitted == 1)
    }

    @Test func rtxFromThePublisherFillsTheGapAndDuplicatesAreDropped() throws {
        let h = EngineHarness()
        try h.nackedVideoToOneSubscriber()
        let key = try #require(h.send(keyframe: true).first?.rtp)
        h.publisherSeq &+= 1
        let lost = h.publisherSeq
        let lostTs = h.publisherTs &+ 3000
        _ = h.send()                                        // NACK goes out
        let payload: [UInt8] = [0x10, 0x01, 0xAB, 0xCD]
        let rtx = h.packet(ssrc: 0x1112, pt: 97, seq: 7, ts: lostTs, payload: [UInt8(lost >> 8), UInt8(lost & 0xFF)] + payload)
        let out = h.inject(rtx)
        let restored = try #require(out.first?.rtp)
        #expect(restored.ssrc == 0xB0B0 && restored.pt == 100 && restored.seq == key.seq &+ 1)
        #expect(Array(out[0].bytes[12...]) == payload)
        #expect(h.engine.rtxRecovered == 1 && h.engine.packetsRecovered == 1)
        // The original arrives late after all: a duplicate, not forwarded twice.
        #expect(h.inject(h.packet(seq: lost, ts: lostTs, payload: payload)).isEmpty)
        #expect(h.engine.drops(.duplicate) == 1)
        // RTX padding (no original inside) and RTX with another payload type are dropped.
        #expect(h.inject(h.packet(ssrc: 0x1112, pt: 97, seq: 8, ts: lostTs, payload: [0, 1])).isEmpty)
        #expect(h.inject(h.packet(ssrc: 0x1112, pt: 98, seq: 9, ts: lostTs, payload: [0, 1, 2, 3])).isEmpty)
        #expect(h.engine.drops(.rtxPadding) == 1 && h.engine.drops(.unusableRtx) == 1)
    }

    @Test func nackGeneratorListsGapsInOrderAndGivesUpTooWideOnes() {
        var g = NackGenerator(capacity: 8, maxAge: 1_000, maxRetries: 3)
        #expect(g.received(65_534, now: 1) == .inOrder)
        #expect(g.received(2, now: 2) == .gap)             // 65535, 0, 1 missing across the wrap
        let out = UnsafeMutablePointer<UInt16>.allocate(capacity: 16)
        defer { out.deallocate() }
        let polled = g.poll(now: 2, retryInterval: 100, into: out, limit: 16)
        #expect(polled.count == 3 && Array(UnsafeBufferPointer(start: out, count: 3)) == [65_535, 0, 1])
        #expect(g.received(0, now: 3) == .recovered)
        #expect(g.received(0, now: 4) == .old)
        #expect(g.deadline(retryInterval: 100) == 102)
        #expect(g.received(20, now: 5) == .gapTooLarge && g.missingCount == 0)
    }

    @Test func aRepairAfterOneNackMeasuresTheRoundTripAndOneAfterTwoDoesNot() {
        var g = NackGenerator(capacity: 8, maxAge: 1_000_000_000, maxRetries: 5)
        let out = UnsafeMutablePointer<UInt16>.allocate(capacity: 8)
        defer { out.deallocate() }
        _ = g.received(10, now: 0)
        _ = g.received(13, now: 1_000)                     // 11 and 12 missing
        _ = g.poll(now: 1_000, retryInterval: 20_000_000, into: out, limit: 8)
        #expect(g.received(11, now: 3_001_000) == .recovered)
        #expect(g.lastRepairDelay == 3_000_000)            // NACKed once: 3 ms to the sender and back
        _ = g.poll(now: 21_000_000, retryInterval: 20_000_000, into: out, limit: 8)  // 12 NACKed again
        #expect(g.received(12, now: 22_000_000) == .recovered)
        #expect(g.lastRepairDelay == 0)                    // which NACK did it answer? unknown
        _ = g.received(15, now: 30_000_000)                // 14 missing, never NACKed
        #expect(g.received(14, now: 31_000_000) == .recovered && g.lastRepairDelay == 0)
    }

    /// A publisher's transport gets no sender report from us, so no RTT from reports; the
    /// repairs of what we NACK measure it, and NACK retries are paced by it instead of the
    /// 40 ms default (which made a lost retransmission cost a frame 60 ms).
    @Test func repairsMeasureThePublishersRoundTripAndPaceTheRetries() throws {
        let h = EngineHarness()
        try h.nackedVideoToOneSubscriber()
        h.send(keyframe: true)
        #expect(h.engine.roundTripTime(h.publisher) == h.engine.tuning.defaultRoundTripTime)  // unknown yet
        // A packet lost, NACKed, and its RTX 2 ms later.
        h.publisherSeq &+= 1
        let lost = h.publisherSeq
        let lostTs = h.publisherTs &+ 3000
        _ = h.send()
        h.now &+= 2_000_000
        _ = h.inject(h.packet(ssrc: 0x1112, pt: 97, seq: 1, ts: lostTs, payload: [UInt8(lost >> 8), UInt8(lost & 0xFF), 0x10, 0x01]))
        #expect(h.engine.roundTripTime(h.publisher) == 2_000_000)
        // The next loss: its retry is due at the 20 ms floor (1.5 x 2 ms is below it), not at 60 ms.
        h.publisherSeq &+= 1
        #expect(h.send().contains { $0.transport == h.publisher && $0.isRtcp })
        #expect(h.engine.nextDeadline == h.now + 20_000_000)
    }
}

/// What NACKs can make the server send is bounded per consumer, whatever a subscriber asks.
@Suite struct ResendBudgetTests {
    @Test func atMostFiftyResendsPerConsumerPerHundredMilliseconds() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0, pt: 100)
        _ = h.drain()
        var sequences: [UInt16] = []
        for i in 0..<120 {
            if let r = h.send(keyframe: i == 0, advance: 1_000_000).first?.rtp { sequences.append(r.seq) }
        }
        #expect(sequences.count == 120)
        h.nack(sequences, ssrc: 0xB0B0, on: b)             // 120 packets asked for at once
        #expect(h.drain().count == 50)
        // The 51st is refused and the other 69 are not even looked up.
        #expect(h.engine.retransmissionsThrottled == 1)
        #expect(h.engine.retransmissionHits + h.engine.retransmissionMisses == 50)
        h.now &+= 100_000_000                               // the next window
        h.nack(Array(sequences[50..<120]), ssrc: 0xB0B0, on: b)
        #expect(h.drain().count == 50)
    }
}

/// A publisher's transport measures no round-trip time (it receives no media, so no reports);
/// paired with the same client's receive transport, NACK retries are paced by that one's RTT.
@Suite struct PairedRoundTripTests {
    @Test func nackRetriesUseThePairedTransportsRoundTrip() throws {
        let h = EngineHarness()
        let p = try h.engine.addProducer(ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0x1111, payloadType: 96,
                                                            clockRate: 90_000, codec: .vp8, keyFrameRequest: .pli, nack: true))
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        h.engine.pairTransports(h.publisher, b)
        _ = h.drain()
        h.send(keyframe: true)
        // b measures 10 ms: our translated SR, then its RR 100 ms later that held it 90 ms.
        let ntp: UInt64 = 0xE000_1234_5678_0000
        var sr = [UInt8](repeating: 0, count: 28)
        _ = sr.withUnsafeMutableBytes {
            RtcpWriter.senderReport(into: $0, ssrc: 0x1111, ntpTimestamp: ntp, rtpTimestamp: h.publisherTs, packetCount: 1, octetCount: 1)
        }
        sr.withUnsafeBytes { h.engine.handleRtcp(from: h.publisher, packet: $0, now: h.now) }
        _ = h.drain()
        h.now &+= 100_000_000
        let block = ReportBlock(ssrc: 0xB0B0, fractionLost: 0, cumulativeLost: 0, extendedHighestSequence: 0, jitter: 0,
                                lastSR: UInt32(truncatingIfNeeded: ntp >> 16), delaySinceLastSR: 5898)
        var rr = [UInt8](repeating: 0, count: 32)
        _ = rr.withUnsafeMutableBytes { RtcpWriter.receiverReport(into: $0, senderSsrc: 0x5555, block: block) }
        rr.withUnsafeBytes { h.engine.handleRtcp(from: b, packet: $0, now: h.now) }
        h.publisherSeq &+= 1                                // a packet lost on the publisher's leg
        #expect(h.send().contains { $0.transport == h.publisher && $0.isRtcp })
        // 1.5 x 10 ms is under the 20 ms floor: the retry is due in 20 ms, not the default 60 ms.
        #expect(h.engine.nextDeadline == h.now + 20_000_000)
    }
}
