internal import CNice
#if canImport(Glibc)
internal import Glibc
#endif
// usrsctp.h includes <sys/socket.h> too, and which module clang credits with its `SOCK_DGRAM`
// depends on build order: importing both keeps it in scope here (a clean build failed without).
internal import CUsrsctp
public import MinatoMedia
internal import MinatoWire
internal import Logging

/// A media worker's packet path without its thread and without libnice, for the micro
/// benchmarks (bench/Benchmarks): one publisher transport and `fanOut` subscriber transports,
/// all keyed with real SRTP (AEAD_AES_128_GCM), the subscribers sending with `sendmmsg` on a
/// loopback UDP socket to a local sink that is never read (the kernel drops what overflows it;
/// the sends succeed). Everything runs on the calling thread; not for use inside a server.
public final class WorkerBenchmarkRig {
    private let core: WorkerCore
    private let inbox: MediaWorker.Inbox
    private let context: OpaquePointer
    private let publisher: WebRtcTransport
    /// The publisher's own sender (what a browser would encrypt with).
    private let publisherSender: SrtpSession
    private let sendFd: Int32
    private let sinkFd: Int32
    private var sequence: UInt16 = 1
    private var timestamp: UInt32 = 90_000
    private let clear: UnsafeMutableRawBufferPointer
    /// The received datagram (protected by the publisher, decrypted in place by the worker).
    private let datagram: UnsafeMutableRawBufferPointer
    public static let ssrc: UInt32 = 0x1111

    public init(runtime: CryptoRuntime, fanOut: Int, packetSize: Int = 1200) throws {
        let context = g_main_context_new()!
        let (_, sink) = AsyncStream<WorkerEvent>.makeStream()
        let core = WorkerCore(context: context, runtime: runtime, ice: IceConfiguration(), events: sink,
                              transportTimeout: 10_000_000_000, logger: Logger(label: "bench"))
        // A sink socket on 127.0.0.1 and a sender (minato_send_batch sends with MSG_DONTWAIT).
        let sinkFd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        let sendFd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { a in
            a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(sinkFd, sa, length) == 0 && getsockname(sinkFd, sa, &length) == 0
            }
        }
        guard sinkFd >= 0, sendFd >= 0, bound else { throw WorkerError.transport("benchmark sink socket") }
        var peer = sockaddr_storage()
        withUnsafeMutableBytes(of: &peer) { p in withUnsafeBytes(of: &address) { p.copyMemory(from: $0) } }
        let k1 = [UInt8](repeating: 0x11, count: 28), k2 = [UInt8](repeating: 0x22, count: 28)
        let router = RouterId(1)
        func transport(_ n: UInt64, local: [UInt8], remote: [UInt8]) throws -> WebRtcTransport {
            let index = core.engine.addTransport(router: router, feedbackSsrc: UInt32(n))
            let secure = try SecureTransport(runtime: runtime, now: monotonicNow(), timeouts: core.timeouts)
            let t = WebRtcTransport(id: TransportId(n), index: index, worker: core, secure: secure)
            guard t.connectDirectly(profile: .aeadAes128Gcm, local: local, remote: remote,
                                    sender: DatagramSender(fd: sendFd, peer: peer, peerLength: UInt32(length))) == .connected
            else { throw WorkerError.transport("benchmark SRTP keys") }
            core.adopt(t)
            return t
        }
        let publisher = try transport(1, local: k2, remote: k1)
        let producer = try core.engine.addProducer(ProducerParameters(
            transport: publisher.index, kind: .video, ssrc: Self.ssrc, payloadType: 96, clockRate: 90_000, codec: .vp8,
            keyFrameRequest: .pli))
        for i in 0..<fanOut {
            let t = try transport(UInt64(100 + i), local: k1, remote: k2)
            _ = try core.engine.addConsumer(ConsumerParameters(producer: producer, transport: t.index, ssrc: UInt32(0x2000 + i),
                                                               payloadType: 100, extensionIds: .identity), now: monotonicNow())
        }
        core.engine.clearTransmits()
        core.startTimer()
        self.context = context
        self.inbox = MediaWorker.Inbox(context: context)
        self.core = core
        self.publisher = publisher
        self.publisherSender = try SrtpSession(profile: .aeadAes128Gcm, localKeyAndSalt: k1, remoteKeyAndSalt: k2)
        self.sendFd = sendFd
        self.sinkFd = sinkFd
        self.packetSize = min(packetSize, MediaEngine.maxPacketLength)
        // A VP8 keyframe packet of `packetSize` bytes.
        clear = .allocate(byteCount: MediaEngine.slotSize, alignment: 16)
        clear.initializeMemory(as: UInt8.self, repeating: 0)
        datagram = .allocate(byteCount: MediaEngine.slotSize, alignment: 16)
        datagram.initializeMemory(as: UInt8.self, repeating: 0)
        _ = RtpPacketView.writeHeader(into: clear, payloadType: 96, sequenceNumber: 1, timestamp: timestamp, ssrc: Self.ssrc)
        clear[12] = 0x10
        clear[13] = 0x00
    }

    private let packetSize: Int

    deinit {
        core.stopTimer()
        g_main_context_unref(context)
        close(sendFd)
        close(sinkFd)
        clear.deallocate()
        datagram.deallocate()
    }

    /// One main-loop iteration for one received datagram, as the worker runs it: the publisher's
    /// packet (encrypted here first, as its sender would) is decrypted in place, routed to every
    /// consumer, protected per subscriber and sent (`sendmmsg`), then the inbox and the timer.
    /// Returns the RTP packets the worker has sent so far.
    @discardableResult
    public func receiveOneDatagram() -> UInt64 {
        sequence &+= 1
        timestamp &+= 3000
        clear.storeBytes(of: sequence.bigEndian, toByteOffset: 2, as: UInt16.self)
        clear.storeBytes(of: timestamp.bigEndian, toByteOffset: 4, as: UInt32.self)
        guard let base = datagram.baseAddress, let source = clear.baseAddress else { return 0 }
        base.copyMemory(from: source, byteCount: packetSize)
        guard let n = publisherSender.protectRtp(base, length: packetSize) else { return 0 }
        core.received(UnsafeMutableRawBufferPointer(start: base, count: n), on: publisher)
        core.endOfIteration(inbox)
        return core.rtpPacketsForwarded
    }

    /// The send half alone: the engine routes one clear packet (copy + header rewrite per
    /// consumer) and the worker flushes (srtp_protect in place, chains, one `sendmmsg` per
    /// subscriber, counts).
    public func routeAndFlush() {
        sequence &+= 1
        timestamp &+= 3000
        clear.storeBytes(of: sequence.bigEndian, toByteOffset: 2, as: UInt16.self)
        clear.storeBytes(of: timestamp.bigEndian, toByteOffset: 4, as: UInt32.self)
        core.engine.handleRtp(from: publisher.index, packet: UnsafeMutableRawBufferPointer(rebasing: clear[0..<packetSize]),
                              now: monotonicNow())
        core.flush()
    }

    /// RTP packets sent and dropped so far (by reason name), for a benchmark's sanity check.
    public var sent: UInt64 { core.rtpPacketsForwarded }
    public var drops: [String: UInt64] { core.counters.drops.filter { $0.value > 0 } }
}
