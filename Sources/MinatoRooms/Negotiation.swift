internal import MinatoTransport

/// A request waiting on a negotiation (its continuation is held by `RoomService`, by token).
typealias WaiterToken = UInt64

/// One peer connection's media transport as the room sees it: not there, being created (with
/// the requests waiting for it), or ready; and the client's ICE/DTLS parameters, which are
/// applied once, with every candidate trickled before that held until then.
/// A value type driven by `RoomService`; it performs nothing itself, it says what to do.
struct PeerTransport {
    enum State {
        case none
        case creating(waiting: [WaiterToken])
        case ready(TransportDescription)
    }
    enum Remote {
        /// Not applied yet: candidates trickled so far (nil = end of candidates) and their bytes.
        case pending(candidates: [String?], bytes: Int)
        case applied
    }
    enum Need {
        /// Create the transport, then call `created` or `failed`.
        case create
        /// Another request is creating it: wait to be resumed.
        case wait
        case ready(TransportDescription)
    }
    enum CandidateAction {
        case held
        /// Hand it to the transport now.
        case apply(TransportDescription, String?)
    }

    private(set) var state = State.none
    private(set) var remote = Remote.pending(candidates: [], bytes: 0)
    /// Candidates the client has trickled over the connection's life, and those of the description
    /// applied (`media.maxRemoteCandidates` counts them).
    private(set) var trickled = 0
    /// The client's ICE username fragment and DTLS fingerprint in the description applied (a
    /// later description with another ufrag is an ICE restart).
    private(set) var remoteUfrag: String?
    private(set) var remoteFingerprint: String?

    var description: TransportDescription? {
        if case .ready(let d) = state { return d }
        return nil
    }
    var isCreating: Bool {
        if case .creating = state { return true }
        return false
    }

    mutating func need(_ waiter: WaiterToken) -> Need {
        switch state {
        case .none:
            state = .creating(waiting: [])
            return .create
        case .creating(let waiting):
            state = .creating(waiting: waiting + [waiter])
            return .wait
        case .ready(let d):
            return .ready(d)
        }
    }

    /// The transport exists: the requests that waited for it go on.
    mutating func created(_ d: TransportDescription) -> [WaiterToken] {
        guard case .creating(let waiting) = state else { return [] }
        state = .ready(d)
        return waiting
    }

    /// Creation failed: the waiting requests go on and find no transport (the next one may try again).
    mutating func failed() -> [WaiterToken] {
        guard case .creating(let waiting) = state else { return [] }
        state = .none
        return waiting
    }

    /// A trickled candidate (nil = end of candidates): held until the remote parameters are
    /// applied, then handed straight to the transport. Limits: `maxCount` over the life of the
    /// connection, `maxHeldBytes` held at once.
    mutating func trickle(_ candidate: String?, maxCount: Int, maxHeldBytes: Int) throws(RoomError) -> CandidateAction {
        guard trickled < maxCount else {
            throw .limitExceeded("This member has trickled \(trickled) candidates on this connection, the maximum (media.maxRemoteCandidates).")
        }
        switch remote {
        case .applied:
            // Applied implies ready; there is nothing to hold a candidate for otherwise.
            guard case .ready(let d) = state else { return .held }
            trickled += 1
            return .apply(d, candidate)
        case .pending(let held, let bytes):
            let total = bytes + (candidate?.utf8.count ?? 0)
            guard total <= maxHeldBytes else {
                throw .limitExceeded("Candidates held for a connection whose transport is not ready may total \(maxHeldBytes) bytes (media.maxPendingCandidateBytes).")
            }
            remote = .pending(candidates: held + [candidate], bytes: total)
            trickled += 1
            return .held
        }
    }

    /// The client's description arrived, with `candidates` of its own: returns the held
    /// candidates to add to it, or nil when the remote parameters were applied already (later
    /// descriptions change nothing). Its candidates count with the trickled ones toward
    /// `maxCount` (over it: `limitExceeded`, nothing applied).
    mutating func applyRemote(candidates: Int = 0, maxCount: Int = .max, ufrag: String? = nil,
                              fingerprint: String? = nil) throws(RoomError) -> [String?]? {
        guard case .pending(let held, _) = remote else { return nil }
        guard candidates <= maxCount - trickled else {
            throw .limitExceeded("The description's \(candidates) candidates and the \(trickled) trickled for this connection are more than \(maxCount) (media.maxRemoteCandidates).")
        }
        remote = .applied
        trickled += candidates
        remoteUfrag = ufrag
        if remoteFingerprint == nil { remoteFingerprint = fingerprint }
        return held
    }

    /// Whether a description from the client restarts ICE: its parameters were applied before,
    /// and it has another username fragment. A restart must keep the DTLS certificate (DTLS is
    /// not renegotiated): another fingerprint is refused.
    func restarts(ufrag: String, fingerprint: String) throws(RoomError) -> Bool {
        guard case .applied = remote, let applied = remoteUfrag, applied != ufrag else { return false }
        if let known = remoteFingerprint, known.lowercased() != fingerprint.lowercased() {
            throw .invalidParameter("An ICE restart keeps the DTLS certificate: this description's fingerprint differs from the connection's (DTLS restarts are not supported).")
        }
        return true
    }

    /// An ICE restart made the transport's new local credentials and candidates `d`: the next
    /// description from the client is applied (its new credentials go to the restart's agent),
    /// and candidates trickled from now on belong to the new ICE generation, counted afresh.
    mutating func restarted(_ d: TransportDescription) {
        guard case .ready = state else { return }
        state = .ready(d)
        remote = .pending(candidates: [], bytes: 0)
        trickled = 0
    }
}

/// The receive connection's offer/answer (the server offers, the client answers), as a state
/// machine. Offers are serialised: while one is out, requests that need to make the next one
/// (`subscribe`, `unsubscribe`) wait in order, and a change the server makes on its own (a
/// publication ended) is remembered and offered after the answer. Time comes in as values.
struct ReceiveNegotiation<Instant: Comparable> {
    enum State {
        /// No offer out. `owed`: the server's side changed while no connection could be told.
        case idle(owed: Bool)
        /// Stable, and reserved for `holder`, a request that was resumed and will offer (or release).
        case granted(holder: WaiterToken, waiting: [WaiterToken], owed: Bool)
        /// An offer is out until `deadline`. `owed`: something changed since it was made.
        case offered(deadline: Instant, waiting: [WaiterToken], owed: Bool)
        case closed
    }
    enum Action: Equatable {
        /// Resume this request: it may make the next offer now (in the same actor turn).
        case proceed(WaiterToken)
        /// Resume this request: the connection is gone.
        case fail(WaiterToken)
        /// Make an offer now and send it as the notification `offer` (then call `offerSent`).
        case sendOffer
    }
    enum Acquired: Equatable {
        case proceed
        case wait
        case closed
    }

    private(set) var state = State.idle(owed: false)

    var deadline: Instant? {
        if case .offered(let d, _, _) = state { return d }
        return nil
    }
    var offerOutstanding: Bool { deadline != nil }

    /// A request wants to make the next offer.
    mutating func acquire(_ waiter: WaiterToken) -> Acquired {
        switch state {
        case .idle(let owed):
            state = .granted(holder: waiter, waiting: [], owed: owed)
            return .proceed
        case .granted(let holder, let waiting, let owed):
            state = .granted(holder: holder, waiting: waiting + [waiter], owed: owed)
            return .wait
        case .offered(let deadline, let waiting, let owed):
            state = .offered(deadline: deadline, waiting: waiting + [waiter], owed: owed)
            return .wait
        case .closed:
            return .closed
        }
    }

    /// The holder (or, for `sendOffer`, the service itself: `holder` nil) sent an offer.
    mutating func offerSent(by holder: WaiterToken?, deadline: Instant) {
        switch state {
        case .granted(let h, let waiting, _) where h == holder:
            state = .offered(deadline: deadline, waiting: waiting, owed: false)
        case .idle where holder == nil:
            state = .offered(deadline: deadline, waiting: [], owed: false)
        case .offered(_, let waiting, _) where holder == nil:
            // A re-offer on a new connection replaces the one that was lost with the old one.
            state = .offered(deadline: deadline, waiting: waiting, owed: false)
        default:
            break
        }
    }

    /// The holder made no offer after all (its request failed): the next request goes on.
    mutating func release(_ holder: WaiterToken, connected: Bool) -> [Action] {
        guard case .granted(let h, let waiting, let owed) = state, h == holder else { return [] }
        return next(waiting: waiting, owed: owed, connected: connected)
    }

    /// The client answered the outstanding offer. Throws when no offer is out.
    mutating func answered(connected: Bool) throws(RoomError) -> [Action] {
        guard case .offered(_, let waiting, let owed) = state else {
            throw .invalidParameter("No server offer is waiting for an answer from this member.")
        }
        return next(waiting: waiting, owed: owed, connected: connected)
    }

    /// The outstanding offer was not answered by its deadline: go on as if it had been.
    mutating func timedOut(now: Instant, connected: Bool) -> [Action] {
        guard case .offered(let deadline, let waiting, let owed) = state, now >= deadline else { return [] }
        return next(waiting: waiting, owed: owed, connected: connected)
    }

    /// The server changed the connection on its own (a subscription ended).
    mutating func serverChanged(connected: Bool) -> [Action] {
        switch state {
        case .idle:
            if connected { return [.sendOffer] }
            state = .idle(owed: true)
        case .granted(let h, let waiting, _):
            state = .granted(holder: h, waiting: waiting, owed: true)
        case .offered(let d, let waiting, _):
            state = .offered(deadline: d, waiting: waiting, owed: true)
        case .closed:
            break
        }
        return []
    }

    /// The member was taken over on a new connection: an offer sent to the old one may never
    /// have arrived, so the current state is offered again; an owed offer goes out now.
    mutating func reconnected() -> [Action] {
        switch state {
        case .offered: return [.sendOffer]
        case .idle(let owed): return owed ? [.sendOffer] : []
        case .granted, .closed: return []
        }
    }

    /// The member is gone: every waiting request fails.
    mutating func close() -> [Action] {
        let waiting: [WaiterToken]
        switch state {
        case .granted(_, let w, _), .offered(_, let w, _): waiting = w
        case .idle, .closed: waiting = []
        }
        state = .closed
        return waiting.map { .fail($0) }
    }

    private mutating func next(waiting: [WaiterToken], owed: Bool, connected: Bool) -> [Action] {
        if let first = waiting.first {
            // Its offer will carry every change, owed ones included.
            state = .granted(holder: first, waiting: Array(waiting.dropFirst()), owed: owed)
            return [.proceed(first)]
        }
        if owed && connected {
            state = .idle(owed: false)
            return [.sendOffer]
        }
        state = .idle(owed: owed)
        return []
    }
}
