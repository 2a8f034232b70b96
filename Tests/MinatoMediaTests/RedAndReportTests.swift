import Testing
@testable import MinatoMedia
import MinatoWire

/// Audio RED passed through or reduced per consumer, and the subscriber's receiver reports
/// reflected in consumer stats (loss, jitter, round-trip time).
@Suite struct RedAndReportTests {
    @Test func redGoesToConsumersThatNegotiatedItAndIsReducedForTheOthers() throws {
        let h = EngineHarness()
        let p = try h.engine.addProducer(ProducerParameters(transport: h.publisher, kind: .audio, ssrc: 0x2222, payloadType: 111,
                                                            clockRate: 48_000, codec: .other, keyFrameRequest: .none,
                                                            redPayloadType: 63))
        let a = h.subscriber(), b = h.subscriber()
        _ = try h.engine.addConsumer(ConsumerParameters(producer: p, transport: a, ssrc: 0xA, payloadType: 111,
                                                        extensionIds: .identity, redPayloadType: 63), now: h.now)
        _ = try h.engine.addConsumer(ConsumerParameters(producer: p, transport: b, ssrc: 0xB, payloadType: 111,
                                                        extensionIds: .identity), now: h.now)
        // One redundant block of 3 bytes (960 ticks old), then the primary block of 4 bytes.
        let red: [UInt8] = [0x80 | 111, 15, 0, 3, 111, 1, 2, 3, 9, 8, 7, 6]
        let out = h.inject(h.packet(ssrc: 0x2222, pt: 63, seq: 10, ts: 96_000, payload: red))
        let toA = try #require(out.first { $0.transport == a })
        let toB = try #require(out.first { $0.transport == b })
        #expect(toA.rtp?.pt == 63 && Array(toA.bytes[12...]) == red)
        #expect(toB.rtp?.pt == 111 && Array(toB.bytes[12...]) == [9, 8, 7, 6])
        // Plain opus passes to both; a RED packet whose blocks do not fit is dropped for B only.
        #expect(h.inject(h.packet(ssrc: 0x2222, pt: 111, seq: 11, ts: 96_960, payload: [5, 5])).count == 2)
        let broken: [UInt8] = [0x80 | 111, 15, 0, 200, 111, 1]
        let partial = h.inject(h.packet(ssrc: 0x2222, pt: 63, seq: 12, ts: 97_920, payload: broken))
        #expect(partial.count == 1 && partial[0].transport == a)
        #expect(h.engine.drops(.malformedRed) == 1)
    }

    @Test func aReceiverReportGivesLossJitterAndRoundTripTime() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        let c = try h.consumer(p, on: b, ssrc: 0xB0B0)
        _ = h.drain()
        h.send(keyframe: true)
        // The publisher's sender report is translated for the consumer, which remembers it.
        let ntp: UInt64 = 0xE000_0000_1234_5678
        var sr = [UInt8](repeating: 0, count: 28)
        _ = sr.withUnsafeMutableBytes {
            RtcpWriter.senderReport(into: $0, ssrc: 0x1111, ntpTimestamp: ntp, rtpTimestamp: h.publisherTs,
                                    packetCount: 1, octetCount: 100)
        }
        sr.withUnsafeBytes { h.engine.handleRtcp(from: h.publisher, packet: $0, now: h.now) }
        #expect(h.drain().contains { $0.transport == b && $0.rtcpKinds.first?.0 == RtcpPacketType.senderReport })
        let srSentAt = h.now
        // The subscriber answers 130 ms later, having held the SR for 100 ms: RTT 30 ms.
        h.now &+= 130_000_000
        let block = ReportBlock(ssrc: 0xB0B0, fractionLost: 25, cumulativeLost: 7, extendedHighestSequence: 1000,
                                jitter: 42, lastSR: UInt32(truncatingIfNeeded: ntp >> 16), delaySinceLastSR: 6554)
        var rr = [UInt8](repeating: 0, count: 32)
        _ = rr.withUnsafeMutableBytes { RtcpWriter.receiverReport(into: $0, senderSsrc: 0x5555, block: block) }
        rr.withUnsafeBytes { h.engine.handleRtcp(from: b, packet: $0, now: h.now) }
        let stats = try #require(h.engine.consumerStats(c))
        #expect(stats.fractionLost == 25 && stats.packetsLost == 7 && stats.jitter == 42)
        let rtt = try #require(stats.roundTripTime)
        #expect(rtt > 29_900_000 && rtt < 30_100_000, "RTT \(rtt) ns, SR sent at \(srSentAt)")
    }

    /// A stream of 90 kHz packets every 20 ms (1800 ticks), arriving exactly on time from
    /// `start`, sequence numbers 100 + i for each i in `indices`.
    static func onTime(_ indices: [Int], into s: inout RtpStream, start: Nanoseconds = 1_000_000_000) {
        for i in indices {
            s.received(sequence: UInt16(100 + i), timestamp: UInt32(i * 1800), length: 100,
                       now: start + Nanoseconds(i) * 20_000_000, clockRate: 90_000)
        }
    }

    @Test func aPacketRepairedFromRtxStaysLostInTheReportsAndAddsNoJitter() {
        // 0..9 without 5, then 5 restored from RTX 60 ms late: the report still counts it lost
        // (the loss before repair, as libwebrtc counts it) and the jitter stays 0.
        var s = RtpStream()
        Self.onTime([0, 1, 2, 3, 4, 6, 7, 8, 9], into: &s)
        s.received(sequence: 105, timestamp: 5 * 1800, length: 100, now: 1_000_000_000 + 9 * 20_000_000 + 60_000_000,
                   clockRate: 90_000, repaired: true)
        #expect(s.cumulativeLost == 1 && s.packets == 9 && s.bytes == 1000 && s.jitter == 0)
        let block = s.reportBlock(ssrc: 0x1111, now: 2_000_000_000)
        #expect(block.cumulativeLost == 1 && block.fractionLost == 25 && block.jitter == 0)   // 256 x 1/10
        #expect(block.extendedHighestSequence & 0xFFFF == 109)
    }

    @Test func aLatePacketOnTheStreamsOwnSsrcCountsAsReceivedButNotInTheJitter() {
        // Packet 5 resent without RTX (or reordered) arrives 60 ms late on the stream's own
        // SSRC: received (RFC 3550: late packets count), no jitter from it.
        var s = RtpStream()
        Self.onTime([0, 1, 2, 3, 4, 6, 7, 8, 9], into: &s)
        s.received(sequence: 105, timestamp: 5 * 1800, length: 100, now: 1_000_000_000 + 9 * 20_000_000 + 60_000_000,
                   clockRate: 90_000)
        #expect(s.cumulativeLost == 0 && s.packets == 10 && s.jitter == 0)
        // A packet newer than all others, 16 ms late (1440 ticks), does count: J += 1440/16.
        s.received(sequence: 110, timestamp: 10 * 1800, length: 100, now: 1_000_000_000 + 10 * 20_000_000 + 16_000_000,
                   clockRate: 90_000)
        #expect(s.jitter == 90)
    }

    @Test func rtxRepairsThroughTheEngineLeaveThePublishersLossInItsStats() throws {
        let h = EngineHarness()
        let p = try h.nackedVideoToOneSubscriber()
        h.send(keyframe: true)
        h.publisherSeq &+= 1
        let lost = h.publisherSeq
        let lostTs = h.publisherTs &+ 3000
        h.send()                                            // the gap: NACKed
        let payload: [UInt8] = [0x10, 0x01, 0xAB, 0xCD]
        let rtx = h.packet(ssrc: 0x1112, pt: 97, seq: 7, ts: lostTs, payload: [UInt8(lost >> 8), UInt8(lost & 0xFF)] + payload)
        #expect(h.inject(rtx).count == 1)                  // repaired and forwarded
        #expect(h.engine.rtxRecovered == 1)
        let stats = try #require(h.engine.producerStats(p))
        #expect(stats.packetsLost == 1 && stats.packetsRecovered == 1 && stats.packetsReceived == 2)
    }
}
