internal import MinatoWire
internal import MinatoMedia

/// The limits of data channels on a worker (config `rooms.data.*`).
public struct DataLimits: Sendable, Equatable {
    /// The largest message accepted from a publisher (and `a=max-message-size` in the SDP).
    public var maxMessageBytes = 65536
    /// Per transport, bytes waiting for the peer (the SCTP send buffer); past it a lossy
    /// message is dropped and a reliable subscription closed (`dataBufferOverflow`).
    public var maxBufferedBytes = 1 << 20
    /// Messages a member's send transport may publish per second (a one-second burst).
    public var maxMessagesPerSec = 1000
    /// Data channels one transport may have open (its peer's and the server's together).
    public var maxChannelsPerTransport = 64
    public init() {}
}

/// Why a data message was not forwarded (exported in `/metrics` by `name`).
public enum DataDropReason: Int, CaseIterable, Sendable {
    case rateLimited, messageTooLarge, unboundChannel, publicationDisabled, bufferFull, bufferOverflow
    case invalidDcep, unsupportedPpid, sendFailed
    /// A subscription whose channel is not open yet (its association is not up, or the server's
    /// DATA_CHANNEL_OPEN has not gone out): it gets the messages from when its channel opens.
    case channelNotOpen

    public var name: String {
        switch self {
        case .rateLimited: return "rate_limited"
        case .messageTooLarge: return "message_too_large"
        case .unboundChannel: return "unbound_channel"
        case .publicationDisabled: return "publication_disabled"
        case .bufferFull: return "buffer_full"
        case .bufferOverflow: return "buffer_overflow"
        case .invalidDcep: return "invalid_dcep"
        case .unsupportedPpid: return "unsupported_ppid"
        case .sendFailed: return "send_failed"
        case .channelNotOpen: return "channel_not_open"
        }
    }
}

/// What the data router tells the control plane.
enum DataNotice {
    /// A reliable subscription's transport had no room for a message: it is closed here.
    case overflow(subscriptionId: String)
    /// The peer of `transport` sent something refused (`reason`: messageTooLarge,
    /// unknownDcepMessage, tooManyChannels), on the channel `label` when known.
    case error(TransportId, label: String?, reason: String, detail: String)
}

/// One transport's SCTP association and its data channels (RFC 8831: one association per
/// DTLS connection, a channel per stream). Confined to the worker's thread.
final class DataEndpoint {
    struct Channel {
        enum Use: Equatable { case unbound, publication(String), subscription(String) }
        var label: String
        var reliability: Dcep.Reliability
        var use: Use
        /// A channel the server opened: the peer's DATA_CHANNEL_ACK arrived.
        var acked = true
    }

    let transportId: TransportId
    let association: SctpAssociation
    /// Writes SCTP packets into DTLS toward the peer.
    let write: ([[UInt8]]) -> Void
    /// The DTLS role in use (the server's channels take odd stream ids as DTLS server).
    let role: () -> DtlsTransport.Role?
    var channels: [UInt16: Channel] = [:]
    /// Streams the server reset and the peer did not reset back yet (not reused until then).
    var closing: Set<UInt16> = []
    /// Labels the control plane bound to publications of this (send) transport.
    var publicationsByLabel: [String: String] = [:]
    /// Rate limit: tokens (messages) left and when they were last refilled.
    var tokens: Double
    var refilledAt: Nanoseconds = 0
    /// When an error notice of each reason was last reported (at most one a second per reason).
    var lastErrorAt: [String: Nanoseconds] = [:]

    init(transportId: TransportId, association: SctpAssociation, tokens: Double,
         write: @escaping ([[UInt8]]) -> Void, role: @escaping () -> DtlsTransport.Role?) {
        self.transportId = transportId
        self.association = association
        self.tokens = tokens
        self.write = write
        self.role = role
    }

    /// Hands what usrsctp wrote to DTLS.
    func flush() {
        let packets = association.outbox.take()
        if !packets.isEmpty { write(packets) }
    }

    /// The lowest free stream id of the server's parity (RFC 8832 6: the DTLS client takes
    /// even ids, the server odd), below 1024 (the streams asked for).
    func freeStream() -> UInt16? {
        guard let role = role() else { return nil }
        var id: UInt16 = role == .client ? 0 : 1
        while id < 1024 {
            if channels[id] == nil, !closing.contains(id) { return id }
            id += 2
        }
        return nil
    }
}

/// The data channels of one worker: the association of each transport that negotiated data,
/// which channel carries which publication or subscription, and the fan-out of each message a
/// publisher sends to every subscriber's channel. Not on the RTP path: it allocates, but every
/// buffer it feeds is bounded (`DataLimits`).
final class DataRouter {
    struct Publication {
        var transport: TransportId
        var label: String
        var enabled: Bool
        var subscriptions: [String] = []
    }
    struct Subscription {
        var transport: TransportId
        var publication: String
        var reliability: Dcep.Reliability
        var stream: UInt16?
        var isReliable: Bool { reliability.maxRetransmits == nil && reliability.maxPacketLifeTime == nil }
    }

    var limits: DataLimits
    var endpoints: [TransportId: DataEndpoint] = [:]
    var publications: [String: Publication] = [:]
    var subscriptions: [String: Subscription] = [:]
    /// Endpoints written to since their last flush.
    private var dirty: [DataEndpoint] = []
    var notices: [DataNotice] = []

    private(set) var messagesReceived: UInt64 = 0
    private(set) var messagesForwarded: UInt64 = 0
    private(set) var bytesForwarded: UInt64 = 0
    private(set) var drops = [UInt64](repeating: 0, count: DataDropReason.allCases.count)

    init(limits: DataLimits) { self.limits = limits }

    func drop(_ reason: DataDropReason, _ n: UInt64 = 1) { drops[reason.rawValue] &+= n }

    func touch(_ e: DataEndpoint) { if !dirty.contains(where: { $0 === e }) { dirty.append(e) } }

    /// Writes out what every touched endpoint's association produced.
    func flush() {
        let touched = dirty
        dirty.removeAll(keepingCapacity: true)
        for e in touched { e.flush() }
    }

    // MARK: Input

    /// Reads everything `e`'s association has for us and acts on it.
    func drain(_ e: DataEndpoint, now: Nanoseconds) {
        touch(e)
        e.association.receive { event in
            switch event {
            case .message(let stream, let ppid, let bytes): message(on: e, stream: stream, ppid: ppid, bytes, now: now)
            case .messageTooLarge(let stream):
                drop(.messageTooLarge)
                report(e, label: e.channels[stream]?.label, reason: "messageTooLarge",
                       detail: "A message on this data channel is larger than rooms.data.maxMessageBytes (\(limits.maxMessageBytes)); it was dropped.", now: now)
            case .up: associationUp(e)
            case .down: break
            case .incomingReset(let streams): peerReset(e, streams)
            }
        }
    }

    /// One user or DCEP message from `e`'s peer.
    func message(on e: DataEndpoint, stream: UInt16, ppid: UInt32, _ bytes: UnsafeRawBufferPointer, now: Nanoseconds) {
        if ppid == Dcep.Ppid.dcep {
            dcep(on: e, stream: stream, bytes, now: now)
            return
        }
        messagesReceived &+= 1
        guard Dcep.Ppid.isUserMessage(ppid) else { drop(.unsupportedPpid); return }
        guard bytes.count <= limits.maxMessageBytes else { drop(.messageTooLarge); return }
        guard let channel = e.channels[stream], case .publication(let pid) = channel.use, let pub = publications[pid] else {
            drop(.unboundChannel); return
        }
        guard take(token: e, now: now) else { drop(.rateLimited); return }
        guard pub.enabled else { drop(.publicationDisabled); return }
        var overflowed: [String] = []
        for sid in pub.subscriptions {
            guard let sub = subscriptions[sid], let stream = sub.stream, let out = endpoints[sub.transport],
                  let ch = out.channels[stream] else { drop(.channelNotOpen); continue }
            // Ordered until the peer acknowledged the channel (RFC 8832 6).
            let unordered = ch.acked && !sub.reliability.ordered
            switch out.association.send(stream: stream, ppid: ppid, bytes, unordered: unordered,
                                        maxRetransmits: sub.reliability.maxRetransmits) {
            case .sent:
                messagesForwarded &+= 1
                bytesForwarded &+= UInt64(bytes.count)
                touch(out)
            case .full:
                if sub.isReliable { drop(.bufferOverflow); overflowed.append(sid) } else { drop(.bufferFull) }
            case .failed:
                drop(.sendFailed)
            }
        }
        for sid in overflowed {
            removeSubscription(sid)
            notices.append(.overflow(subscriptionId: sid))
        }
    }

    private func take(token e: DataEndpoint, now: Nanoseconds) -> Bool {
        let rate = Double(max(1, limits.maxMessagesPerSec))
        if e.refilledAt == 0 { e.refilledAt = now }
        if now > e.refilledAt {
            e.tokens = min(rate, e.tokens + Double(now - e.refilledAt) / 1e9 * rate)
            e.refilledAt = now
        }
        guard e.tokens >= 1 else { return false }
        e.tokens -= 1
        return true
    }

    private func dcep(on e: DataEndpoint, stream: UInt16, _ bytes: UnsafeRawBufferPointer, now: Nanoseconds) {
        switch Dcep.parse(bytes) {
        case .failure(let error):
            drop(.invalidDcep)
            let reason: String
            if case .unknownType = error { reason = "unknownDcepMessage" } else { reason = "invalidDcepMessage" }
            report(e, label: e.channels[stream]?.label, reason: reason, detail: "The server received \(error) on SCTP stream \(stream); it was ignored.", now: now)
        case .success(.ack):
            e.channels[stream]?.acked = true
        case .success(.open(let open)):
            guard e.channels[stream] == nil, !e.closing.contains(stream) else {
                drop(.invalidDcep)
                report(e, label: open.label, reason: "invalidDcepMessage", detail: "A DATA_CHANNEL_OPEN for SCTP stream \(stream), which is in use.", now: now)
                return
            }
            guard e.channels.count < limits.maxChannelsPerTransport else {
                e.association.resetOutgoing([stream])
                e.closing.insert(stream)
                report(e, label: open.label, reason: "tooManyChannels",
                       detail: "A connection may have at most \(limits.maxChannelsPerTransport) data channels (rooms.data.maxChannelsPerTransport).", now: now)
                return
            }
            var channel = DataEndpoint.Channel(label: open.label, reliability: open.reliability, use: .unbound)
            if let pid = e.publicationsByLabel[open.label], publications[pid] != nil,
               !e.channels.values.contains(where: { $0.use == .publication(pid) }) {
                channel.use = .publication(pid)
            }
            e.channels[stream] = channel
            _ = Dcep.ackBytes.withUnsafeBytes {
                e.association.send(stream: stream, ppid: Dcep.Ppid.dcep, $0, unordered: false, maxRetransmits: nil)
            }
        }
    }

    /// At most one error notice per transport and reason per second (a peer cannot flood its
    /// signaling connection; the drops are counted all the same).
    private func report(_ e: DataEndpoint, label: String?, reason: String, detail: String, now: Nanoseconds) {
        if let last = e.lastErrorAt[reason], now &- last < 1_000_000_000 { return }
        e.lastErrorAt[reason] = now
        notices.append(.error(e.transportId, label: label, reason: reason, detail: detail))
    }

    private func associationUp(_ e: DataEndpoint) {
        for (sid, sub) in subscriptions where sub.transport == e.transportId && sub.stream == nil { open(sid, on: e) }
    }

    /// The peer reset streams: its channels closed (we reset ours back), or it answered our reset.
    private func peerReset(_ e: DataEndpoint, _ streams: [UInt16]) {
        var back: [UInt16] = []
        for s in streams {
            if e.closing.remove(s) != nil { continue }
            guard let ch = e.channels.removeValue(forKey: s) else { continue }
            if case .subscription(let sid) = ch.use { subscriptions[sid]?.stream = nil }
            back.append(s)
        }
        if !back.isEmpty {
            e.association.resetOutgoing(back)
            for s in back { e.closing.insert(s) }
        }
    }

    // MARK: Control

    /// Opens the subscription's channel on its transport (DATA_CHANNEL_OPEN with the
    /// subscription id as label) once the association is up.
    func open(_ sid: String, on e: DataEndpoint) {
        guard var sub = subscriptions[sid], sub.stream == nil, e.association.isUp, let stream = e.freeStream() else { return }
        guard e.channels.count < limits.maxChannelsPerTransport else { return }
        let message = Dcep.Open(reliability: sub.reliability, label: sid, protocol: sub.publication)
        let sent = message.bytes.withUnsafeBytes {
            e.association.send(stream: stream, ppid: Dcep.Ppid.dcep, $0, unordered: false, maxRetransmits: nil)
        }
        guard sent == .sent else { return }
        e.channels[stream] = DataEndpoint.Channel(label: sid, reliability: sub.reliability, use: .subscription(sid), acked: false)
        sub.stream = stream
        subscriptions[sid] = sub
        touch(e)
    }

    func removeSubscription(_ sid: String) {
        guard let sub = subscriptions.removeValue(forKey: sid) else { return }
        publications[sub.publication]?.subscriptions.removeAll { $0 == sid }
        if let stream = sub.stream, let e = endpoints[sub.transport] {
            e.channels[stream] = nil
            e.association.resetOutgoing([stream])
            e.closing.insert(stream)
            touch(e)
        }
    }

    func removePublication(_ pid: String) {
        guard let pub = publications.removeValue(forKey: pid) else { return }
        for sid in pub.subscriptions { removeSubscription(sid) }
        guard let e = endpoints[pub.transport] else { return }
        e.publicationsByLabel[pub.label] = nil
        for (stream, ch) in e.channels where ch.use == .publication(pid) { e.channels[stream]?.use = .unbound }
    }

    func addPublication(_ pid: String, on e: DataEndpoint, label: String, enabled: Bool) {
        publications[pid] = Publication(transport: e.transportId, label: label, enabled: enabled)
        e.publicationsByLabel[label] = pid
        if let stream = e.channels.first(where: { $0.value.use == .unbound && $0.value.label == label })?.key {
            e.channels[stream]?.use = .publication(pid)
        }
    }

    func removeEndpoint(_ id: TransportId) {
        guard let e = endpoints.removeValue(forKey: id) else { return }
        dirty.removeAll { $0 === e }
        for (pid, pub) in publications where pub.transport == id { removePublication(pid) }
        for (sid, sub) in subscriptions where sub.transport == id { removeSubscription(sid) }
        e.association.close()
    }
}
