internal import CNice
internal import CMinatoShims
#if canImport(Glibc)
internal import Glibc
#endif
internal import MinatoMedia
internal import MinatoWire

/// Identifies a WebRTC connection across threads (made by the control plane, unique per process).
public struct TransportId: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "transport-\(rawValue)" }
}

/// What the server puts in its SDP for one transport.
public struct TransportDescription: Sendable {
    public let id: TransportId
    public let iceUfrag: String
    public let icePwd: String
    /// "candidate:…" values.
    public let candidates: [String]
    /// "sha-256 AB:…".
    public let fingerprint: String
    public let iceLite: Bool
}

/// The remote side's transport parameters from its SDP.
public struct RemoteTransportParameters: Sendable {
    public var iceUfrag: String
    public var icePwd: String
    public var fingerprintAlgorithm: String
    public var fingerprint: String
    /// The remote `a=setup` value: "actpass", "active" or "passive".
    public var setup: String
    public var candidates: [String]
    public var endOfCandidates: Bool
    public init(iceUfrag: String, icePwd: String, fingerprintAlgorithm: String, fingerprint: String,
                setup: String, candidates: [String], endOfCandidates: Bool) {
        self.iceUfrag = iceUfrag; self.icePwd = icePwd; self.fingerprintAlgorithm = fingerprintAlgorithm
        self.fingerprint = fingerprint; self.setup = setup; self.candidates = candidates
        self.endOfCandidates = endOfCandidates
    }
}

/// What a transport's state change means to its worker (the worker decides what follows).
enum TransportUpdate: Equatable {
    case none
    /// ICE, DTLS and SRTP are up: media can flow.
    case connected
    /// The transport cannot go on; the worker closes it and reports why.
    case failed(TransportCloseReason)
}

/// What a transport made of one received datagram. Media comes back decrypted in place (the
/// buffer is still the caller's, borrowed for the duration of the receive callback).
enum ReceiveOutcome {
    case rtp(UnsafeMutableRawBufferPointer)
    case rtcp(UnsafeRawBufferPointer)
    case dropped(DropReason)
    /// DTLS handshake traffic was consumed (its timer may have moved).
    case handshake(TransportUpdate)
}

/// What happened to a batch handed to `WebRtcTransport.send`.
enum SendOutcome {
    /// The first `n` datagrams were sent; the rest were refused (socket buffer full, error).
    case sent(Int)
    /// No ICE connection yet: nothing was sent.
    case notConnected
}

/// One WebRTC connection: an ICE agent, DTLS on top, SRTP keyed from DTLS, and the engine's
/// `TransportIndex` for it. Owned by its `WorkerCore`; lives on that worker's thread.
/// Transports report, the worker decides: every input (datagram, ICE change, timeout) returns
/// a typed outcome; the transport never calls the worker or the engine, and holds no routing
/// or batching state.
final class WebRtcTransport {
    enum State: Equatable { case new, connecting, connected, closed }

    let id: TransportId
    let index: TransportIndex
    /// Passed by argument: for the libnice C callbacks (`iceReceive`, `iceStateChanged`) to hand
    /// this transport's outcomes to its worker. The transport itself never calls it.
    unowned let worker: WorkerCore
    private var ice: IceAgent?
    private var dtls: DtlsTransport?
    private(set) var srtp: SrtpSession?
    private(set) var state: State = .new
    private var iceIsConnected = false
    private var dtlsRole: DtlsTransport.Role?
    let createdAt: Nanoseconds
    /// When SRTP or SRTCP last decrypted (nil: never), for the media timeout.
    private(set) var lastMediaAt: Nanoseconds?
    /// The direct send path: the selected pair's UDP socket and peer.
    /// -2: not resolved yet; -1: use libnice's `nice_agent_send` (no pair, TCP or relay).
    private var sendFd: Int32 = -2
    private var peerAddress = sockaddr_storage()
    private var peerAddressLength: UInt32 = 0

    init(id: TransportId, index: TransportIndex, worker: WorkerCore, now: Nanoseconds) {
        self.id = id
        self.index = index
        self.worker = worker
        self.createdAt = now
    }

    /// Creates the ICE agent and DTLS state (separate from init so `self` can be handed to C).
    func open(runtime: CryptoRuntime, context: OpaquePointer, configuration: IceConfiguration) throws -> TransportDescription {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let ice = try IceAgent(context: context, configuration: configuration, owner: me)
        ice.onSelectedPairChange(transportSelectedPairChanged, owner: me)
        self.ice = ice
        dtls = try DtlsTransport(runtime: runtime) { [unowned self] datagram in
            // Handshake flights only: one that fails to go out is resent by the DTLS timer.
            guard let base = datagram.baseAddress else { return }
            _ = self.ice?.send(base, length: datagram.count)
        }
        return TransportDescription(id: id, iceUfrag: ice.localUfrag, icePwd: ice.localPwd,
                                    candidates: ice.localCandidates(), fingerprint: runtime.fingerprint,
                                    iceLite: configuration.lite)
    }

    /// Applies the remote ICE credentials, candidates, fingerprint and DTLS role.
    func setRemote(_ remote: RemoteTransportParameters) -> TransportUpdate {
        guard let ice, let dtls else { return .none }
        ice.setRemoteCredentials(ufrag: remote.iceUfrag, pwd: remote.icePwd)
        for c in remote.candidates { ice.addRemoteCandidate(c) }
        if remote.endOfCandidates { ice.endOfRemoteCandidates() }
        dtls.remoteFingerprint = (remote.fingerprintAlgorithm, remote.fingerprint)
        guard dtlsRole == nil else { return .none }
        // The remote's "passive" makes us the DTLS client; "active"/"actpass" the server.
        dtlsRole = remote.setup == "passive" ? .client : .server
        if state == .new { state = .connecting }
        return iceIsConnected && dtlsRole == .client ? handle(dtls.start(role: .client)) : .none
    }

    func addRemoteCandidate(_ candidate: String?) {
        guard let ice else { return }
        if let candidate, !candidate.isEmpty { ice.addRemoteCandidate(candidate) } else { ice.endOfRemoteCandidates() }
    }

    func close(context: OpaquePointer) {
        guard state != .closed else { return }
        state = .closed
        dtls?.close()
        ice?.close(context: context)
        ice = nil
        srtp = nil
    }

    // MARK: Inputs (libnice callbacks and the worker's timer, on the worker thread)

    func iceChanged(_ progress: IceProgress) -> TransportUpdate {
        switch progress {
        case .none: return .none
        case .failed: return state == .closed ? .none : .failed(.iceFailed)
        case .connected:
            guard !iceIsConnected else { return .none }
            iceIsConnected = true
            sendFd = -2
            if dtlsRole == .client, let dtls { return handle(dtls.start(role: .client)) }
            return .none
        }
    }

    /// One datagram from libnice (STUN was consumed by libnice already), decrypted in place.
    /// `engine` is only asked whether an SSRC is expected here (a read, before `srtp_unprotect`).
    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer, now: Nanoseconds, engine: MediaEngine) -> ReceiveOutcome {
        switch classifyPacket(UnsafeRawBufferPointer(datagram)) {
        case .rtp:
            guard let srtp, let base = datagram.baseAddress else { return .dropped(.noSrtpSession) }
            // The SSRC is in the clear header: a stream this transport does not expect is dropped
            // before libsrtp, which would otherwise set up state for every new SSRC it sees
            // (a new simulcast layer is expected by the RID in its clear header extension).
            guard datagram.count >= RtpPacketView.fixedHeaderLength else { return .dropped(.malformedRtp) }
            let ssrc = UnsafeRawBufferPointer(datagram).loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian
            guard engine.expectsPacket(ssrc, datagram, on: index) else { return .dropped(.unknownSsrc) }
            guard let n = srtp.unprotectRtp(base, length: datagram.count) else { return .dropped(.srtpUnprotectFailed) }
            lastMediaAt = now
            return .rtp(UnsafeMutableRawBufferPointer(start: base, count: n))
        case .rtcp:
            guard let srtp, let base = datagram.baseAddress else { return .dropped(.noSrtpSession) }
            guard let n = srtp.unprotectRtcp(base, length: datagram.count) else { return .dropped(.srtpUnprotectFailed) }
            lastMediaAt = now
            return .rtcp(UnsafeRawBufferPointer(start: base, count: n))
        case .dtls:
            guard let dtls else { return .dropped(.unknownPacket) }
            return .handshake(handle(dtls.receive(UnsafeRawBufferPointer(datagram))))
        case .stun, .unknown:
            return .dropped(.unknownPacket)
        }
    }

    /// When this transport next needs `handleTimeout`: the DTLS retransmission timer while
    /// connecting, the connect timeout until connected, the media timeout after (from the last
    /// media received, so it moves with traffic and is rechecked lazily). `.max`: never.
    func deadline(now: Nanoseconds, connectTimeout: Nanoseconds, mediaTimeout: Nanoseconds) -> Nanoseconds {
        switch state {
        case .closed: return .max
        case .connected:
            guard mediaTimeout > 0, let last = lastMediaAt else { return .max }
            return saturatingAdd(last, mediaTimeout)
        case .new, .connecting:
            var soonest = connectTimeout > 0 ? saturatingAdd(createdAt, connectTimeout) : .max
            if state == .connecting, let ms = dtls?.timeoutMilliseconds {
                soonest = min(soonest, saturatingAdd(now, UInt64(max(0, ms)) &* 1_000_000))
            }
            return soonest
        }
    }

    /// Runs whatever is due at `now` (see `deadline`).
    func handleTimeout(now: Nanoseconds, connectTimeout: Nanoseconds, mediaTimeout: Nanoseconds) -> TransportUpdate {
        switch state {
        case .closed: return .none
        case .connected:
            if mediaTimeout > 0, let last = lastMediaAt, now >= saturatingAdd(last, mediaTimeout) {
                return .failed(.mediaTimeout(duration(mediaTimeout)))
            }
            return .none
        case .new, .connecting:
            if connectTimeout > 0, now >= saturatingAdd(createdAt, connectTimeout) {
                return .failed(.connectTimeout(duration(connectTimeout)))
            }
            guard let dtls, state == .connecting, let ms = dtls.timeoutMilliseconds, ms == 0 else { return .none }
            return handle(dtls.handleTimeout())
        }
    }

    // MARK: Sending

    /// Sends already protected datagrams (`count` <= `SendBatch.maxPerCall`) to the peer: one
    /// `sendmmsg` on the selected pair's socket, runs of equal-size packets as UDP GSO messages
    /// while `gso` holds (cleared when the kernel refuses GSO); `nice_agent_send` per packet
    /// when there is no plain UDP pair (TCP, TURN), stopping at the first refusal.
    @inline(__always)
    func send(_ bases: UnsafeMutablePointer<UnsafeMutableRawPointer?>, _ lengths: UnsafeMutablePointer<Int>, count: Int,
              gso: inout Bool) -> SendOutcome {
        guard iceIsConnected else { return .notConnected }
        if sendFd == -2 {
            guard let ice else { return .notConnected }
            sendFd = max(-1, ice.selectedUdpSocket(peer: &peerAddress, length: &peerAddressLength))
        }
        if sendFd < 0 {
            guard let ice else { return .notConnected }
            var sent = 0
            while sent < count {
                guard let base = bases[sent], ice.send(base, length: lengths[sent]) else { break }
                sent += 1
            }
            return .sent(sent)
        }
        if gso {
            let r = minato_send_batch(sendFd, &peerAddress, peerAddressLength, bases, lengths, UInt32(count), 1)
            if r != -2 { return .sent(max(0, Int(r))) }
            gso = false   // no UDP GSO here: plain sendmmsg from now on
        }
        let r = minato_send_batch(sendFd, &peerAddress, peerAddressLength, bases, lengths, UInt32(count), 0)
        return .sent(max(0, Int(r)))
    }

    func selectedPairChanged() { sendFd = -2 }

    /// Connects this transport without libnice or DTLS: SRTP keyed directly and a UDP socket to
    /// send on (`WorkerBenchmarkRig` only).
    func connectDirectly(srtp: SrtpSession, fd: Int32, peer: sockaddr_storage, peerLength: UInt32) {
        self.srtp = srtp
        state = .connected
        iceIsConnected = true
        sendFd = fd
        peerAddress = peer
        peerAddressLength = peerLength
    }

    private func handle(_ outcome: DtlsTransport.Outcome) -> TransportUpdate {
        switch outcome {
        case .none: return .none
        case .failed(let failure): return .failed(.dtlsFailed(failure))
        case .connected(let profile, let local, let remote):
            do {
                srtp = try SrtpSession(profile: profile, localKeyAndSalt: local, remoteKeyAndSalt: remote)
                state = .connected
                return .connected
            } catch {
                return .failed(.srtpSetupFailed)
            }
        }
    }
}

@inline(__always)
func saturatingAdd(_ a: Nanoseconds, _ b: Nanoseconds) -> Nanoseconds {
    let (sum, overflow) = a.addingReportingOverflow(b)
    return overflow ? .max : sum
}

func duration(_ ns: Nanoseconds) -> Duration {
    .seconds(Int64(clamping: ns / 1_000_000_000)) + .nanoseconds(Int64(ns % 1_000_000_000))
}

private func transportSelectedPairChanged(_ agent: OpaquePointer?, _ stream: guint, _ component: guint,
                                          _ local: UnsafeMutablePointer<NiceCandidate>?, _ remote: UnsafeMutablePointer<NiceCandidate>?,
                                          _ owner: gpointer?) {
    guard let owner else { return }
    Unmanaged<WebRtcTransport>.fromOpaque(owner).takeUnretainedValue().selectedPairChanged()
}

/// Preallocated arrays for `WorkerCore.flush` (one per worker, owned by it): per outbox slot
/// the protected length, clear length, kind and next slot of the same transport's chain; per
/// transport slot the chain's head and tail; and a scratch list for one send call.
final class SendBatch {
    static let maxPerCall = 64
    /// UDP GSO (one message per run of equal-size packets); cleared if the kernel refuses it.
    var gso = true
    let slots: Int
    let bases: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let lengths: UnsafeMutablePointer<Int>
    let clearLengths: UnsafeMutablePointer<Int>
    let isRtcp: UnsafeMutablePointer<Bool>
    let next: UnsafeMutablePointer<Int32>
    /// Transport slots with a chain in this flush, in first-packet order.
    let touched: UnsafeMutablePointer<Int32>
    /// Per transport slot: first and last outbox slot of its chain (-1: none). Grown on the
    /// control path (`reserve`), never during a flush.
    var heads = ContiguousArray<Int32>()
    var tails = ContiguousArray<Int32>()
    let scratchBases: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let scratchLengths: UnsafeMutablePointer<Int>
    /// The outbox slot of each scratch entry (for counting what was sent).
    let scratchSlots: UnsafeMutablePointer<Int32>

    init(slots: Int) {
        self.slots = slots
        bases = .allocate(capacity: slots)
        lengths = .allocate(capacity: slots)
        clearLengths = .allocate(capacity: slots)
        isRtcp = .allocate(capacity: slots)
        next = .allocate(capacity: slots)
        touched = .allocate(capacity: slots)
        scratchBases = .allocate(capacity: Self.maxPerCall)
        scratchLengths = .allocate(capacity: Self.maxPerCall)
        scratchSlots = .allocate(capacity: Self.maxPerCall)
    }

    /// Makes room for transport slots up to `slot` (control path).
    func reserve(transportSlot slot: Int) {
        while heads.count <= slot { heads.append(-1); tails.append(-1) }
    }

    deinit {
        bases.deallocate(); lengths.deallocate(); clearLengths.deallocate(); isRtcp.deallocate()
        next.deallocate(); touched.deallocate()
        scratchBases.deallocate(); scratchLengths.deallocate(); scratchSlots.deallocate()
    }
}
