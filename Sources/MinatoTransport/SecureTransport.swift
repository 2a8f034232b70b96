internal import MinatoMedia
internal import MinatoWire

/// What a transport's input means to its driver (the driver decides what follows).
enum TransportUpdate: Equatable {
    case none
    /// ICE, DTLS and SRTP are up: media can flow.
    case connected
    /// The transport cannot go on; its driver closes it and reports why.
    case failed(TransportCloseReason)
}

/// What a transport made of one received datagram. Media comes back decrypted in place (the
/// buffer is still the caller's, borrowed for the duration of the call).
enum ReceiveOutcome {
    case rtp(UnsafeMutableRawBufferPointer)
    case rtcp(UnsafeRawBufferPointer)
    case dropped(DropReason)
    /// DTLS traffic was consumed (its timer may have moved; flights may wait in `pollDatagram`).
    case handshake(TransportUpdate)
}

/// The timeouts a `SecureTransport` enforces (0 disables one).
struct TransportTimeouts: Equatable {
    /// ICE and DTLS must both be up this long after the transport was made.
    var connect: Nanoseconds
    /// A connected transport that carried media is closed after this long with nothing heard
    /// from the peer: no SRTP or SRTCP, and no other datagram its driver reports (`heard`: on
    /// the server, the ICE consent checks a browser keeps sending, so a muted member stays).
    var media: Nanoseconds
    /// A connected transport that never carried media is closed after this long with nothing
    /// heard (RFC 7675's 30 s consent lifetime on the server).
    var consent: Nanoseconds = 0
}

/// The sans-IO heart of one WebRTC transport, shared by the server (`WebRtcTransport`) and the
/// client SDK (`ClientConnection`): DTLS over memory, SRTP keyed from it, the connection's
/// state and its timeouts. It touches no socket and reads no clock.
///
/// Inputs, each with the current time: the remote's fingerprint and our DTLS role
/// (`setRemote`), ICE progress (`iceChanged`), a received datagram (`received`), and the
/// timer (`handleTimeout` when `deadline` is reached). Outputs: a `TransportUpdate` or
/// `ReceiveOutcome` per input, DTLS datagrams to send through ICE (`pollDatagram`, drained by
/// the driver after every input), and the next deadline. The driver owns ICE (libnice, or a
/// memory pipe in tests) and moves datagrams between it and this.
///
/// Time: the connect and media timeouts run on the `now` given; DTLS retransmissions on
/// OpenSSL's own (real) clock, which `deadline` converts to the caller's.
final class SecureTransport {
    enum State: Equatable { case new, connecting, connected, closed }

    private let dtls: DtlsTransport
    private(set) var srtp: SrtpSession?
    private(set) var state: State = .new
    private(set) var iceIsConnected = false
    /// Our DTLS role once the SDP exchange gave one.
    private(set) var dtlsRole: DtlsTransport.Role?
    let timeouts: TransportTimeouts
    let createdAt: Nanoseconds
    /// When SRTP or SRTCP last decrypted (nil: never), for the media timeout.
    private(set) var lastMediaAt: Nanoseconds?
    /// When anything else was last heard from the peer (`heard`), for both timeouts.
    private(set) var lastHeardAt: Nanoseconds?

    init(runtime: CryptoRuntime, now: Nanoseconds, timeouts: TransportTimeouts,
         srtpProfiles: String? = nil, dtlsRetransmitMicroseconds: UInt32? = nil) throws {
        dtls = try DtlsTransport(runtime: runtime, srtpProfiles: srtpProfiles,
                                 retransmitMicroseconds: dtlsRetransmitMicroseconds)
        createdAt = now
        self.timeouts = timeouts
    }

    /// The SRTP profile DTLS negotiated, once connected.
    var srtpProfile: SrtpProfile? { srtp?.profile }

    /// The next DTLS datagram to send through ICE (handshake flights, alerts, close_notify,
    /// application records).
    func pollDatagram() -> [UInt8]? { dtls.pollDatagram() }

    /// The DTLS role this end took (a server that never got `setRemote` takes the server
    /// role on the peer's ClientHello); nil until the handshake started.
    var dtlsRoleInUse: DtlsTransport.Role? { dtls.state == .new ? nil : dtls.role }

    /// Where DTLS application records (SCTP packets) received once connected go (nil: dropped).
    func setApplicationDataSink(_ sink: ((UnsafeRawBufferPointer) -> Void)?) { dtls.applicationData = sink }

    /// Sends one DTLS application record (an SCTP packet); the datagram waits in `pollDatagram`.
    func writeApplicationData(_ bytes: UnsafeRawBufferPointer) -> Bool {
        state == .connected && dtls.writeApplicationData(bytes)
    }

    // MARK: Inputs

    /// The remote's certificate fingerprint and our DTLS role from the SDP exchange (the first
    /// role given stays). A DTLS client starts its handshake once ICE is up too.
    func setRemote(fingerprint: (algorithm: String, value: String), role: DtlsTransport.Role) -> TransportUpdate {
        guard state != .closed else { return .none }
        dtls.remoteFingerprint = fingerprint
        guard dtlsRole == nil else { return .none }
        dtlsRole = role
        if state == .new { state = .connecting }
        return iceIsConnected && role == .client ? handle(dtls.start(role: .client)) : .none
    }

    func iceChanged(_ progress: IceProgress) -> TransportUpdate {
        switch progress {
        case .none: return .none
        case .failed: return state == .closed ? .none : fail(.iceFailed)
        case .connected:
            guard !iceIsConnected, state != .closed else { return .none }
            iceIsConnected = true
            // A DTLS server waits for the ClientHello (DtlsTransport takes the server role on it).
            return dtlsRole == .client ? handle(dtls.start(role: .client)) : .none
        }
    }

    /// The peer was heard at `time` (a datagram its driver saw that `received` does not: an ICE
    /// check, read from the kernel's timestamp; the moment DTLS connected; an ICE restart's
    /// request). Moves the media and consent timeouts; an earlier time changes nothing.
    func heard(at time: Nanoseconds) {
        if time > (lastHeardAt ?? 0) { lastHeardAt = time }
    }

    /// The connected transport's silence limit: from the later of the last media and the last
    /// thing heard, `media` once it carried media, else `consent` (nil: none applies).
    private var silenceDeadline: (at: Nanoseconds, reason: TransportCloseReason)? {
        if let media = lastMediaAt {
            guard timeouts.media > 0 else { return nil }
            return (saturatingAdd(max(media, lastHeardAt ?? 0), timeouts.media), .mediaTimeout(duration(timeouts.media)))
        }
        guard timeouts.consent > 0 else { return nil }
        return (saturatingAdd(lastHeardAt ?? createdAt, timeouts.consent), .consentTimeout(duration(timeouts.consent)))
    }

    /// One datagram from ICE (STUN was consumed there already), demultiplexed (RFC 7983) and,
    /// for SRTP/SRTCP, decrypted in place. `expects` is asked, before `srtp_unprotect`, whether
    /// an RTP packet's SSRC (from its clear header) belongs here: libsrtp would otherwise set
    /// up state for every new SSRC it sees.
    @inline(__always)
    func received(_ datagram: UnsafeMutableRawBufferPointer, now: Nanoseconds,
                  expects: (UInt32, UnsafeMutableRawBufferPointer) -> Bool) -> ReceiveOutcome {
        switch classifyPacket(UnsafeRawBufferPointer(datagram)) {
        case .rtp:
            guard let srtp, let base = datagram.baseAddress else { return .dropped(.noSrtpSession) }
            guard datagram.count >= RtpPacketView.fixedHeaderLength else { return .dropped(.malformedRtp) }
            let ssrc = UnsafeRawBufferPointer(datagram).loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian
            guard expects(ssrc, datagram) else { return .dropped(.unknownSsrc) }
            guard let n = srtp.unprotectRtp(base, length: datagram.count) else { return .dropped(.srtpUnprotectFailed) }
            lastMediaAt = now
            return .rtp(UnsafeMutableRawBufferPointer(start: base, count: n))
        case .rtcp:
            guard let srtp, let base = datagram.baseAddress else { return .dropped(.noSrtpSession) }
            guard let n = srtp.unprotectRtcp(base, length: datagram.count) else { return .dropped(.srtpUnprotectFailed) }
            lastMediaAt = now
            return .rtcp(UnsafeRawBufferPointer(start: base, count: n))
        case .dtls:
            let records = dtls.applicationRecordsRead
            let update = receiveDtls(UnsafeRawBufferPointer(datagram))
            // Data channels (SCTP in DTLS application records) count as hearing the peer.
            if dtls.applicationRecordsRead != records { heard(at: now) }
            return .handshake(update)
        case .stun, .unknown:
            return .dropped(.unknownPacket)
        }
    }

    /// One DTLS datagram (a driver that demultiplexes itself).
    func receiveDtls(_ datagram: UnsafeRawBufferPointer) -> TransportUpdate {
        guard state != .closed else { return .none }
        return handle(dtls.receive(datagram))
    }

    /// When this transport next needs `handleTimeout`: the DTLS retransmission timer while
    /// connecting, the connect timeout until connected, the media or consent timeout after (from
    /// the last thing heard, so it moves with traffic and is rechecked when it fires; a driver
    /// that learns of datagrams only when asked reports them with `heard` before
    /// `handleTimeout`). `.max`: never.
    func deadline(now: Nanoseconds) -> Nanoseconds {
        switch state {
        case .closed: return .max
        case .connected:
            return silenceDeadline?.at ?? .max
        case .new, .connecting:
            var soonest = timeouts.connect > 0 ? saturatingAdd(createdAt, timeouts.connect) : .max
            if state == .connecting, let ms = dtls.timeoutMilliseconds {
                soonest = min(soonest, saturatingAdd(now, UInt64(max(0, ms)) &* 1_000_000))
            }
            return soonest
        }
    }

    /// Runs whatever is due at `now` (see `deadline`).
    func handleTimeout(now: Nanoseconds) -> TransportUpdate {
        switch state {
        case .closed: return .none
        case .connected:
            if let limit = silenceDeadline, now >= limit.at { return fail(limit.reason) }
            return .none
        case .new, .connecting:
            if timeouts.connect > 0, now >= saturatingAdd(createdAt, timeouts.connect) {
                return fail(.connectTimeout(duration(timeouts.connect)))
            }
            guard state == .connecting, let ms = dtls.timeoutMilliseconds, ms == 0 else { return .none }
            return handle(dtls.handleTimeout())
        }
    }

    /// Ends DTLS (a connected transport queues close_notify: drain `pollDatagram` before
    /// closing ICE) and forgets the SRTP keys. Nothing is reported after this; a failure
    /// closes the transport the same way.
    func close() {
        guard state != .closed else { return }
        state = .closed
        dtls.close()
        srtp = nil
    }

    /// Keys SRTP directly, without DTLS (`WorkerBenchmarkRig`), or after DTLS exported the keys.
    func connect(profile: SrtpProfile, local: [UInt8], remote: [UInt8]) -> TransportUpdate {
        guard state != .closed else { return .none }
        do {
            srtp = try SrtpSession(profile: profile, localKeyAndSalt: local, remoteKeyAndSalt: remote)
            state = .connected
            return .connected
        } catch {
            return fail(.srtpSetupFailed)
        }
    }

    /// A failure is reported once: the transport is closed with it.
    private func fail(_ reason: TransportCloseReason) -> TransportUpdate {
        close()
        return .failed(reason)
    }

    /// Marks ICE up without an agent (`WorkerBenchmarkRig`).
    func assumeIceConnected() { iceIsConnected = true }

    private func handle(_ outcome: DtlsTransport.Outcome) -> TransportUpdate {
        switch outcome {
        case .none: return .none
        case .failed(let failure): return fail(.dtlsFailed(failure))
        case .connected(let profile, let local, let remote): return connect(profile: profile, local: local, remote: remote)
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
