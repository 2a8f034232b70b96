internal import CNice
internal import CMinatoShims
internal import MinatoMedia
#if canImport(Glibc)
internal import Glibc
#endif

/// Reads the UDP sockets of a worker's established transports outside GLib: one epoll set,
/// watched by one GLib source, and `recvmmsg` into fixed buffers.
///
/// Why: GLib's loop polls every source it holds on every iteration, and libnice gives it one
/// source per socket. With hundreds of transports that polling costs more than the packets
/// (docs/architecture.md, "Reading established transports"). An epoll set reports only the
/// sockets that have input, and one `recvmmsg` reads a burst.
///
/// A transport moves here once it is connected on a plain UDP pair (`WebRtcTransport.refreshDirect`):
/// its agent's sockets are re-attached to `parking`, a GLib context nobody iterates, so libnice
/// no longer reads them; the worker reads the selected pair's socket from the epoll set and
/// answers the peer's ICE consent checks itself (`minato_stun_answer`). Anything ICE must decide
/// (a datagram from another address: the peer moved or checks another pair) hands the socket
/// back to libnice first. One per `WorkerCore`; lives on its thread.
final class DirectReceiver {
    /// Datagrams one `recvmmsg` reads, and the bytes each may have (a larger one is lost and
    /// counted: WebRTC peers keep datagrams under the path MTU).
    static let batch = 32
    static let capacity = 2048
    /// Ready sockets taken from epoll per loop iteration; the rest stay ready (level-triggered).
    static let maxReady = 256
    /// Batches read from one socket per iteration before moving on (fairness between transports).
    static let batchesPerSocket = 2

    let epoll: Int32
    /// A GLib context that is never iterated: where a direct transport's agent keeps its socket
    /// sources, so that GLib neither polls nor reads them.
    let parking: OpaquePointer
    let buffers: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let lengths: UnsafeMutablePointer<Int>
    let sources: UnsafeMutablePointer<sockaddr_storage>
    let arrivals: UnsafeMutablePointer<UInt64>
    let readyKeys: UnsafeMutablePointer<UInt64>
    /// A STUN response being built.
    let reply: UnsafeMutablePointer<UInt8>
    static let replyCapacity = 512
    private let storage: UnsafeMutableRawPointer
    /// Sockets in the set now.
    private(set) var count = 0
    /// Sockets handed back to libnice because of a datagram from another address, since the
    /// worker started.
    private(set) var handedBack: UInt64 = 0
    /// Consent checks answered here.
    var checksAnswered: UInt64 = 0

    /// The GLib source that watches `epoll` in the worker's context.
    private var watch: CallbackSource?

    /// nil when the kernel gives no epoll set (the worker then leaves every socket to libnice).
    init?() {
        let fd = minato_epoll_create()
        guard fd >= 0 else { return nil }
        guard let parking = g_main_context_new() else { close(fd); return nil }
        epoll = fd
        self.parking = parking
        storage = UnsafeMutableRawPointer.allocate(byteCount: Self.batch * Self.capacity, alignment: 16)
        buffers = .allocate(capacity: Self.batch)
        for i in 0..<Self.batch { buffers[i] = storage + i * Self.capacity }
        lengths = .allocate(capacity: Self.batch)
        lengths.initialize(repeating: 0, count: Self.batch)
        sources = .allocate(capacity: Self.batch)
        sources.initialize(repeating: sockaddr_storage(), count: Self.batch)
        arrivals = .allocate(capacity: Self.batch)
        arrivals.initialize(repeating: 0, count: Self.batch)
        readyKeys = .allocate(capacity: Self.maxReady)
        readyKeys.initialize(repeating: 0, count: Self.maxReady)
        reply = .allocate(capacity: Self.replyCapacity)
        reply.initialize(repeating: 0, count: Self.replyCapacity)
    }

    deinit {
        stop()
        close(epoll)
        g_main_context_unref(parking)
        storage.deallocate()
        buffers.deallocate()
        lengths.deallocate()
        sources.deallocate()
        arrivals.deallocate()
        readyKeys.deallocate()
        reply.deallocate()
    }

    /// Watches the epoll set from `context`: `ready` runs (with `owner`) in the iteration in
    /// which any socket of the set has input.
    func start(context: OpaquePointer, ready: @convention(c) (gpointer?) -> gboolean, owner: UnsafeMutableRawPointer) {
        watch = CallbackSource(context: context, callback: ready, owner: owner)
        if let watch { _ = g_source_add_unix_fd(watch.source, epoll, G_IO_IN) }
    }

    func stop() {
        watch?.destroy()
        watch = nil
    }

    /// The epoll key of a transport: its engine index (slot and generation), so that a key read
    /// after the transport closed (or its slot was reused) finds nothing.
    static func key(_ index: TransportIndex) -> UInt64 { UInt64(index.slot) | UInt64(index.generation) << 32 }

    /// Adds `fd` under `key`; false if the kernel refused.
    func add(fd: Int32, key: UInt64) -> Bool {
        guard minato_epoll_add(epoll, fd, key) == 0 else { return false }
        _ = minato_rx_timestamps(fd, 1)
        count += 1
        return true
    }

    /// Removes `fd` (before its socket goes back to libnice or is closed). `handBack`: because of
    /// a datagram ICE must see.
    func remove(fd: Int32, handBack: Bool) {
        if minato_epoll_remove(epoll, fd) == 0 { count = max(0, count - 1) }
        _ = minato_rx_timestamps(fd, 0)
        if handBack { handedBack &+= 1 }
    }

    /// Up to `maxReady` keys of sockets with input, into `readyKeys`.
    func ready() -> Int { Int(minato_epoll_ready(epoll, readyKeys, Int32(Self.maxReady))) }

    /// One `recvmmsg` on `fd` into the buffers: how many datagrams (0: none waiting or an error).
    func read(fd: Int32) -> Int {
        Int(max(0, minato_recv_batch(fd, buffers, Self.capacity, lengths, sources, arrivals, UInt32(Self.batch))))
    }
}

/// Answers ICE checks on a socket libnice no longer reads (`DirectReceiver`), with libnice's own
/// STUN library (`minato_stun_answer`): RFC 5389 messages with short-term credentials, USERNAME
/// "<our ufrag>:<theirs>", MESSAGE-INTEGRITY keyed with our password, FINGERPRINT.
enum IceCheckResponder {
    enum Outcome: Equatable {
        /// Send the `length` bytes written to the reply buffer: a success response (XOR-MAPPED-ADDRESS
        /// of the source), or a 487 role-conflict error to a peer that also claims to be controlled
        /// (an ICE-lite server always is). `nominates`: the request carried USE-CANDIDATE.
        case answer(length: Int, nominates: Bool)
        /// Valid STUN that needs no answer (an indication, a response).
        case ignore
        /// Not STUN, not for us, or not authentic: drop it.
        case invalid
    }

    static func answer(_ request: UnsafeRawBufferPointer, from: UnsafePointer<sockaddr_storage>,
                       ufrag: UnsafePointer<CChar>, pwd: UnsafePointer<CChar>,
                       into reply: UnsafeMutablePointer<UInt8>, capacity: Int) -> Outcome {
        guard let base = request.baseAddress else { return .invalid }
        var nominates: Int32 = 0
        let n = minato_stun_answer(base.assumingMemoryBound(to: UInt8.self), request.count, from, ufrag, pwd,
                                   reply, capacity, &nominates)
        if n < 0 { return .invalid }
        if n == 0 { return .ignore }
        return .answer(length: Int(n), nominates: nominates != 0)
    }
}
