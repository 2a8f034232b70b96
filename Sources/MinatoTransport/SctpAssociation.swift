internal import CUsrsctp
// <sys/socket.h> is included by usrsctp.h, libnice's agent.h and the shims' header as well as
// by Glibc, and clang credits its names (SOCK_STREAM) to whichever module it built first, which
// differs between builds (the fuzz build lost SOCK_STREAM here): every such module is imported.
internal import CNice
internal import CMinatoShims
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// usrsctp, once per process, without its threads (`usrsctp_init_nothreads`): no timer thread
/// and no raw sockets. Packets come in through `usrsctp_conninput` (DTLS application records)
/// and go out through `sctpOutput`, which only queues them in the association's `SctpOutbox`:
/// the worker that owns the association writes them into DTLS on its own thread. Timers run
/// when a worker calls `advanceTimers` (every worker with an association does, from its own
/// timer): the process-wide clock of usrsctp moves by the time since the last call, whoever
/// makes it, so a timer of one worker's association may fire on another worker's thread; its
/// output then waits in the outbox until the owner's next tick (`SctpStack.tick`).
final class SctpStack: Sendable {
    static let shared = SctpStack()

    /// Outboxes by association address (the `sconn_addr` usrsctp hands back to `sctpOutput`).
    private let outboxes = Locked<[UInt: SctpOutbox]>([:])
    private let nextAddress = Atomic<UInt>(1)
    /// When usrsctp's clock was last advanced (monotonic ns), and the sub-millisecond rest.
    private let lastTimers = Locked<UInt64>(0)

    /// How often a worker with associations advances usrsctp's timers.
    static let tick: UInt64 = 10_000_000

    private init() {
        usrsctp_init_nothreads(0, sctpOutput, nil)
        // Inside DTLS: no ECN (the UDP header is not SCTP's), partial reliability and stream
        // reconfiguration on (lossy channels, closing a channel), SACKs after 20 ms at most.
        usrsctp_sysctl_set_sctp_ecn_enable(0)
        usrsctp_sysctl_set_sctp_pr_enable(1)
        usrsctp_sysctl_set_sctp_reconfig_enable(1)
        usrsctp_sysctl_set_sctp_nr_outgoing_streams_default(1024)
        usrsctp_sysctl_set_sctp_delayed_sack_time_default(20)
        usrsctp_sysctl_set_sctp_blackhole(2)
        // usrsctp's bound on chunks queued per association (512) refuses a burst of small
        // messages that a fast peer takes; the send buffer (`sendBufferBytes`) bounds them.
        usrsctp_sysctl_set_sctp_max_chunks_on_queue(65535)
    }

    func register() -> (UInt, SctpOutbox) {
        let address = nextAddress.wrappingAdd(1, ordering: .relaxed).oldValue
        let outbox = SctpOutbox()
        outboxes.withLock { $0[address] = outbox }
        return (address, outbox)
    }

    func unregister(_ address: UInt) { _ = outboxes.withLock { $0.removeValue(forKey: address) } }

    func outbox(_ address: UInt) -> SctpOutbox? { outboxes.withLock { $0[address] } }

    /// Runs usrsctp's timers for the time passed since the last call (by any worker).
    func advanceTimers(now: UInt64) {
        let elapsed: UInt32 = lastTimers.withLock { last in
            if last == 0 || now <= last { if last == 0 { last = now }; return 0 }
            let ms = (now - last) / 1_000_000
            guard ms > 0 else { return 0 }
            last &+= ms * 1_000_000
            return UInt32(clamping: ms)
        }
        if elapsed > 0 { usrsctp_handle_timers(elapsed) }
    }
}

/// SCTP packets usrsctp wrote for one association, waiting for its worker (any thread may
/// append; the owner takes). Bounded: past `maxBytes` a packet is dropped (counted); SCTP
/// retransmits what matters.
final class SctpOutbox: Sendable {
    static let maxBytes = 4 << 20
    private struct State { var packets: [[UInt8]] = []; var bytes = 0; var dropped: UInt64 = 0 }
    private let state = Locked(State())

    func append(_ packet: UnsafeRawBufferPointer) {
        state.withLock { s in
            guard s.bytes + packet.count <= Self.maxBytes else { s.dropped &+= 1; return }
            s.packets.append(Array(packet))
            s.bytes += packet.count
        }
    }

    func take() -> [[UInt8]] {
        state.withLock { s in
            let p = s.packets
            s.packets.removeAll(keepingCapacity: true)
            s.bytes = 0
            return p
        }
    }

    var isEmpty: Bool { state.withLock { $0.packets.isEmpty } }
    var dropped: UInt64 { state.withLock { $0.dropped } }
}

/// usrsctp's output callback: queue the packet for the association's owner.
private func sctpOutput(_ address: UnsafeMutableRawPointer?, _ buffer: UnsafeMutableRawPointer?, _ length: Int,
                        _ tos: UInt8, _ setDf: UInt8) -> Int32 {
    guard let buffer, let outbox = SctpStack.shared.outbox(UInt(bitPattern: address)) else { return 0 }
    outbox.append(UnsafeRawBufferPointer(start: buffer, count: length))
    return 0
}

/// What an association read (`SctpAssociation.receive`).
enum SctpEvent {
    /// A complete user message on `stream` (the bytes are borrowed for the call).
    case message(stream: UInt16, ppid: UInt32, UnsafeRawBufferPointer)
    /// A message longer than the association's `maxMessageBytes`: discarded.
    case messageTooLarge(stream: UInt16)
    /// The association is up (SCTP_COMM_UP), or it ended (lost, shut down, could not start).
    case up
    case down
    /// The peer reset these incoming streams (it closed their data channels, RFC 8831 6.7).
    case incomingReset([UInt16])
}

/// One SCTP association (RFC 8831: one per DTLS connection) on an AF_CONN socket of usrsctp,
/// confined to its worker's thread. Packets from the peer go in with `input`; what usrsctp
/// sends waits in `outbox` for the owner to write into DTLS. Messages are read with `receive`
/// (non-blocking; the owner calls it after each input and each tick), sent with `send`.
///
/// The socket's send buffer is the association's bound on data waiting for the peer
/// (`sendBufferBytes`): `send` reports `.full` rather than growing it.
final class SctpAssociation {
    enum SendResult: Equatable { case sent, full, failed }

    let address: UInt
    let outbox: SctpOutbox
    private var socket: OpaquePointer?
    let localPort: UInt16
    private(set) var remotePort: UInt16
    private(set) var isUp = false
    private(set) var connectStarted = false
    let maxMessageBytes: Int
    /// A message being reassembled from partial reads, and whether the current one is discarded.
    private var partial: [UInt8] = []
    private var discarding = false
    private var readBuffer: [UInt8]

    init(localPort: UInt16 = 5000, remotePort: UInt16, maxMessageBytes: Int, sendBufferBytes: Int) throws {
        self.localPort = localPort
        self.remotePort = remotePort
        self.maxMessageBytes = maxMessageBytes
        readBuffer = [UInt8](repeating: 0, count: 65536)
        (address, outbox) = SctpStack.shared.register()
        usrsctp_register_address(UnsafeMutableRawPointer(bitPattern: address))
        guard let s = usrsctp_socket(AF_CONN, Int32(SOCK_STREAM.rawValue), Int32(IPPROTO_SCTP), nil, nil, 0, nil) else {
            usrsctp_deregister_address(UnsafeMutableRawPointer(bitPattern: address))
            SctpStack.shared.unregister(address)
            throw CryptoRuntime.Failure.openssl("usrsctp_socket failed (errno \(errno))")
        }
        socket = s
        _ = usrsctp_set_non_blocking(s, 1)
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = usrsctp_setsockopt(s, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        var on: Int32 = 1
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_RECVRCVINFO, &on, socklen_t(MemoryLayout<Int32>.size))
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        var reset = sctp_assoc_value(assoc_id: sctp_assoc_t(SCTP_ALL_ASSOC), assoc_value: UInt32(SCTP_ENABLE_RESET_STREAM_REQ))
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_ENABLE_STREAM_RESET, &reset, socklen_t(MemoryLayout<sctp_assoc_value>.size))
        var initmsg = sctp_initmsg(sinit_num_ostreams: 1024, sinit_max_instreams: 1024, sinit_max_attempts: 0, sinit_max_init_timeo: 0)
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_INITMSG, &initmsg, socklen_t(MemoryLayout<sctp_initmsg>.size))
        var sndbuf = Int32(clamping: sendBufferBytes)
        _ = usrsctp_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, socklen_t(MemoryLayout<Int32>.size))
        var rcvbuf = Int32(clamping: max(256 * 1024, 2 * maxMessageBytes))
        _ = usrsctp_setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, socklen_t(MemoryLayout<Int32>.size))
        // DTLS runs over a path of at most ~1200 bytes of payload (the DTLS MTU): no PMTU discovery.
        var params = sctp_paddrparams()
        params.spp_assoc_id = 0
        params.spp_flags = UInt32(SPP_PMTUD_DISABLE)
        params.spp_pathmtu = 1150
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_PEER_ADDR_PARAMS, &params, socklen_t(MemoryLayout<sctp_paddrparams>.size))
        // Heartbeats every 10 s: a data-only peer that sends no ICE consent checks is still heard
        // (the transport's consent timeout), and a dead one is found.
        params.spp_flags = UInt32(SPP_PMTUD_DISABLE | SPP_HB_ENABLE)
        params.spp_hbinterval = 10_000
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_PEER_ADDR_PARAMS, &params, socklen_t(MemoryLayout<sctp_paddrparams>.size))
        var rto = sctp_rtoinfo(srto_assoc_id: 0, srto_initial: 1000, srto_max: 10_000, srto_min: 200)
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_RTOINFO, &rto, socklen_t(MemoryLayout<sctp_rtoinfo>.size))
        for type in [SCTP_ASSOC_CHANGE, SCTP_STREAM_RESET_EVENT] {
            var event = sctp_event(se_assoc_id: sctp_assoc_t(SCTP_ALL_ASSOC), se_type: UInt16(type), se_on: 1)
            _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_EVENT, &event, socklen_t(MemoryLayout<sctp_event>.size))
        }
        var local = sockaddrConn(port: localPort)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { usrsctp_bind(s, UnsafeMutablePointer(mutating: $0), socklen_t(MemoryLayout<sockaddr_conn>.size)) }
        }
        guard bound == 0 else {
            close()
            throw CryptoRuntime.Failure.openssl("usrsctp_bind failed (errno \(errno))")
        }
    }

    deinit { close() }

    private func sockaddrConn(port: UInt16) -> sockaddr_conn {
        var a = sockaddr_conn()
        a.sconn_family = UInt16(AF_CONN)
        a.sconn_port = port.bigEndian
        a.sconn_addr = UnsafeMutableRawPointer(bitPattern: address)
        return a
    }

    /// Starts the association (both ends do: SCTP resolves the crossing INITs).
    func connect(remotePort: UInt16? = nil) {
        guard let s = socket, !connectStarted else { return }
        if let remotePort { self.remotePort = remotePort }
        connectStarted = true
        var remote = sockaddrConn(port: self.remotePort)
        _ = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { usrsctp_connect(s, UnsafeMutablePointer(mutating: $0), socklen_t(MemoryLayout<sockaddr_conn>.size)) }
        }
    }

    /// One SCTP packet from the peer (a DTLS application record).
    func input(_ packet: UnsafeRawBufferPointer) {
        guard socket != nil, let base = packet.baseAddress, packet.count > 0 else { return }
        usrsctp_conninput(UnsafeMutableRawPointer(bitPattern: address), base, packet.count, 0)
    }

    /// Sends one message on `stream`; `.full` when the send buffer has no room for it.
    func send(stream: UInt16, ppid: UInt32, _ bytes: UnsafeRawBufferPointer, unordered: Bool, maxRetransmits: UInt32?) -> SendResult {
        guard let s = socket, isUp else { return .failed }
        var spa = sctp_sendv_spa()
        spa.sendv_flags = UInt32(SCTP_SEND_SNDINFO_VALID)
        spa.sendv_sndinfo.snd_sid = stream
        spa.sendv_sndinfo.snd_ppid = ppid.bigEndian
        spa.sendv_sndinfo.snd_flags = UInt16(SCTP_EOR) | (unordered ? UInt16(SCTP_UNORDERED) : 0)
        if let n = maxRetransmits {
            spa.sendv_flags |= UInt32(SCTP_SEND_PRINFO_VALID)
            spa.sendv_prinfo.pr_policy = UInt16(SCTP_PR_SCTP_RTX)
            spa.sendv_prinfo.pr_value = n
        }
        // An empty message goes out as one byte with an "empty" PPID (RFC 8831 6.6).
        var zero: UInt8 = 0
        let n: Int = withUnsafeMutablePointer(to: &zero) { z in
            let base = bytes.count > 0 ? bytes.baseAddress : UnsafeRawPointer(z)
            return usrsctp_sendv(s, base, max(1, bytes.count), nil, 0, &spa, socklen_t(MemoryLayout<sctp_sendv_spa>.size),
                                 UInt32(SCTP_SENDV_SPA), 0)
        }
        if n >= 0 { return .sent }
        return errno == EWOULDBLOCK || errno == EAGAIN || errno == ENOBUFS ? .full : .failed
    }

    /// Resets our outgoing `streams` (closes their data channels, RFC 8831 6.7).
    func resetOutgoing(_ streams: [UInt16]) {
        guard let s = socket, isUp, !streams.isEmpty else { return }
        let size = MemoryLayout<sctp_reset_streams>.size + streams.count * MemoryLayout<UInt16>.size
        let raw = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { raw.deallocate() }
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        let r = raw.assumingMemoryBound(to: sctp_reset_streams.self)
        r.pointee.srs_flags = UInt16(SCTP_STREAM_RESET_OUTGOING)
        r.pointee.srs_number_streams = UInt16(clamping: streams.count)
        let list = (raw + MemoryLayout<sctp_reset_streams>.size).assumingMemoryBound(to: UInt16.self)
        for (i, id) in streams.enumerated() { list[i] = id }
        _ = usrsctp_setsockopt(s, Int32(IPPROTO_SCTP), SCTP_RESET_STREAMS, raw, socklen_t(size))
    }

    /// Reads everything waiting (messages and notifications), in order.
    func receive(_ handle: (SctpEvent) -> Void) {
        guard let s = socket else { return }
        while true {
            var info = sctp_rcvinfo()
            var infoLength = socklen_t(MemoryLayout<sctp_rcvinfo>.size)
            var infoType: UInt32 = 0
            var flags: Int32 = 0
            var from = sockaddr_conn()
            var fromLength = socklen_t(MemoryLayout<sockaddr_conn>.size)
            let n = readBuffer.withUnsafeMutableBytes { buf in
                withUnsafeMutablePointer(to: &from) { f in
                    f.withMemoryRebound(to: sockaddr.self, capacity: 1) { fp in
                        usrsctp_recvv(s, buf.baseAddress, buf.count, fp, &fromLength, &info, &infoLength, &infoType, &flags)
                    }
                }
            }
            guard n > 0 else { return }
            let complete = flags & Int32(MSG_EOR) != 0
            if flags & Int32(MSG_NOTIFICATION) != 0 {
                guard complete else { continue }   // notifications are small: never split here
                readBuffer.withUnsafeBytes { notification(UnsafeRawBufferPointer(rebasing: $0[0..<n]), handle) }
                continue
            }
            let stream = info.rcv_sid, ppid = UInt32(bigEndian: info.rcv_ppid)
            if discarding || partial.count + n > maxMessageBytes {
                if !discarding { handle(.messageTooLarge(stream: stream)) }
                partial.removeAll()
                discarding = !complete
                continue
            }
            if !complete {
                readBuffer.withUnsafeBytes { partial.append(contentsOf: $0[0..<n]) }
                continue
            }
            if partial.isEmpty {
                readBuffer.withUnsafeBytes { handle(.message(stream: stream, ppid: ppid, UnsafeRawBufferPointer(rebasing: $0[0..<n]))) }
            } else {
                readBuffer.withUnsafeBytes { partial.append(contentsOf: $0[0..<n]) }
                partial.withUnsafeBytes { handle(.message(stream: stream, ppid: ppid, $0)) }
                partial.removeAll(keepingCapacity: false)
            }
        }
    }

    private func notification(_ bytes: UnsafeRawBufferPointer, _ handle: (SctpEvent) -> Void) {
        guard bytes.count >= 8 else { return }
        let type = bytes.loadUnaligned(as: UInt16.self)
        switch Int32(type) {
        case Int32(SCTP_ASSOC_CHANGE):
            guard bytes.count >= MemoryLayout<sctp_assoc_change>.size else { return }
            let state = bytes.loadUnaligned(fromByteOffset: MemoryLayout<sctp_assoc_change>.offset(of: \.sac_state) ?? 8, as: UInt16.self)
            switch Int32(state) {
            case Int32(SCTP_COMM_UP), Int32(SCTP_RESTART):
                if !isUp { isUp = true; handle(.up) }
            case Int32(SCTP_COMM_LOST), Int32(SCTP_SHUTDOWN_COMP), Int32(SCTP_CANT_STR_ASSOC):
                if isUp || connectStarted { isUp = false; handle(.down) }
            default: break
            }
        case Int32(SCTP_STREAM_RESET_EVENT):
            let header = MemoryLayout<sctp_stream_reset_event>.size
            guard bytes.count >= header else { return }
            let flags = bytes.loadUnaligned(fromByteOffset: 2, as: UInt16.self)
            guard flags & UInt16(SCTP_STREAM_RESET_INCOMING_SSN) != 0,
                  flags & UInt16(SCTP_STREAM_RESET_DENIED | SCTP_STREAM_RESET_FAILED) == 0 else { return }
            let length = Int(bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            let count = (min(length, bytes.count) - header) / 2
            guard count > 0 else { return }
            handle(.incomingReset((0..<count).map { bytes.loadUnaligned(fromByteOffset: header + 2 * $0, as: UInt16.self) }))
        default: break
        }
    }

    func close() {
        guard let s = socket else { return }
        socket = nil
        isUp = false
        usrsctp_close(s)
        usrsctp_deregister_address(UnsafeMutableRawPointer(bitPattern: address))
        SctpStack.shared.unregister(address)
    }
}
