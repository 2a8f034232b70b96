internal import CNice
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
            guard let n = srtp.unprotectRtp(base, length: datagram.count) else { core.engine.countDrop(.srtpFailure); return }
            sawMedia = true
            core.engine.handleRtp(from: index, packet: UnsafeMutableRawBufferPointer(start: base, count: n), now: monotonicNow())
            core.flush()
        case .rtcp:
            guard let srtp, let base = datagram.baseAddress else { core.engine.countDrop(.srtpFailure); return }
            guard let n = srtp.unprotectRtcp(base, length: datagram.count) else { core.engine.countDrop(.srtpFailure); return }
            sawMedia = true
            core.engine.handleRtcp(from: index, packet: UnsafeRawBufferPointer(start: base, count: n), now: monotonicNow())
            core.flush()
        case .dtls:
            guard let dtls else { return }
            handle(dtls.receive(UnsafeRawBufferPointer(datagram)))
        case .stun, .unknown:
            core.engine.countDrop(.unknownPacket)
        }
    }

    /// Sends one clear packet from the engine's outbox: protects it in place and hands it to ICE.
    @inline(__always)
    func sendProtected(_ bytes: UnsafeMutableRawPointer, length: Int, isRtcp: Bool) {
        guard let srtp, let ice else { return }
        let n = isRtcp ? srtp.protectRtcp(bytes, length: length) : srtp.protectRtp(bytes, length: length)
        if let n { _ = ice.send(bytes, length: n) }
    }

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
