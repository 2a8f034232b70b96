public import MinatoTransport
public import MinatoWire

/// A packet a subscription received, still SRTP-encrypted, borrowed for the duration of the
/// sink's call. Its RTP header (SSRC, sequence, timestamp, marker, payload type) is in clear.
public struct ReceivedSrtpPacket {
    public let buffer: UnsafeMutableRawBufferPointer
    let connection: ClientConnection

    @inline(__always) public var count: Int { buffer.count }
    /// The clear fixed header (`RtpPacketView.FixedHeader`), nil for fewer than 12 bytes or
    /// another RTP version.
    @inline(__always) public var header: RtpPacketView.FixedHeader? { RtpPacketView.FixedHeader(UnsafeRawBufferPointer(buffer)) }
    /// 0 when there is no header.
    @inline(__always) public var ssrc: UInt32 { header?.ssrc ?? 0 }
    @inline(__always) public var sequenceNumber: UInt16 { header?.sequenceNumber ?? 0 }
    @inline(__always) public var payloadType: UInt8 { header?.payloadType ?? 0 }
    @inline(__always) public var marker: Bool { header?.marker ?? false }

    /// Decrypts in place and returns the clear RTP packet, or nil if authentication fails.
    /// Decrypting only some packets is fine (SRTP's replay window tolerates the gaps).
    @inline(__always)
    public func decrypt() -> UnsafeMutableRawBufferPointer? {
        guard let n = connection.unprotectRtp(buffer) else { return nil }
        return UnsafeMutableRawBufferPointer(rebasing: buffer[0..<n])
    }
}

/// Receives a subscription's packets on the client worker's thread.
public protocol RtpSink: AnyObject {
    func receive(_ packet: ReceivedSrtpPacket)
}

/// Sends one source's packets on a connection: polls the source on the worker, writes the
/// SSRC, protects in place, sends. One preallocated buffer and no Swift allocation per packet
/// (Debian's NSS-based libsrtp2 still mallocs inside each `srtp_protect`).
/// Worker-confined. (The room API makes these; use one directly to send on a bare
/// `ClientConnection`, as the benchmark does against other servers.)
public final class OutboundStream<Source: RtpSource> {
    public let source: Source
    public let ssrc: UInt32
    unowned let connection: ClientConnection
    private let buffer: UnsafeMutableRawBufferPointer
    private var timer: UInt32?
    public var enabled = true
    public private(set) var packetsSent: UInt64 = 0

    public init(source: Source, ssrc: UInt32, connection: ClientConnection) {
        self.source = source
        self.ssrc = ssrc
        self.connection = connection
        buffer = .allocate(byteCount: 1500 + ClientConnection.trailerRoom, alignment: 8)
    }

    deinit { buffer.deallocate() }

    public func start(on core: ClientWorkerCore) {
        guard timer == nil else { return }
        let clearRoom = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<1500])
        timer = core.every(milliseconds: source.pollIntervalMilliseconds) { [unowned self] in
            guard self.enabled, self.connection.state == .connected else { return true }
            self.source.poll(now: monotonicNow(), buffer: clearRoom) { length in
                guard length >= 12, length <= 1500, let base = self.buffer.baseAddress,
                      let packet = RtpPacketView(UnsafeMutableRawBufferPointer(rebasing: self.buffer[0..<length])) else { return }
                packet.ssrc = self.ssrc
                if self.connection.sendRtp(base, length: length) { self.packetsSent &+= 1 }
            }
            return true
        }
    }

    public func stop(on core: ClientWorkerCore) {
        if let timer { core.cancel(timer) }
        timer = nil
    }

    /// RTCP from the server for this stream: a PLI or FIR asks the source for a key frame.
    public func feedback(_ rtcp: UnsafeRawBufferPointer) {
        var it = RtcpIterator(rtcp)
        while let p = it.next() {
            if let pli = PictureLossIndication(p), pli.mediaSsrc == ssrc { source.requestKeyFrame() }
            else if let fir = FullIntraRequest(p) {
                for i in 0..<fir.entryCount where fir.entry(at: i)?.ssrc == ssrc { source.requestKeyFrame() }
            }
        }
    }
}

/// Hands each received packet on a connection to the sink of its SSRC (linear scan: a
/// connection carries a handful of streams). Worker-confined.
public final class InboundDemux {
    private var ssrcs = ContiguousArray<UInt32>()
    private var sinks = ContiguousArray<any RtpSink>()
    /// Per SSRC (same index): the extended highest sequence number and the first one (-1: none
    /// yet), for the member's loss estimate (`expected` / `received`).
    private var highest = ContiguousArray<Int64>()
    private var first = ContiguousArray<Int64>()
    /// RTP packets that reached a sink (`expectedTotal`: the packets the sequence numbers say
    /// were sent).
    public private(set) var received: UInt64 = 0
    private var expected: UInt64 {
        var n: UInt64 = 0
        for i in highest.indices where first[i] >= 0 { n &+= UInt64(clamping: highest[i] - first[i] + 1) }
        return n
    }
    /// RTCP received on this connection (clear), e.g. for a publisher's PLI handling.
    public var onRtcp: ((UnsafeRawBufferPointer) -> Void)?
    public private(set) var unmatched: UInt64 = 0

    public init() {}

    /// Takes over the connection's `onPacket`. The connection keeps the demux while it lives
    /// (its `close` lets go): a member dropped without `leave()` frees its demux while libnice
    /// may still deliver to the connection.
    public func attach(to connection: ClientConnection) {
        connection.onPacket = { [self, unowned connection] buffer, isRtcp in
            if isRtcp {
                guard let onRtcp = self.onRtcp, let n = connection.unprotectRtcp(buffer) else { return }
                onRtcp(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                return
            }
            let packet = ReceivedSrtpPacket(buffer: buffer, connection: connection)
            let ssrc = packet.ssrc
            var i = 0
            while i < self.ssrcs.count {
                if self.ssrcs[i] == ssrc {
                    self.count(packet.sequenceNumber, at: i)
                    self.sinks[i].receive(packet)
                    return
                }
                i += 1
            }
            self.unmatched &+= 1
        }
    }

    public func add(ssrc: UInt32, sink: any RtpSink) {
        if let i = ssrcs.firstIndex(of: ssrc) { sinks[i] = sink } else {
            ssrcs.append(ssrc); sinks.append(sink); highest.append(-1); first.append(-1)
        }
    }

    public func remove(ssrc: UInt32) {
        guard let i = ssrcs.firstIndex(of: ssrc) else { return }
        // What it counted stays in `received` and `expected`'s history: fold it into a base.
        if first[i] >= 0 { removedExpected &+= UInt64(clamping: highest[i] - first[i] + 1) }
        ssrcs.remove(at: i)
        sinks.remove(at: i)
        highest.remove(at: i)
        first.remove(at: i)
    }

    /// `expected` of the SSRCs removed so far (so that `expected` never goes back).
    private var removedExpected: UInt64 = 0
    /// Packets expected on this connection so far, every SSRC it ever had.
    public var expectedTotal: UInt64 { removedExpected &+ expected }

    /// Extends `seq` against the SSRC's highest (RFC 3550 A.1, without the probation) and counts it.
    @inline(__always)
    private func count(_ seq: UInt16, at i: Int) {
        received &+= 1
        let top = highest[i]
        guard top >= 0 else {
            highest[i] = Int64(seq)
            first[i] = Int64(seq)
            return
        }
        let delta = Int64(Int16(truncatingIfNeeded: seq &- UInt16(truncatingIfNeeded: top)))
        if delta > 0 { highest[i] = top + delta }
    }
}

/// A sink that decrypts every packet and yields a copy (for bots and tests; allocates per
/// packet, so not for load). `packets` ends when the subscription ends.
public final class PacketCollector: RtpSink, Sendable {
    /// One decrypted packet, its fields read by `RtpPacketView` when it arrived.
    public struct Packet: Sendable {
        public let bytes: [UInt8]
        public let header: RtpPacketView.FixedHeader
        /// Where the payload sits in `bytes` (after the header, CSRCs and extension; before padding).
        public let payloadRange: Range<Int>
        public var payloadType: UInt8 { header.payloadType }
        public var sequenceNumber: UInt16 { header.sequenceNumber }
        public var marker: Bool { header.marker }
        /// The RTP payload.
        public var payload: ArraySlice<UInt8> { bytes[payloadRange] }

        /// nil unless `packet` is a well-formed RTP packet (`RtpPacketView.init?`).
        init?(_ packet: UnsafeMutableRawBufferPointer) {
            guard let view = RtpPacketView(packet), let header = RtpPacketView.FixedHeader(UnsafeRawBufferPointer(packet))
            else { return nil }
            self.bytes = Array(packet)
            self.header = header
            self.payloadRange = view.headerLength ..< view.headerLength + view.payloadLength
        }
    }
    public let packets: AsyncStream<Packet>
    private let continuation: AsyncStream<Packet>.Continuation

    public init(bufferingNewest limit: Int = 4096) {
        (packets, continuation) = AsyncStream<Packet>.makeStream(bufferingPolicy: .bufferingNewest(limit))
    }

    public func receive(_ packet: ReceivedSrtpPacket) {
        guard let clear = packet.decrypt(), let p = Packet(clear) else { return }
        continuation.yield(p)
    }

    func finish() { continuation.finish() }
}
