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
}
