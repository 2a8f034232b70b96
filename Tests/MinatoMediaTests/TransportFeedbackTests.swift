import Testing
@testable import MinatoMedia
import MinatoWire

/// Transport-wide feedback to a publisher: every packet carrying the negotiated sequence
/// number extension is reported, received or not, with its arrival time, every 50 ms.
@Suite struct PublisherFeedbackTests {
    static let twccId: UInt8 = 3

    /// A VP8 packet with a transport-wide sequence number element.
    static func packet(ssrc: UInt32, seq: UInt16, transportSequence: UInt16) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: 12)
        header.withUnsafeMutableBytes { b in
            _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: seq, timestamp: 1000, ssrc: ssrc)
        }
        header[0] |= 0x10
        header += [0xBE, 0xDE, 0, 1, twccId << 4 | 1, UInt8(transportSequence >> 8), UInt8(transportSequence & 0xFF), 0]
        return header + [0x10, 0x01, 0x55]
    }

    static func feedback(_ sent: [EngineHarness.Sent]) -> [(base: UInt16, reference: Int32, arrivals: [(UInt16, TransportFeedback.Arrival)])] {
        sent.filter(\.isRtcp).flatMap { s in
            s.bytes.withUnsafeBytes { b in
                var out: [(UInt16, Int32, [(UInt16, TransportFeedback.Arrival)])] = []
                var it = RtcpIterator(b)
                while let p = it.next() {
                    if let f = TransportFeedback(p) { out.append((f.baseSequence, f.referenceTime, f.map { ($0.sequence, $0.arrival) })) }
                }
                return out
            }
        }
    }

    /// The worker asks the kernel for a packet's arrival time only where it is recorded: on a
    /// transport whose publication negotiated the transport-wide sequence number.
    @Test func arrivalsAreRecordedOnlyWhereTransportWideFeedbackWasNegotiated() throws {
        let h = EngineHarness()
        #expect(!h.engine.recordsArrivals(on: h.publisher))
        _ = try h.producer(kind: .audio, ssrc: 0x2222, pt: 111, keyFrame: .none)
        #expect(!h.engine.recordsArrivals(on: h.publisher))
        var params = ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0x1111, payloadType: 96, clockRate: 90_000,
                                        codec: .vp8, keyFrameRequest: .pli)
        params.transportSequenceExtensionId = Self.twccId
        _ = try h.engine.addProducer(params)
        #expect(h.engine.recordsArrivals(on: h.publisher))
        #expect(!h.engine.recordsArrivals(on: h.engine.addTransport(router: h.router, feedbackSsrc: 0xBEEF)))
        h.engine.removeTransport(h.publisher)
        #expect(!h.engine.recordsArrivals(on: h.publisher))
    }

    @Test func arrivalsAndLossesAreReportedEveryFiftyMilliseconds() throws {
        let h = EngineHarness()
        var params = ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0x1111, payloadType: 96, clockRate: 90_000,
                                        codec: .vp8, keyFrameRequest: .pli)
        params.transportSequenceExtensionId = Self.twccId
        _ = try h.engine.addProducer(params)
        h.now = 64_000_000 * 100                                      // a whole reference-time unit
        // Sequence numbers 65534...3 wrap; 1 is lost; 2 arrives 1 ms after 0, 3 at the same time as 2.
        let plan: [(UInt16, Nanoseconds)] = [(65534, 0), (65535, 250_000), (0, 500_000), (2, 1_500_000), (3, 1_500_000)]
        for (i, (ts, at)) in plan.enumerated() {
            var bytes = Self.packet(ssrc: 0x1111, seq: UInt16(i), transportSequence: ts)
            bytes.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: h.now + at) }
        }
        _ = h.drain()
        #expect(h.engine.nextDeadline == h.now + 50_000_000)
        h.engine.handleTimeout(now: h.now + 50_000_000)
        let reports = Self.feedback(h.drain())
        #expect(reports.count == 1)
        let r = try #require(reports.first)
        #expect(r.base == 65534 && r.reference == 100)
        #expect(r.arrivals.map(\.0) == [65534, 65535, 0, 1, 2, 3])
        #expect(r.arrivals.map(\.1) == [.init(delta: 0), .init(delta: 1), .init(delta: 1), .notReceived, .init(delta: 4), .init(delta: 0)])
        // Nothing new: no report, no deadline. The next packet starts after the last reported.
        #expect(h.engine.nextDeadline == nil || h.engine.nextDeadline! > h.now + 50_000_000)
        var late = Self.packet(ssrc: 0x1111, seq: 9, transportSequence: 4)
        late.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: h.now + 60_000_000) }
        h.engine.handleTimeout(now: h.now + 110_000_000)
        let next = Self.feedback(h.drain())
        #expect(next.map(\.base) == [4])
        #expect(next.first?.arrivals.count == 1)
    }

    @Test("packets read together after a stall are reported at their kernel arrival times, not the read time")
    func kernelArrivalTimesKeepThePublishersSpacing() throws {
        let h = EngineHarness()
        var params = ProducerParameters(transport: h.publisher, kind: .video, ssrc: 0x1111, payloadType: 96, clockRate: 90_000,
                                        codec: .vp8, keyFrameRequest: .pli)
        params.transportSequenceExtensionId = Self.twccId
        _ = try h.engine.addProducer(params)
        h.now = 64_000_000 * 100
        // Three packets that reached the host 1 ms apart, all read by the worker 40 ms later.
        let readAt = h.now + 40_000_000
        for (i, at) in [Nanoseconds(0), 1_000_000, 2_000_000].enumerated() {
            var bytes = Self.packet(ssrc: 0x1111, seq: UInt16(i), transportSequence: UInt16(10 + i))
            bytes.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: readAt, arrival: h.now + at) }
        }
        // A fourth without a kernel time (0): its read time stands for it.
        var last = Self.packet(ssrc: 0x1111, seq: 3, transportSequence: 13)
        last.withUnsafeMutableBytes { h.engine.handleRtp(from: h.publisher, packet: $0, now: readAt) }
        _ = h.drain()
        h.engine.handleTimeout(now: readAt + 50_000_000)
        let r = try #require(Self.feedback(h.drain()).first)
        #expect(r.reference == 100, "the first arrival, not the read time, is the reference")
        // 1 ms = 4 ticks of 250 µs; the fourth arrived 38 ms after the third (152 ticks).
        #expect(r.arrivals.map(\.1) == [.init(delta: 0), .init(delta: 4), .init(delta: 4), .init(delta: 152)])
    }
}
