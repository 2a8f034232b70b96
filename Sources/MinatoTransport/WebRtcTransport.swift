internal import CNice
internal import CMinatoShims
#if canImport(Glibc)
internal import Glibc
#endif
internal import MinatoMedia
internal import MinatoWire

/// Identifies a WebRTC connection across threads (made by the control plane, unique per process).
public struct TransportId: Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "transport-\(rawValue)" }
}

/// What the server puts in its SDP for one transport.
public struct TransportDescription: Sendable, Codable {
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
public struct RemoteTransportParameters: Sendable, Codable {
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

/// One WebRTC connection on the server: a libnice agent (`IceAgent`, the port through which
/// datagrams come and go), the sans-IO `SecureTransport` (DTLS, SRTP, state, timeouts), the
/// direct UDP send path of the selected pair (`DatagramSender`), and the engine's
/// `TransportIndex`. Owned by its `WorkerCore`; lives on that worker's thread.
/// Transports report, the worker decides: every input (datagram, ICE change, timeout) returns
/// a typed outcome; the transport never calls the worker or the engine, and holds no routing
/// or batching state.
final class WebRtcTransport {
    let id: TransportId
    let index: TransportIndex
    /// Passed by argument: for the libnice C callbacks (`iceReceive`, `iceStateChanged`) to hand
    /// this transport's outcomes to its worker. The transport itself never calls it.
    unowned let worker: WorkerCore
    private var ice: IceAgent?
    /// The agent of an ICE restart under way (`restartIce`): it answers the peer's checks with
    /// the new credentials while media goes on through `ice`, and replaces `ice` once it has a
    /// pair. DTLS and SRTP are untouched by a restart.
    private var restartingIce: IceAgent?
    /// The worker's GLib context (agents are made and freed on it).
    private var context: OpaquePointer?
    let secure: SecureTransport
    private var sender = DatagramSender()
    /// ICE restarts completed (the new agent took over).
    private(set) var iceRestarts = 0
    /// The worker's reader of established sockets (nil: every datagram comes through libnice).
    private let direct: DirectReceiver?
    /// While the worker reads the selected pair's socket itself (`refreshDirect`): that socket,
    /// the peer's address on the pair, and our ICE credentials (NUL-terminated) to answer the
    /// peer's consent checks with. -1 otherwise.
    private(set) var directFd: Int32 = -1
    private(set) var directPeer = sockaddr_storage()
    private var directUfrag = ContiguousArray<CChar>()
    private var directPwd = ContiguousArray<CChar>()

    /// Where libnice runs the agents' timers (`WorkerCore.agentTimers`; nil: the worker's context).
    private let agentTimers: OpaquePointer?

    /// A client's, or either side of a relay between nodes (`TransportRole`).
    let role: TransportRole
    /// The connecting side of a relay: a full-ICE controlling agent. Its socket stays with
    /// libnice (`refreshDirect`): the responses to its own consent checks must reach it.
    var relayClient: Bool { role == .relayClient }
    /// Either side of a relay: its RTP is counted in `WorkerCounters.relay`.
    var isRelay: Bool { role.isRelay }

    init(id: TransportId, index: TransportIndex, worker: WorkerCore, secure: SecureTransport, direct: DirectReceiver? = nil,
         agentTimers: OpaquePointer? = nil, role: TransportRole = .client) {
        self.role = role
        self.id = id
        self.index = index
        self.worker = worker
        self.secure = secure
        self.direct = direct
        self.agentTimers = agentTimers
    }

    var srtp: SrtpSession? { secure.srtp }

    /// Creates the ICE agent (separate from init so `self` can be handed to C).
    func open(runtime: CryptoRuntime, context: OpaquePointer, configuration: IceConfiguration) throws -> TransportDescription {
        let ice = try makeAgent(context: context, configuration: configuration)
        self.ice = ice
        self.context = context
        return describe(ice, runtime: runtime, configuration: configuration)
    }

    private func makeAgent(context: OpaquePointer, configuration: IceConfiguration) throws -> IceAgent {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let agent = try IceAgent(context: context, timers: agentTimers,
                                 configuration: relayClient ? configuration.forRelayClient : configuration, owner: me)
        agent.onSelectedPairChange(transportSelectedPairChanged, owner: me)
        return agent
    }

    private func describe(_ agent: IceAgent, runtime: CryptoRuntime, configuration: IceConfiguration) -> TransportDescription {
        TransportDescription(id: id, iceUfrag: agent.localUfrag, icePwd: agent.localPwd,
                             candidates: agent.localCandidates(), fingerprint: runtime.fingerprint,
                             iceLite: configuration.lite && !relayClient)
    }

    /// Starts an ICE restart (RFC 8445 9): a new agent with fresh credentials and candidates,
    /// beside the current one, which keeps carrying media until the new one has a pair (then it
    /// is freed). The next `setRemote` gives the new agent the peer's new credentials. A restart
    /// while one is under way replaces it. The silence timeouts count from now.
    func restartIce(runtime: CryptoRuntime, configuration: IceConfiguration, now: Nanoseconds) throws -> TransportDescription {
        guard let context, ice != nil else { throw IceAgent.Failure.stream }
        let fresh = try makeAgent(context: context, configuration: configuration)
        restartingIce?.close(context: context)
        restartingIce = fresh
        secure.heard(at: now)
        return describe(fresh, runtime: runtime, configuration: configuration)
    }

    /// Whether an ICE restart is waiting for its first pair.
    var isRestartingIce: Bool { restartingIce != nil }

    /// Connected (ICE and DTLS) with no ICE restart under way: its agent needs no check pacing.
    var isSettled: Bool { secure.state == .connected && restartingIce == nil }

    /// Applies the remote ICE credentials, candidates, fingerprint and DTLS role (during an ICE
    /// restart the credentials and candidates go to the restart's agent).
    func setRemote(_ remote: RemoteTransportParameters) -> TransportUpdate {
        guard let ice = restartingIce ?? ice else { return .none }
        ice.setRemoteCredentials(ufrag: remote.iceUfrag, pwd: remote.icePwd)
        for c in remote.candidates { ice.addRemoteCandidate(c) }
        if remote.endOfCandidates { ice.endOfRemoteCandidates() }
        // The remote's "passive" makes us the DTLS client; "active"/"actpass" the server.
        return sendingHandshake(secure.setRemote(fingerprint: (remote.fingerprintAlgorithm, remote.fingerprint),
                                                 role: remote.setup == "passive" ? .client : .server))
    }

    func addRemoteCandidate(_ candidate: String?) {
        guard let ice = restartingIce ?? ice else { return }
        if let candidate, !candidate.isEmpty { ice.addRemoteCandidate(candidate) } else { ice.endOfRemoteCandidates() }
    }

    func close(context: OpaquePointer) {
        leaveDirect(handBack: false)
        secure.close()
        _ = sendingHandshake(.none)   // close_notify, while the agent still exists
        ice?.close(context: context)
        ice = nil
        restartingIce?.close(context: context)
        restartingIce = nil
    }

    // MARK: Inputs (libnice callbacks and the worker's timer, on the worker thread)

    /// A component state change of `agent` (the current one or a restart's).
    func iceChanged(_ progress: IceProgress, agent: OpaquePointer?) -> TransportUpdate {
        if let fresh = restartingIce, fresh.agent == agent {
            // The restart's agent: once it has a pair it takes over and the old one goes. Until
            // then its failures change nothing (the client may restart again).
            guard progress == .connected, let context else { return .none }
            leaveDirect(handBack: false)
            ice?.close(context: context)
            ice = fresh
            restartingIce = nil
            iceRestarts += 1
            sender.reset()
            return iceChanged(.connected)
        }
        guard let current = ice, current.agent == agent else { return .none }   // a freed agent's late signal
        // The old pair failing while a restart is under way is what the restart is for.
        if progress == .failed, restartingIce != nil { return .none }
        return iceChanged(progress)
    }

    func iceChanged(_ progress: IceProgress) -> TransportUpdate {
        if progress == .connected {
            sender.reset()
            resendHeldHandshake()
        }
        return sendingHandshake(secure.iceChanged(progress))
    }

    /// One datagram from libnice, decrypted in place. `engine` is only asked whether an SSRC is
    /// expected here (a read, before `srtp_unprotect`).
    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer, now: Nanoseconds, engine: MediaEngine) -> ReceiveOutcome {
        let index = self.index
        let outcome = secure.received(datagram, now: now) { ssrc, packet in engine.expectsPacket(ssrc, packet, on: index) }
        if case .handshake(let update) = outcome { return .handshake(sendingHandshake(update)) }
        return outcome
    }

    /// When the RTP packet just received reached the host: the kernel's timestamp of the last
    /// datagram on the selected pair's UDP socket (libnice hands each datagram over as soon as
    /// it read it), if it is plausible (not after `now`, at most 1 s before); else 0 (`now`
    /// then stands for it). After the worker was kept from running, packets that waited in the
    /// socket buffer keep their real spacing in the feedback a publisher's estimator reads.
    /// One `ioctl` per call: the worker asks only where the engine records arrivals
    /// (`MediaEngine.recordsArrivals`).
    @inline(__always)
    func kernelArrival(now: Nanoseconds) -> Nanoseconds {
        if !sender.isResolved, let ice { sender.resolve(ice) }
        guard sender.fd >= 0 else { return 0 }
        return Self.plausibleArrival(minato_last_arrival_ns(sender.fd), now: now)
    }

    func deadline(now: Nanoseconds) -> Nanoseconds { secure.deadline(now: now) }

    func handleTimeout(now: Nanoseconds) -> TransportUpdate {
        if secure.state == .connected, let heard = lastDatagramArrival(now: now) { secure.heard(at: heard) }
        return sendingHandshake(secure.handleTimeout(now: now))
    }

    /// When the selected pair's UDP socket last received anything (media, DTLS, or the ICE
    /// consent checks libnice answers and never passes on), from the kernel's timestamp; nil
    /// when not known (no pair yet, a TCP or relayed pair, nothing received since timestamps
    /// were turned on).
    private func lastDatagramArrival(now: Nanoseconds) -> Nanoseconds? {
        if !sender.isResolved, let ice { sender.resolve(ice) }
        guard sender.fd >= 0 else { return nil }
        let arrival = minato_last_arrival_ns(sender.fd)
        return arrival != 0 && arrival <= now ? arrival : nil
    }

    /// Sends the DTLS datagrams `secure` queued, then passes `update` on. A datagram libnice
    /// cannot send yet is held for when ICE selects a pair: an ICE-lite agent has none until the
    /// peer's nominating check, and a DTLS client whose own ICE finished first may send its
    /// ClientHello before that; without holding the answer it would wait for the DTLS
    /// retransmission timer (1 s in OpenSSL).
    private func sendingHandshake(_ update: TransportUpdate) -> TransportUpdate {
        while let d = secure.pollDatagram() {
            guard let ice else { continue }
            let sent = d.withUnsafeBytes { b in b.baseAddress.map { ice.send($0, length: b.count) } ?? false }
            if !sent {
                if heldHandshake.count == Self.maxHeldHandshake { heldHandshake.removeFirst() }
                heldHandshake.append(d)
            }
        }
        return update
    }

    private func resendHeldHandshake() {
        guard let ice, !heldHandshake.isEmpty else { return }
        let held = heldHandshake
        heldHandshake.removeAll()
        for d in held {
            _ = d.withUnsafeBytes { b in b.baseAddress.map { ice.send($0, length: b.count) } }
        }
        handshakeDatagramsHeld &+= held.count
    }

    /// Sends SCTP packets as DTLS application records through ICE (false: DTLS is not up).
    func sendApplicationData(_ packets: [[UInt8]]) -> Bool {
        var ok = true
        for p in packets { ok = p.withUnsafeBytes { secure.writeApplicationData($0) } && ok }
        _ = sendingHandshake(.none)
        return ok
    }

    /// The DTLS role this transport took (nil before the SDP exchange gave one).
    var dtlsRole: DtlsTransport.Role? { secure.dtlsRole }

    /// DTLS datagrams held until ICE could send them (at most `maxHeldHandshake`, oldest dropped:
    /// the DTLS timer resends a flight anyway).
    private var heldHandshake: [[UInt8]] = []
    static let maxHeldHandshake = 16
    /// How many held DTLS datagrams went out once ICE was up (for tests and logs).
    private(set) var handshakeDatagramsHeld = 0

    // MARK: Sending

    /// Sends already protected datagrams (`count` <= `SendBatch.maxPerCall`) to the peer and
    /// sets `sent[i]` to 1 for each the kernel took, 0 for each it refused. Returns false (and
    /// sends nothing) when ICE is not connected. On a plain UDP pair: `sendmmsg` on its socket,
    /// runs of equal-size packets as UDP GSO messages while `gso` holds (cleared when the kernel
    /// refuses GSO); otherwise (TCP, TURN) `nice_agent_send` per packet, each counted alone.
    @inline(__always)
    func send(_ bases: UnsafeMutablePointer<UnsafeMutableRawPointer?>, _ lengths: UnsafeMutablePointer<Int>, count: Int,
              sent: UnsafeMutablePointer<UInt8>, gso: inout Bool) -> Bool {
        guard secure.iceIsConnected else { return false }
        if !sender.isResolved {
            guard let ice else { return false }
            sender.resolve(ice)
        }
        if sender.usesAgent {
            guard let ice else { return false }
            for i in 0..<count {
                sent[i] = bases[i].map { ice.send($0, length: lengths[i]) ? 1 : 0 } ?? 0
            }
            return true
        }
        sender.send(bases, lengths, count: count, sent: sent, gso: &gso)
        return true
    }

    func selectedPairChanged() {
        sender.reset()
        resendHeldHandshake()
        refreshDirect()
    }

    // MARK: Direct receive (DirectReceiver)

    /// Hands the selected pair's socket to the worker's `DirectReceiver` while this transport is
    /// connected (ICE, DTLS, SRTP) on a plain UDP pair with no ICE restart under way, and back
    /// to libnice when that no longer holds or the pair changed. Call after anything that can
    /// change it (the worker does after ICE and DTLS changes; a new selected pair does here).
    func refreshDirect() {
        guard let direct, context != nil else { return }
        let eligible = secure.state == .connected && restartingIce == nil && ice != nil && !relayClient
        if directFd >= 0 {
            if !sender.isResolved, let ice { sender.resolve(ice) }
            let samePair = eligible && sender.fd == directFd && withUnsafePointer(to: sender.peer) { a in
                withUnsafePointer(to: directPeer) { b in minato_same_address(a, b) != 0 }
            }
            if samePair { return }
            leaveDirect(handBack: false)
        }
        guard eligible, let ice else { return }
        if !sender.isResolved { sender.resolve(ice) }
        // A pair whose peer address is the socket's connected one (peerLength 0) is not libnice's.
        guard sender.fd >= 0, sender.peerLength > 0 else { return }
        guard direct.add(fd: sender.fd, key: DirectReceiver.key(index)) else { return }
        ice.attachReceive(context: direct.parking, owner: Unmanaged.passUnretained(self).toOpaque())
        directFd = sender.fd
        directPeer = sender.peer
        directUfrag = ContiguousArray(ice.localUfrag.utf8CString)
        directPwd = ContiguousArray(ice.localPwd.utf8CString)
    }

    /// Gives the socket back to libnice (`handBack`: because a datagram came that ICE must
    /// decide on; counted).
    func leaveDirect(handBack: Bool) {
        guard let direct, directFd >= 0 else { return }
        direct.remove(fd: directFd, handBack: handBack)
        directFd = -1
        if let ice, let context { ice.attachReceive(context: context, owner: Unmanaged.passUnretained(self).toOpaque()) }
    }

    /// A STUN datagram the worker read from the direct socket, from the pair's peer: answers an
    /// ICE check (the browser's consent checks, RFC 7675) with our credentials, as libnice would.
    /// Returns whether it was valid STUN (then the peer was heard at `now`); an invalid one (not
    /// authentic, not for us) is dropped by the caller. `reply`: `capacity` bytes of scratch for the response.
    func answerCheck(_ datagram: UnsafeRawBufferPointer, from: UnsafePointer<sockaddr_storage>,
                     reply: UnsafeMutablePointer<UInt8>, capacity: Int, now: Nanoseconds) -> Bool {
        guard directFd >= 0 else { return false }
        let outcome = directUfrag.withUnsafeBufferPointer { ufrag in
            directPwd.withUnsafeBufferPointer { pwd -> IceCheckResponder.Outcome in
                guard let ufrag = ufrag.baseAddress, let pwd = pwd.baseAddress else { return .invalid }
                return IceCheckResponder.answer(datagram, from: from, ufrag: ufrag, pwd: pwd, into: reply, capacity: capacity)
            }
        }
        switch outcome {
        case .invalid:
            return false
        case .ignore:
            // An indication (a libnice peer's keepalive) or a response: heard, as any datagram on
            // the pair counts while libnice reads the socket (`lastDatagramArrival`).
            secure.heard(at: now)
        case .answer(let length, _):
            // A nomination from the pair's own peer changes nothing: this pair is the selected one.
            secure.heard(at: now)
            _ = minato_send_to(directFd, reply, length, from)
        }
        return true
    }

    /// A kernel receive time read with the datagram (`DirectReceiver`), if plausible (not after
    /// `now`, at most 1 s before), else 0 (as `kernelArrival`).
    @inline(__always)
    static func plausibleArrival(_ arrival: Nanoseconds, now: Nanoseconds) -> Nanoseconds {
        arrival != 0 && arrival <= now && now &- arrival <= 1_000_000_000 ? arrival : 0
    }

    /// Connects this transport without libnice or DTLS: SRTP keyed directly and a UDP socket to
    /// send on (`WorkerBenchmarkRig` only).
    func connectDirectly(profile: SrtpProfile, local: [UInt8], remote: [UInt8], sender: DatagramSender) -> TransportUpdate {
        self.sender = sender
        secure.assumeIceConnected()
        return secure.connect(profile: profile, local: local, remote: remote)
    }
}

private func transportSelectedPairChanged(_ agent: OpaquePointer?, _ stream: guint, _ component: guint,
                                          _ local: UnsafeMutablePointer<NiceCandidate>?, _ remote: UnsafeMutablePointer<NiceCandidate>?,
                                          _ owner: gpointer?) {
    guard let owner else { return }
    Unmanaged<WebRtcTransport>.fromOpaque(owner).takeUnretainedValue().selectedPairChanged()
}

/// The direct send path of a transport: the selected pair's UDP socket and the peer's address,
/// so a batch goes out with one `sendmmsg` instead of one `nice_agent_send` each.
struct DatagramSender {
    /// -2: not resolved yet; -1: send through the agent (no pair, TCP or relay); else the fd.
    private(set) var fd: Int32 = -2
    private(set) var peer = sockaddr_storage()
    private(set) var peerLength: UInt32 = 0

    init() {}

    /// A sender on `fd` to `peer` (`peerLength` 0: the socket's connected peer).
    init(fd: Int32, peer: sockaddr_storage, peerLength: UInt32) {
        self.fd = fd; self.peer = peer; self.peerLength = peerLength
    }

    var isResolved: Bool { fd != -2 }
    var usesAgent: Bool { fd == -1 }

    mutating func reset() { fd = -2 }

    mutating func resolve(_ ice: IceAgent) {
        fd = max(-1, ice.selectedUdpSocket(peer: &peer, length: &peerLength))
        // Turns the socket's receive timestamps on (the first SIOCGSTAMPNS does), so the
        // silence timeouts can read when the peer's last consent check arrived.
        if fd >= 0 { _ = minato_last_arrival_ns(fd) }
    }

    /// `minato_send_batch`: `sent[i]` tells which datagrams the kernel took. With `gso`, tries
    /// UDP GSO first and clears `gso` for good if the kernel has none.
    @inline(__always)
    mutating func send(_ bases: UnsafeMutablePointer<UnsafeMutableRawPointer?>, _ lengths: UnsafeMutablePointer<Int>,
                       count: Int, sent: UnsafeMutablePointer<UInt8>, gso: inout Bool) {
        let n = UInt32(clamping: min(count, SendBatch.maxPerCall))
        for i in Int(n)..<max(Int(n), count) { sent[i] = 0 }   // beyond one call: not attempted
        if gso {
            if minato_send_batch(fd, &peer, peerLength, bases, lengths, n, 1, sent) != -2 { return }
            gso = false   // no UDP GSO here: plain sendmmsg from now on
        }
        _ = minato_send_batch(fd, &peer, peerLength, bases, lengths, n, 0, sent)
    }
}

/// Preallocated arrays for `WorkerCore.flush` (one per worker, owned by it): per outbox slot
/// the packet's base, clear length, kind and next slot of the same transport's chain; per
/// transport slot the chain's head and tail; and a scratch list for one send call. All are raw
/// memory: the flush loop writes them with no copy-on-write or exclusivity check.
final class SendBatch {
    static let maxPerCall = 64
    /// UDP GSO (one message per run of equal-size packets); cleared if the kernel refuses it.
    var gso = true
    let slots: Int
    /// Written by the flush loop before the chain that reads it (never read unwritten).
    let bases: UnsafeMutablePointer<UnsafeMutableRawPointer>
    let clearLengths: UnsafeMutablePointer<Int>
    let isRtcp: UnsafeMutablePointer<Bool>
    let next: UnsafeMutablePointer<Int32>
    /// Transport slots with a chain in this flush, in first-packet order.
    let touched: UnsafeMutablePointer<Int32>
    /// Per transport slot (`chainCapacity` of them): first and last outbox slot of its chain
    /// (-1: none). Grown on the control path (`reserve`), never during a flush.
    private(set) var heads: UnsafeMutablePointer<Int32>
    private(set) var tails: UnsafeMutablePointer<Int32>
    private(set) var chainCapacity = 0
    let scratchBases: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let scratchLengths: UnsafeMutablePointer<Int>
    /// The outbox slot of each scratch entry (for counting what was sent).
    let scratchSlots: UnsafeMutablePointer<Int32>
    /// Per scratch entry: 1 if the kernel took it (`minato_send_batch`).
    let scratchSent: UnsafeMutablePointer<UInt8>

    init(slots: Int) {
        self.slots = slots
        bases = .allocate(capacity: slots)
        clearLengths = .allocate(capacity: slots)
        isRtcp = .allocate(capacity: slots)
        next = .allocate(capacity: slots)
        touched = .allocate(capacity: slots)
        heads = .allocate(capacity: 0)
        tails = .allocate(capacity: 0)
        scratchBases = .allocate(capacity: Self.maxPerCall)
        scratchLengths = .allocate(capacity: Self.maxPerCall)
        scratchSlots = .allocate(capacity: Self.maxPerCall)
        scratchSent = .allocate(capacity: Self.maxPerCall)
    }

    /// Makes room for transport slots up to `slot` (control path).
    func reserve(transportSlot slot: Int) {
        guard slot >= chainCapacity else { return }
        let capacity = max(slot + 1, chainCapacity * 2, 16)
        let newHeads = UnsafeMutablePointer<Int32>.allocate(capacity: capacity)
        let newTails = UnsafeMutablePointer<Int32>.allocate(capacity: capacity)
        newHeads.initialize(repeating: -1, count: capacity)
        newTails.initialize(repeating: -1, count: capacity)
        newHeads.update(from: heads, count: chainCapacity)
        newTails.update(from: tails, count: chainCapacity)
        heads.deallocate()
        tails.deallocate()
        heads = newHeads
        tails = newTails
        chainCapacity = capacity
    }

    deinit {
        bases.deallocate(); clearLengths.deallocate(); isRtcp.deallocate()
        next.deallocate(); touched.deallocate(); heads.deallocate(); tails.deallocate()
        scratchBases.deallocate(); scratchLengths.deallocate(); scratchSlots.deallocate(); scratchSent.deallocate()
    }
}
