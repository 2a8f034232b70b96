internal import CNice
internal import CMinatoShims
#if canImport(Glibc)
internal import Glibc
#endif
public import MinatoMedia
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

/// One WebRTC connection: an ICE agent, DTLS on top, SRTP keyed from DTLS, and the engine's
/// `TransportIndex` for it. Owned by its `WorkerCore`; lives on that worker's thread.
final class WebRtcTransport {
    enum State: Equatable { case new, connecting, connected, closed }

    let id: TransportId
    let index: TransportIndex
    private unowned let core: WorkerCore
    private var ice: IceAgent?
    private var dtls: DtlsTransport?
    private(set) var srtp: SrtpSession?
    private(set) var state: State = .new
    private var iceIsConnected = false
    private var dtlsRole: DtlsTransport.Role?
    private(set) var sawMedia = false
    private(set) var createdAt: Nanoseconds
    /// The direct send path (`WorkerCore.flush`): the selected pair's UDP socket and peer.
    /// -2: not resolved yet; -1: use libnice's `nice_agent_send` (no pair, TCP or relay).
    private var sendFd: Int32 = -2
    private var peerAddress = sockaddr_storage()
    private var peerAddressLength: UInt32 = 0
    /// This transport's chain of packets in the worker's outbox during a flush (-1: none).
    var batchHead: Int32 = -1
    var batchTail: Int32 = -1

    init(id: TransportId, index: TransportIndex, core: WorkerCore, now: Nanoseconds) {
        self.id = id
        self.index = index
        self.core = core
        self.createdAt = now
    }

    /// Creates the ICE agent and DTLS state (separate from init so `self` can be handed to C).
    func open(runtime: CryptoRuntime, context: OpaquePointer, configuration: IceConfiguration) throws -> TransportDescription {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let ice = try IceAgent(context: context, configuration: configuration, owner: me)
        ice.onSelectedPairChange(transportSelectedPairChanged, owner: me)
        self.ice = ice
        dtls = try DtlsTransport(runtime: runtime) { [unowned self] datagram in
            guard let base = datagram.baseAddress else { return }
            _ = self.ice?.send(base, length: datagram.count)
        }
        return TransportDescription(id: id, iceUfrag: ice.localUfrag, icePwd: ice.localPwd,
                                    candidates: ice.localCandidates(), fingerprint: runtime.fingerprint,
                                    iceLite: configuration.lite)
    }

    /// Applies the remote ICE credentials, candidates, fingerprint and DTLS role.
    func setRemote(_ remote: RemoteTransportParameters) {
        guard let ice, let dtls else { return }
        ice.setRemoteCredentials(ufrag: remote.iceUfrag, pwd: remote.icePwd)
        for c in remote.candidates { ice.addRemoteCandidate(c) }
        if remote.endOfCandidates { ice.endOfRemoteCandidates() }
        dtls.remoteFingerprint = (remote.fingerprintAlgorithm, remote.fingerprint)
        if dtlsRole == nil {
            // The remote's "passive" makes us the DTLS client; "active"/"actpass" the server.
            dtlsRole = remote.setup == "passive" ? .client : .server
            if state == .new { state = .connecting }
            if iceIsConnected && dtlsRole == .client { handle(dtls.start(role: .client)) }
        }
    }

    func addRemoteCandidate(_ candidate: String?) {
        guard let ice else { return }
        if let candidate, !candidate.isEmpty { ice.addRemoteCandidate(candidate) } else { ice.endOfRemoteCandidates() }
    }

    func close(reason: String?) {
        guard state != .closed else { return }
        state = .closed
        dtls?.close()
        ice?.close(context: core.context)
        ice = nil
        srtp = nil
    }

    // MARK: Called from libnice on the worker thread

    func iceConnected() {
        guard !iceIsConnected else { return }
        iceIsConnected = true
        sendFd = -2
        if dtlsRole == .client, let dtls { handle(dtls.start(role: .client)) }
    }

    func iceFailed() {
        core.transportFailed(self, reason: "ICE failed: no usable candidate pair")
    }

    /// One datagram from libnice (STUN was consumed by libnice already). The buffer is
    /// borrowed for the duration of the call and decrypted in place.
    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer) {
        switch classifyPacket(UnsafeRawBufferPointer(datagram)) {
        case .rtp:
            guard let srtp, let base = datagram.baseAddress else { core.engine.countDrop(.srtpFailure); return }
            // The SSRC is in the clear header: a stream this transport does not expect is dropped
            // before libsrtp, which would otherwise set up state for every new SSRC it sees.
            guard datagram.count >= RtpPacketView.fixedHeaderLength else { core.engine.countDrop(.malformedRtp); return }
            let ssrc = UnsafeRawBufferPointer(datagram).loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian
            guard core.engine.expectsSsrc(ssrc, on: index) else { core.engine.countDrop(.unknownSsrc); return }
            guard let n = srtp.unprotectRtp(base, length: datagram.count) else { core.engine.countDrop(.srtpFailure); return }
            sawMedia = true
            core.engine.handleRtp(from: index, packet: UnsafeMutableRawBufferPointer(start: base, count: n), now: monotonicNow())
            core.flushIfFull()
        case .rtcp:
            guard let srtp, let base = datagram.baseAddress else { core.engine.countDrop(.srtpFailure); return }
            guard let n = srtp.unprotectRtcp(base, length: datagram.count) else { core.engine.countDrop(.srtpFailure); return }
            sawMedia = true
            core.engine.handleRtcp(from: index, packet: UnsafeRawBufferPointer(start: base, count: n), now: monotonicNow())
            core.flushIfFull()
        case .dtls:
            guard let dtls else { return }
            handle(dtls.receive(UnsafeRawBufferPointer(datagram)))
        case .stun, .unknown:
            core.engine.countDrop(.unknownPacket)
        }
    }

    /// Sends this transport's chain of protected packets from the worker's outbox (`head`,
    /// then `next[i]` until -1): one `sendmmsg` per 64 packets on the selected pair's socket,
    /// runs of equal-size packets as UDP GSO messages; `nice_agent_send` per packet when
    /// there is no plain UDP pair (TCP, TURN).
    @inline(__always)
    func sendChain(_ batch: SendBatch) {
        var j = batchHead
        batchHead = -1
        batchTail = -1
        if sendFd == -2 {
            guard iceIsConnected, let ice else { return }
            sendFd = max(-1, ice.selectedUdpSocket(peer: &peerAddress, length: &peerAddressLength))
        }
        if sendFd < 0 {
            guard let ice else { return }
            while j >= 0 {
                if let base = batch.bases[Int(j)] { _ = ice.send(base, length: batch.lengths[Int(j)]) }
                j = batch.next[Int(j)]
            }
            return
        }
        var count = 0
        while j >= 0 {
            batch.scratchBases[count] = batch.bases[Int(j)]
            batch.scratchLengths[count] = batch.lengths[Int(j)]
            count += 1
            if count == SendBatch.maxPerCall {
                sendScratch(batch, count)
                count = 0
            }
            j = batch.next[Int(j)]
        }
        if count > 0 { sendScratch(batch, count) }
    }

    @inline(__always)
    private func sendScratch(_ batch: SendBatch, _ count: Int) {
        if batch.gso {
            let r = minato_send_batch(sendFd, &peerAddress, peerAddressLength, batch.scratchBases, batch.scratchLengths,
                                      UInt32(count), 1)
            if r != -2 { return }
            batch.gso = false   // no UDP GSO here: plain sendmmsg from now on
        }
        _ = minato_send_batch(sendFd, &peerAddress, peerAddressLength, batch.scratchBases, batch.scratchLengths, UInt32(count), 0)
    }

    func selectedPairChanged() { sendFd = -2 }

    func tick(now: Nanoseconds) {
        guard let dtls, state == .connecting, let ms = dtls.timeoutMilliseconds, ms == 0 else { return }
        handle(dtls.handleTimeout())
    }

    private func handle(_ outcome: DtlsTransport.Outcome) {
        switch outcome {
        case .none: break
        case .failed(let reason):
            core.transportFailed(self, reason: reason)
        case .connected(let profile, let local, let remote):
            do {
                srtp = try SrtpSession(profile: profile, localKeyAndSalt: local, remoteKeyAndSalt: remote)
                state = .connected
                core.transportConnected(self)
            } catch {
                core.transportFailed(self, reason: "SRTP session could not be created")
            }
        }
    }
}

private func transportSelectedPairChanged(_ agent: OpaquePointer?, _ stream: guint, _ component: guint,
                                          _ local: UnsafeMutablePointer<NiceCandidate>?, _ remote: UnsafeMutablePointer<NiceCandidate>?,
                                          _ owner: gpointer?) {
    guard let owner else { return }
    Unmanaged<WebRtcTransport>.fromOpaque(owner).takeUnretainedValue().selectedPairChanged()
}

/// Preallocated arrays for `WorkerCore.flush` (one per worker): each outbox slot's protected
/// length and next slot of the same transport, and a scratch list for one `sendmmsg`.
final class SendBatch {
    static let maxPerCall = 64
    /// UDP GSO (one message per run of equal-size packets); cleared if the kernel refuses it.
    var gso = true
    let bases: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let lengths: UnsafeMutablePointer<Int>
    let next: UnsafeMutablePointer<Int32>
    let touched: UnsafeMutablePointer<Unmanaged<WebRtcTransport>>
    let scratchBases: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let scratchLengths: UnsafeMutablePointer<Int>

    init(slots: Int) {
        bases = .allocate(capacity: slots)
        lengths = .allocate(capacity: slots)
        next = .allocate(capacity: slots)
        touched = .allocate(capacity: slots)
        scratchBases = .allocate(capacity: Self.maxPerCall)
        scratchLengths = .allocate(capacity: Self.maxPerCall)
    }

    deinit {
        bases.deallocate(); lengths.deallocate(); next.deallocate(); touched.deallocate()
        scratchBases.deallocate(); scratchLengths.deallocate()
    }
}
