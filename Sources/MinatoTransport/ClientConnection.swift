internal import CNice
internal import CMinatoShims
internal import MinatoWire

/// Which end of the DTLS handshake a client connection plays (from the SDP `a=setup` exchange).
public enum DtlsRole: Sendable, Equatable {
    case client, server
}

/// The client's own transport parameters, for the SDP it writes.
public struct LocalTransportParameters: Sendable {
    public let iceUfrag: String
    public let icePwd: String
    /// "candidate:…" values.
    public let candidates: [String]
    /// "sha-256 AB:…".
    public let fingerprint: String
}

/// The client side of one WebRTC connection (what a browser's RTCPeerConnection does for one
/// BUNDLEd, rtcp-muxed transport): a full-ICE controlling libnice agent and the same sans-IO
/// `SecureTransport` (DTLS in the role the SDP gave, SRTP keyed from it) the server uses.
/// Made by and confined to one `ClientWorker` thread.
///
/// Packets arrive still encrypted through `onPacket` (the SSRC, sequence and timestamp are in
/// clear, so a receiver can count without decrypting) and are decrypted on demand with
/// `unprotectRtp` / `unprotectRtcp`. Sending protects in place: leave
/// `ClientConnection.trailerRoom` bytes of room after the packet. A client has no connect or
/// media timeout of its own (its application decides how long to wait).
public final class ClientConnection {
    public enum State: Equatable, Sendable { case new, connecting, connected, failed(String), closed }

    /// Bytes SRTP may append to a packet (authentication tag and, for RTCP, the index).
    public static let trailerRoom = SrtpSession.maxTrailer

    public private(set) var local: LocalTransportParameters
    public private(set) var state: State = .new
    /// The SRTP profile DTLS negotiated, once connected.
    public var srtpProfile: SrtpProfile? { secure.srtpProfile }
    /// Called on the worker thread when the state changes.
    public var onStateChange: ((State) -> Void)?
    /// Called on the worker thread with every SRTP (`isRtcp` false) or SRTCP datagram, still
    /// encrypted; the buffer is borrowed for the duration of the call and may be decrypted in place.
    public var onPacket: ((UnsafeMutableRawBufferPointer, _ isRtcp: Bool) -> Void)?

    private unowned let core: ClientWorkerCore
    private var ice: IceAgent?
    private let secure: SecureTransport

    init(core: ClientWorkerCore, srtpProfiles: String?) throws {
        self.core = core
        secure = try SecureTransport(runtime: core.runtime, now: monotonicNow(),
                                     timeouts: TransportTimeouts(connect: 0, media: 0), srtpProfiles: srtpProfiles)
        // Two-phase: C callbacks need `self`, so the agent is made after stored properties.
        local = LocalTransportParameters(iceUfrag: "", icePwd: "", candidates: [], fingerprint: core.runtime.fingerprint)
        let me = Unmanaged.passUnretained(self).toOpaque()
        let ice = try IceAgent(context: core.context, configuration: core.ice, owner: me, controlling: true,
                               receive: clientIceReceive, stateChanged: clientIceStateChanged)
        self.ice = ice
        local = LocalTransportParameters(iceUfrag: ice.localUfrag, icePwd: ice.localPwd,
                                         candidates: ice.localCandidates(), fingerprint: core.runtime.fingerprint)
    }

    /// Applies the remote side's ICE credentials, candidates and fingerprint; `dtlsRole` is ours.
    public func setRemote(_ remote: RemoteTransportParameters, dtlsRole: DtlsRole) {
        guard let ice, secure.dtlsRole == nil else { return }
        ice.setRemoteCredentials(ufrag: remote.iceUfrag, pwd: remote.icePwd)
        for c in remote.candidates { ice.addRemoteCandidate(c) }
        if remote.endOfCandidates { ice.endOfRemoteCandidates() }
        setState(.connecting)
        apply(secure.setRemote(fingerprint: (remote.fingerprintAlgorithm, remote.fingerprint),
                               role: dtlsRole == .client ? .client : .server))
    }

    /// Starts an ICE restart on this connection (after a network change): new local ICE
    /// credentials for the next offer or answer; media goes on over the current pair until the
    /// peer's new credentials (`setRestartedRemote`) lead to a new one. DTLS and SRTP carry on.
    @discardableResult
    public func restartIce() -> LocalTransportParameters {
        guard let ice, state != .closed, ice.restart() else { return local }
        restarting = true
        local = LocalTransportParameters(iceUfrag: ice.localUfrag, icePwd: ice.localPwd,
                                         candidates: ice.localCandidates(), fingerprint: local.fingerprint)
        return local
    }

    /// The peer's ICE credentials and candidates after a restart (`restartIce`).
    public func setRestartedRemote(_ remote: RemoteTransportParameters) {
        guard let ice, restarting else { return }
        ice.setRemoteCredentials(ufrag: remote.iceUfrag, pwd: remote.icePwd)
        for c in remote.candidates { ice.addRemoteCandidate(c) }
        if remote.endOfCandidates { ice.endOfRemoteCandidates() }
    }

    /// Whether an ICE restart is waiting for its new pair.
    public private(set) var restarting = false
    /// ICE restarts completed (a pair after `restartIce`).
    public private(set) var iceRestarts = 0

    /// Adds a trickled remote candidate; nil or empty means end of candidates.
    public func addRemoteCandidate(_ candidate: String?) {
        guard let ice else { return }
        if let candidate, !candidate.isEmpty { ice.addRemoteCandidate(candidate) } else { ice.endOfRemoteCandidates() }
    }

    /// Decrypts an SRTP packet in place; the clear length, or nil (not connected, auth or replay failure).
    @inline(__always)
    public func unprotectRtp(_ packet: UnsafeMutableRawBufferPointer) -> Int? {
        guard let srtp = secure.srtp, let base = packet.baseAddress else { return nil }
        return srtp.unprotectRtp(base, length: packet.count)
    }

    @inline(__always)
    public func unprotectRtcp(_ packet: UnsafeMutableRawBufferPointer) -> Int? {
        guard let srtp = secure.srtp, let base = packet.baseAddress else { return nil }
        return srtp.unprotectRtcp(base, length: packet.count)
    }

    /// Protects a clear RTP packet of `length` bytes in place (the buffer holds at least
    /// `length + trailerRoom` bytes) and sends it. False if not connected or nothing was sent.
    @inline(__always)
    @discardableResult
    public func sendRtp(_ base: UnsafeMutableRawPointer, length: Int) -> Bool {
        guard let srtp = secure.srtp, let ice, let n = srtp.protectRtp(base, length: length) else { return false }
        return ice.send(base, length: n)
    }

    /// Closes DTLS (close_notify goes out first) and frees the agent; no callback fires afterwards.
    public func close() {
        guard state != .closed else { return }
        secure.close()
        sendHandshake()
        ice?.close(context: core.context)
        ice = nil
        core.forget(self)
        setState(.closed)
        onPacket = nil
        onStateChange = nil
    }

    // MARK: From libnice and the worker's tick

    func iceChanged(_ progress: IceProgress) {
        if restarting {
            // During a restart the old pair carries on; a failure of the checks is the caller's
            // to retry (another restart), not the end of the connection.
            guard progress == .connected else { return }
            restarting = false
            iceRestarts += 1
        }
        apply(secure.iceChanged(progress))
    }

    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer) {
        switch classifyPacket(UnsafeRawBufferPointer(datagram)) {
        case .rtp: onPacket?(datagram, false)
        case .rtcp: onPacket?(datagram, true)
        case .dtls: apply(secure.receiveDtls(UnsafeRawBufferPointer(datagram)))
        case .stun, .unknown: break
        }
    }

    func tick() { apply(secure.handleTimeout(now: monotonicNow())) }

    private func sendHandshake() {
        while let d = secure.pollDatagram() {
            guard let ice else { continue }
            _ = d.withUnsafeBytes { b in b.baseAddress.map { ice.send($0, length: b.count) } }
        }
    }

    private func apply(_ update: TransportUpdate) {
        sendHandshake()
        switch update {
        case .none: break
        case .connected: setState(.connected)
        case .failed(let reason):
            switch state {
            case .failed, .closed: return
            default: setState(.failed(reason.description))
            }
        }
    }

    private func setState(_ new: State) {
        guard new != state else { return }
        state = new
        onStateChange?(new)
    }
}

private func clientIceReceive(_ agent: OpaquePointer?, _ stream: guint, _ component: guint, _ len: guint,
                              _ buf: UnsafeMutablePointer<gchar>?, _ owner: gpointer?) {
    guard let owner, let buf, len > 0 else { return }
    Unmanaged<ClientConnection>.fromOpaque(owner).takeUnretainedValue()
        .received(UnsafeMutableRawBufferPointer(start: buf, count: Int(len)))
}

private func clientIceStateChanged(_ agent: OpaquePointer?, _ stream: guint, _ component: guint, _ state: guint, _ owner: gpointer?) {
    guard let owner else { return }
    Unmanaged<ClientConnection>.fromOpaque(owner).takeUnretainedValue().iceChanged(IceProgress(state))
}
