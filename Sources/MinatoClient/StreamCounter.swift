internal import MinatoTransport
internal import MinatoWire

/// A sink that counts every packet of one stream from its clear RTP header (no decryption)
/// and decrypts one packet in `sampleEvery` to read the sender's `PayloadStamp`: send time
/// (latency, sender and receiver on the same CLOCK_MONOTONIC) and the source's counter.
/// Confined to the worker thread (hence `@unchecked Sendable`: it may be handed around, but
/// read it only inside `Context.perform`). Allocation-free per packet until
/// `latencies` outgrows the capacity reserved at init.
public final class StreamCounter: RtpSink, @unchecked Sendable {
    public struct Snapshot: Sendable {
        public var packets: UInt64
        public var bytes: UInt64
        /// Sequence numbers spanned (highest - first + 1, extended across wraps): what a
        /// loss-free stream would have delivered in the window.
        public var expected: UInt64
        public var sampled: UInt64
        public var decryptFailures: UInt64
        public var stampsRead: UInt64
        public var latenciesNs: [UInt64]
        public var firstPacketAt: UInt64?
    }

    public let sampleEvery: UInt64
    private var packets: UInt64 = 0
    private var bytes: UInt64 = 0
    private var firstSeq: Int64 = -1
    private var highestSeq: Int64 = -1
    private var cycles: Int64 = 0
    private var lastSeq: UInt16 = 0
    private var sampled: UInt64 = 0
    private var decryptFailures: UInt64 = 0
    private var stampsRead: UInt64 = 0
    private var latencies: [UInt64] = []
    private var firstPacketAt: UInt64?
    private let latencyCapacity: Int

    public init(sampleEvery: Int = 10, latencyCapacity: Int = 1 << 16) {
        self.sampleEvery = UInt64(max(1, sampleEvery))
        self.latencyCapacity = latencyCapacity
        latencies.reserveCapacity(latencyCapacity)
    }

    public func receive(_ packet: ReceivedSrtpPacket) {
        packets &+= 1
        bytes &+= UInt64(packet.count)
        let seq = packet.sequenceNumber
        if firstSeq < 0 {
            firstSeq = Int64(seq)
            highestSeq = Int64(seq)
            lastSeq = seq
            firstPacketAt = monotonicNow()
        } else {
            // Extend the 16-bit sequence number (RFC 3550 A.1 style, forward jumps < 32768).
            let delta = seq &- lastSeq
            if delta < 0x8000 {
                if seq < lastSeq { cycles += 1 }
                lastSeq = seq
                let ext = cycles << 16 | Int64(seq)
                if ext > highestSeq { highestSeq = ext }
            }
        }
        guard packets % sampleEvery == 0 else { return }
        sampled &+= 1
        guard let clear = packet.decrypt() else { decryptFailures &+= 1; return }
        guard let rtp = RtpPacketView(clear) else { return }
        let payload = UnsafeRawBufferPointer(rtp.payload)
        guard let stamp = PayloadStamp.read(payload, offset: 1) ?? PayloadStamp.read(payload, offset: 4) else { return }
        stampsRead &+= 1
        let now = monotonicNow()
        if latencies.count < latencyCapacity, now >= stamp.sentAt { latencies.append(now - stamp.sentAt) }
    }

    /// Starts a new measuring window (counts and latencies from now on).
    public func resetWindow() {
        packets = 0; bytes = 0; firstSeq = -1; highestSeq = -1; cycles = 0
        sampled = 0; decryptFailures = 0; stampsRead = 0
        latencies.removeAll(keepingCapacity: true)
    }

    public func snapshot() -> Snapshot {
        Snapshot(packets: packets, bytes: bytes, expected: firstSeq < 0 ? 0 : UInt64(highestSeq - firstSeq + 1),
                 sampled: sampled, decryptFailures: decryptFailures, stampsRead: stampsRead,
                 latenciesNs: latencies, firstPacketAt: firstPacketAt)
    }
}
