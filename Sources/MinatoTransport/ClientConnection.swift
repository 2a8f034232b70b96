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
    /// The agent of an ICE restart until it has a pair (then it becomes `ice`).
    private var pending: IceAgent?
    /// Agents replaced or failed, freed on the next tick (never inside their own callbacks).
    private var retired: [IceAgent] = []
    let secure: SecureTransport
    /// The SCTP association and data channels, once `enableData` made them.
    var data: ClientDataChannels?
    /// Called on the worker thread with what the data channels report (`enableData`).
    public var onDataEvent: ((ClientDataEvent) -> Void)?
    /// TURN servers every agent of this connection allocates a relayed candidate on.
    private let relays: [IceRelay]
    /// Whether the current agent (or, during a restart, the restart's agent) knows all its
    /// candidates: with `relays`, its SDP should wait for this (the relayed ones take round trips).
    public private(set) var gathered = false

    init(core: ClientWorkerCore, srtpProfiles: String?, relays: [IceRelay] = []) throws {
        self.core = core
        self.relays = relays
        secure = try SecureTransport(runtime: core.runtime, now: monotonicNow(),
                                     timeouts: TransportTimeouts(connect: 0, media: 0), srtpProfiles: srtpProfiles)
        // Two-phase: C callbacks need `self`, so the agent is made after stored properties.
        local = LocalTransportParameters(iceUfrag: "", icePwd: "", candidates: [], fingerprint: core.runtime.fingerprint)
        let me = Unmanaged.passUnretained(self).toOpaque()
        let ice = try IceAgent(context: core.context, configuration: core.ice, owner: me, controlling: true,
                               receive: clientIceReceive, stateChanged: clientIceStateChanged,
                               relays: relays, gatheringDone: clientGatheringDone)
        self.ice = ice
        local = LocalTransportParameters(iceUfrag: ice.localUfrag, icePwd: ice.localPwd,
                                         candidates: ice.localCandidates(), fingerprint: core.runtime.fingerprint)
    }

    /// Load generators only (`minato-bench capacity`): from now on the kernel drops RTP arriving
    /// on the selected pair's socket before this thread sees it, while STUN, DTLS and RTCP still
    /// arrive. The sender pays for every packet as before; this receiver pays nothing, so one
    /// generator core can stand for thousands of subscribers. False when there is no selected
    /// UDP pair yet (or it is TCP or relayed).
    public func dropIncomingRtpInKernel() -> Bool {
        guard let ice else { return false }
        var peer = sockaddr_storage()
        var length: UInt32 = 0
        let fd = ice.selectedUdpSocket(peer: &peer, length: &length)
        return fd >= 0 && minato_drop_incoming_rtp(fd) == 0
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

    /// Starts an ICE restart on this connection (after a network change): a new libnice agent
    /// gathers afresh (on the addresses that exist now, when the configuration names none) with
    /// new credentials, for the next offer or answer. Media goes on over the current agent's pair
    /// until the new agent, given the peer's new credentials (`setRestartedRemote`), has a pair
    /// of its own; then it takes over and the old one is freed. If its checks fail the old agent
    /// stays (`restartFailures` counts it) and the caller may try again. DTLS and SRTP carry on:
    /// they sit above ICE. A restart still pending is replaced by the new one.
    @discardableResult
    public func restartIce() -> LocalTransportParameters {
        guard ice != nil, state != .closed else { return local }
        if let pending { retire(pending) }
        pending = nil
        let me = Unmanaged.passUnretained(self).toOpaque()
        gathered = false
        guard let fresh = try? IceAgent(context: core.context, configuration: core.ice, owner: me, controlling: true,
                                        receive: clientIceReceive, stateChanged: clientIceStateChanged,
                                        relays: relays, gatheringDone: clientGatheringDone)
        else {
            restarting = false
            restartFailures += 1
            return local
        }
        pending = fresh
        restarting = true
        local = LocalTransportParameters(iceUfrag: fresh.localUfrag, icePwd: fresh.localPwd,
                                         candidates: fresh.localCandidates(), fingerprint: local.fingerprint)
        return local
    }

    /// The peer's ICE credentials and candidates after a restart (`restartIce`).
    public func setRestartedRemote(_ remote: RemoteTransportParameters) {
        guard let pending, restarting else { return }
        pending.setRemoteCredentials(ufrag: remote.iceUfrag, pwd: remote.icePwd)
        for c in remote.candidates { pending.addRemoteCandidate(c) }
        if remote.endOfCandidates { pending.endOfRemoteCandidates() }
    }

    /// Whether an ICE restart is waiting for its new pair.
    public private(set) var restarting = false
    /// ICE restarts completed (a pair after `restartIce`).
    public private(set) var iceRestarts = 0
    /// ICE restarts whose new agent failed its checks (the old pair, if any, carried on).
    public private(set) var restartFailures = 0
    /// Datagrams received (RTP, RTCP, DTLS; STUN is libnice's own), for a stall watch.
    public private(set) var datagramsReceived: UInt64 = 0

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

    /// Protects a clear RTCP packet (or compound) of `length` bytes in place (the buffer holds
    /// at least `length + trailerRoom` bytes) and sends it. False if not connected or nothing was sent.
    @discardableResult
    public func sendRtcp(_ base: UnsafeMutableRawPointer, length: Int) -> Bool {
        guard let srtp = secure.srtp, let ice, let n = srtp.protectRtcp(base, length: length) else { return false }
        return ice.send(base, length: n)
    }

    /// Closes DTLS (close_notify goes out first) and frees the agent; no callback fires afterwards.
    public func close() {
        guard state != .closed else { return }
        data?.association.close()
        data = nil
        onDataEvent = nil
        secure.close()
        sendHandshake()
        ice?.close(context: core.context)
        ice = nil
        pending?.close(context: core.context)
        pending = nil
        for a in retired { a.close(context: core.context) }
        retired = []
        core.forget(self)
        setState(.closed)
        onPacket = nil
        onStateChange = nil
    }

    // MARK: From libnice and the worker's tick

    func iceChanged(_ progress: IceProgress, agent: OpaquePointer?) {
        if let fresh = pending, agent == fresh.agent {
            switch progress {
            case .connected:
                // The restart's agent has its pair: it carries the media from now on.
                if let old = ice { retire(old) }
                ice = fresh
                pending = nil
                restarting = false
                iceRestarts += 1
                apply(secure.iceChanged(.connected))
            case .failed:
                retire(fresh)
                pending = nil
                restarting = false
                restartFailures += 1
            case .none:
                break
            }
            return
        }
        guard let ice, agent == ice.agent else { return }
        // During a restart the old pair carries on; its failure is not the end of the connection
        // while the new agent may still succeed.
        if restarting, progress == .failed { return }
        apply(secure.iceChanged(progress))
    }

    private func retire(_ agent: IceAgent) { retired.append(agent) }

    /// The newest agent knows all its candidates: `local` takes them (relayed ones included).
    func gatheringDone(agent: OpaquePointer?) {
        guard let newest = pending ?? ice, agent == newest.agent else { return }
        gathered = true
        local = LocalTransportParameters(iceUfrag: newest.localUfrag, icePwd: newest.localPwd,
                                         candidates: newest.localCandidates(), fingerprint: local.fingerprint)
    }

    /// The selected pair's local candidate type ("host", "srflx", "prflx", "relay"), nil before one.
    public var selectedCandidateType: String? { ice?.selectedLocalType() }

    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer) {
        datagramsReceived &+= 1
        switch classifyPacket(UnsafeRawBufferPointer(datagram)) {
        case .rtp: onPacket?(datagram, false)
        case .rtcp: onPacket?(datagram, true)
        case .dtls:
            apply(secure.receiveDtls(UnsafeRawBufferPointer(datagram)))
            if data != nil { pumpData() }
        case .stun, .unknown: break
        }
    }

    func tick() {
        if !retired.isEmpty {
            for a in retired { a.close(context: core.context) }
            retired = []
        }
        apply(secure.handleTimeout(now: monotonicNow()))
        if data != nil { pumpData() }
    }

    func sendHandshake() {
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
        if new == .connected, let data {
            data.association.connect()
            pumpData()
        }
        onStateChange?(new)
    }
}

private func clientIceReceive(_ agent: OpaquePointer?, _ stream: guint, _ component: guint, _ len: guint,
                              _ buf: UnsafeMutablePointer<gchar>?, _ owner: gpointer?) {
    guard let owner, let buf, len > 0 else { return }
    Unmanaged<ClientConnection>.fromOpaque(owner).takeUnretainedValue()
        .received(UnsafeMutableRawBufferPointer(start: buf, count: Int(len)))
}

private func clientGatheringDone(_ agent: OpaquePointer?, _ stream: guint, _ owner: gpointer?) {
    guard let owner else { return }
    Unmanaged<ClientConnection>.fromOpaque(owner).takeUnretainedValue().gatheringDone(agent: agent)
}

private func clientIceStateChanged(_ agent: OpaquePointer?, _ stream: guint, _ component: guint, _ state: guint, _ owner: gpointer?) {
    guard let owner else { return }
    Unmanaged<ClientConnection>.fromOpaque(owner).takeUnretainedValue().iceChanged(IceProgress(state), agent: agent)
}
