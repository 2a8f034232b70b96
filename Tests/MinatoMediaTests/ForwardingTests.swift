import Testing
@testable import MinatoMedia
import MinatoWire

/// A router with one publisher transport and subscriber transports, driven on a simulated clock.
final class EngineHarness {
    let engine: MediaEngine
    var now: Nanoseconds = 1_000_000_000
    let router = RouterId(1)
    let publisher: TransportIndex
    var publisherSeq: UInt16 = 60_000
    var publisherTs: UInt32 = 4_000_000_000

    init(tuning: EngineTuning = EngineTuning()) {
        engine = MediaEngine(tuning: tuning)
        publisher = engine.addTransport(router: router, feedbackSsrc: 0xFEED)
    }

    func producer(kind: MediaKind = .video, ssrc: UInt32 = 0x1111, pt: UInt8 = 96,
                  codec: VideoCodecKind = .vp8, keyFrame: KeyFrameRequestMethod = .pli) throws -> ProducerId {
        try engine.addProducer(ProducerParameters(transport: publisher, kind: kind, ssrc: ssrc, payloadType: pt,
                                                  clockRate: kind == .video ? 90_000 : 48_000, codec: codec,
                                                  keyFrameRequest: keyFrame))
    }

    /// A VP8 producer (SSRC 0x1111, RTX 0x1112 with payload type 97) whose gaps the engine
    /// NACKs, and one consumer of it (0xB0B0, payload type 100) on a new subscriber transport;
    /// what that queued is drained. Returns the producer.
    @discardableResult
    func nackedVideoToOneSubscriber() throws -> ProducerId {
        let p = try engine.addProducer(ProducerParameters(transport: publisher, kind: .video, ssrc: 0x1111, rtxSsrc: 0x1112,
                                                          payloadType: 96, clockRate: 90_000, codec: .vp8,
                                                          keyFrameRequest: .pli, rtxPayloadType: 97, nack: true))
        _ = try consumer(p, on: subscriber(), ssrc: 0xB0B0, pt: 100)
        _ = drain()
        return p
    }

    func subscriber(router r: RouterId? = nil) -> TransportIndex {
        engine.addTransport(router: r ?? router, feedbackSsrc: 0xABCD)
    }

    func consumer(_ p: ProducerId, on t: TransportIndex, ssrc: UInt32, pt: UInt8 = 100) throws -> ConsumerId {
        try engine.addConsumer(ConsumerParameters(producer: p, transport: t, ssrc: ssrc, payloadType: pt,
                                                  extensionIds: .identity), now: now)
    }

    /// Sends one RTP packet from the publisher; returns what the engine queued, decoded.
    @discardableResult
    func send(ssrc: UInt32 = 0x1111, pt: UInt8 = 96, keyframe: Bool = false, payloadSize: Int = 100,
              advance: Nanoseconds = 33_000_000, tsStep: UInt32 = 3000) -> [Sent] {
        now &+= advance
        publisherSeq &+= 1
        publisherTs &+= tsStep
        var bytes = [UInt8](repeating: 0, count: 12 + payloadSize)
        bytes.withUnsafeMutableBytes { b in
            _ = RtpPacketView.writeHeader(into: b, payloadType: pt, sequenceNumber: publisherSeq,
                                          timestamp: publisherTs, ssrc: ssrc)
            b[12] = 0x10                     // VP8 descriptor: S=1, PID=0
            b[13] = keyframe ? 0x00 : 0x01   // VP8 payload header: P bit
        }
        bytes.withUnsafeMutableBytes { engine.handleRtp(from: publisher, packet: $0, now: now) }
        return drain()
    }

    func drain() -> [Sent] {
        var out: [Sent] = []
        for i in 0..<engine.transmitCount {
            let tx = engine.transmit(at: i)
            let bytes = [UInt8](UnsafeRawBufferPointer(start: tx.bytes, count: tx.length))
            out.append(Sent(transport: tx.transport, isRtcp: tx.isRtcp, bytes: bytes))
        }
        engine.clearTransmits()
        return out
    }

    struct Sent {
        let transport: TransportIndex
        let isRtcp: Bool
        let bytes: [UInt8]
        var rtp: (ssrc: UInt32, pt: UInt8, seq: UInt16, ts: UInt32)? {
            guard !isRtcp else { return nil }
            var copy = bytes
            return copy.withUnsafeMutableBytes { b in
                guard let v = RtpPacketView(b) else { return nil }
                return (v.ssrc, v.payloadType, v.sequenceNumber, v.timestamp)
            }
        }
        /// (packet type, format) of each RTCP packet in the compound.
        var rtcpKinds: [(UInt8, UInt8)] {
            guard isRtcp else { return [] }
            return bytes.withUnsafeBytes { b in
                var it = RtcpIterator(b)
                var kinds: [(UInt8, UInt8)] = []
                while let p = it.next() { kinds.append((p.packetType, p.countOrFormat)) }
                return kinds
            }
        }
        var isPli: Bool { rtcpKinds.contains { $0.0 == RtcpPacketType.payloadFeedback && $0.1 == 1 } }
        var isFir: Bool { rtcpKinds.contains { $0.0 == RtcpPacketType.payloadFeedback && $0.1 == 4 } }
    }
}

@Suite struct ForwardingTests {
    @Test func rewritesSsrcPayloadTypeSequenceAndTimestampPerConsumer() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber(), c = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0, pt: 100)
        _ = try h.consumer(p, on: c, ssrc: 0xC0C0, pt: 101)
        _ = h.drain()  // keyframe requests
        let first = h.send(keyframe: true)
        #expect(first.count == 2)
        let rb = try #require(first.first { $0.transport == b }?.rtp)
        let rc = try #require(first.first { $0.transport == c }?.rtp)
        #expect(rb.ssrc == 0xB0B0 && rb.pt == 100)
        #expect(rc.ssrc == 0xC0C0 && rc.pt == 101)
        // Across the publisher's 16-bit wrap the consumers' numbers stay continuous.
        var lastB = rb
        for _ in 0..<6000 {
            let out = h.send()
            let nb = try #require(out.first { $0.transport == b }?.rtp)
            #expect(nb.seq == lastB.seq &+ 1)
            #expect(nb.ts == lastB.ts &+ 3000)
            lastB = nb
        }
        #expect(h.engine.rtpPacketsQueued == 2 * 6001)
    }

    @Test func videoConsumerWaitsForKeyFrameAndAsksForOne() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        let requests = h.drain()
        #expect(requests.count == 1 && requests[0].isPli && requests[0].transport == h.publisher)
        #expect(h.send(keyframe: false).isEmpty)
        #expect(h.engine.drops(.waitingForKeyFrame) == 1)
        #expect(h.send(keyframe: true).count == 1)
        #expect(h.send(keyframe: false).count == 1)
    }

    @Test func audioIsForwardedAtOnce() throws {
        let h = EngineHarness()
        let p = try h.producer(kind: .audio, ssrc: 0x2222, pt: 111, codec: .other, keyFrame: .none)
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0, pt: 111)
        #expect(h.drain().isEmpty)
        let out = h.send(ssrc: 0x2222, pt: 111, advance: 20_000_000, tsStep: 960)
        #expect(out.count == 1 && out[0].rtp?.ssrc == 0xB0B0)
    }

    @Test func keyFrameRequestsAreThrottledPerProducer() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        #expect(h.drain().filter(\.isPli).count == 1)
        // Three more requests within 500 ms: none now, one when the interval ends.
        for _ in 0..<3 {
            h.now &+= 100_000_000
            h.engine.requestKeyFrame(p, now: h.now)
            #expect(h.drain().isEmpty)
        }
        h.now &+= 150_000_000  // 450 ms after the first
        h.engine.handleTimeout(now: h.now)
        #expect(h.drain().filter(\.isPli).isEmpty)
        h.now &+= 60_000_000   // 510 ms
        h.engine.handleTimeout(now: h.now)
        #expect(h.drain().filter(\.isPli).count == 1)
        h.now &+= 2_000_000_000
        h.engine.handleTimeout(now: h.now)
        #expect(h.drain().filter(\.isPli).isEmpty)
    }

    @Test func firIsUsedWhereOnlyFirIsNegotiated() throws {
        let h = EngineHarness()
        let p = try h.producer(keyFrame: .fir)
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        let out = h.drain()
        #expect(out.count == 1 && out[0].isFir && !out[0].isPli)
    }

    @Test func subscriberPliReachesThePublisher() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        _ = h.drain()
        h.now &+= 1_000_000_000
        var pli = [UInt8](repeating: 0, count: 64)
        let n = pli.withUnsafeMutableBytes { RtcpWriter.pli(into: $0, senderSsrc: 0x77, mediaSsrc: 0xB0B0) }
        pli.withUnsafeBytes { h.engine.handleRtcp(from: b, packet: UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: h.now) }
        let out = h.drain()
        #expect(out.count == 1 && out[0].isPli && out[0].transport == h.publisher)
    }

    @Test func pauseStopsForwardingAndResumeContinuesNumbering() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        _ = h.drain()
        let before = try #require(h.send(keyframe: true).first?.rtp)
        h.engine.setPaused(p, true, now: h.now)
        for _ in 0..<30 { #expect(h.send(keyframe: true).isEmpty) }
        #expect(h.engine.drops(.producerPaused) == 30)
        h.engine.setPaused(p, false, now: h.now)
        #expect(h.drain().filter(\.isPli).count == 1)
        #expect(h.send(keyframe: false).isEmpty)          // waits for the keyframe asked for
        let after = try #require(h.send(keyframe: true).first?.rtp)
        #expect(after.seq == before.seq &+ 1)              // no gap for the subscriber's jitter buffer
        // 32 frames of 33 ms passed: the timestamp moved by about that much time, not by 0.
        let elapsedTicks = after.ts &- before.ts
        #expect(elapsedTicks > 80_000 && elapsedTicks < 110_000)
    }

    @Test func consumersCannotCrossRouters() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let other = h.subscriber(router: RouterId(2))
        #expect(throws: MediaError.routerMismatch) { try h.consumer(p, on: other, ssrc: 0x5) }
    }

    @Test func unknownSsrcAndMalformedPacketsAreCountedAndDropped() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        #expect(h.send(ssrc: 0x9999, keyframe: true).isEmpty)
        #expect(h.engine.drops(.unknownSsrc) == 1)
        var junk: [UInt8] = [0x80, 0x60, 0x00]
        junk.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: h.now) }
        #expect(h.engine.drops(.malformedRtp) == 1)
        #expect(h.drain().isEmpty)
        #expect(h.send(pt: 97, keyframe: true).isEmpty)
        #expect(h.engine.drops(.unknownPayloadType) == 1)
    }

    @Test func removingTheProducerRemovesItsConsumers() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        #expect(h.engine.activeConsumerCount == 1)
        h.engine.removeProducer(p)
        #expect(h.engine.activeConsumerCount == 0 && h.engine.activeProducerCount == 0)
        #expect(h.send(keyframe: true).isEmpty)
        #expect(h.engine.drops(.unknownSsrc) == 1)
    }

    @Test func senderReportIsTranslatedIntoEachConsumersTimestampSpace() throws {
        let h = EngineHarness()
        let p = try h.producer()
        let b = h.subscriber()
        _ = try h.consumer(p, on: b, ssrc: 0xB0B0)
        _ = h.drain()
        let first = try #require(h.send(keyframe: true).first?.rtp)
        var sr = [UInt8](repeating: 0, count: 64)
        let n = sr.withUnsafeMutableBytes {
            RtcpWriter.senderReport(into: $0, ssrc: 0x1111, ntpTimestamp: 0x1234_5678_9ABC_DEF0,
                                    rtpTimestamp: h.publisherTs, packetCount: 1, octetCount: 100)
        }
        sr.withUnsafeBytes { h.engine.handleRtcp(from: h.publisher, packet: UnsafeRawBufferPointer(rebasing: $0[0..<n]), now: h.now) }
        let out = h.drain().filter { $0.isRtcp && $0.transport == b }
        let report = try #require(out.first)
        let (ssrc, ntp, rtp): (UInt32, UInt64, UInt32) = report.bytes.withUnsafeBytes { raw in
            var it = RtcpIterator(raw)
            let s = SenderReport(it.next()!)!
            return (s.ssrc, s.ntpTimestamp, s.rtpTimestamp)
        }
        #expect(ssrc == 0xB0B0 && ntp == 0x1234_5678_9ABC_DEF0 && rtp == first.ts)
    }

    @Test func receiverReportsGoToThePublisherEverySecondWhileRtpArrives() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        h.send(keyframe: true)
        let first = h.now
        for _ in 0..<9 { h.send(keyframe: true) }
        #expect(h.engine.nextDeadline == first + MediaEngine.reportInterval)
        h.engine.handleTimeout(now: h.now)                 // not due yet
        #expect(h.drain().isEmpty)
        h.now = first + MediaEngine.reportInterval
        h.engine.handleTimeout(now: h.now)
        let rr = h.drain().filter { $0.rtcpKinds.contains { $0.0 == RtcpPacketType.receiverReport } }
        #expect(rr.count == 1 && rr[0].transport == h.publisher)
        h.now &+= 500_000_000
        h.engine.handleTimeout(now: h.now)
        #expect(h.drain().isEmpty)
    }

    @Test func oversizePacketsAreDroppedUnderTheirOwnReason() throws {
        let h = EngineHarness()
        let p = try h.producer()
        _ = try h.consumer(p, on: h.subscriber(), ssrc: 0xB0B0)
        _ = h.drain()
        #expect(h.send(keyframe: true, payloadSize: MediaEngine.maxPacketLength - 12).count == 1)
        #expect(h.send(keyframe: true, payloadSize: MediaEngine.maxPacketLength - 11).isEmpty)
        #expect(h.engine.drops(.oversize) == 1 && h.engine.drops(.malformedRtp) == 0)
    }
}
