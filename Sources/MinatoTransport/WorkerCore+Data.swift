internal import MinatoWire
internal import MinatoMedia

/// Data channels on a worker (`DataRouter`): the control plane's commands, the DTLS
/// application records of a transport that negotiated data, and usrsctp's timers.
extension WorkerCore {
    /// Starts (once) an SCTP association on transport `id` toward the peer's `remotePort`
    /// (`a=sctp-port`); it connects as soon as DTLS is up.
    public func enableData(on id: TransportId, remotePort: UInt16) throws {
        guard let t = transports[id] else { throw WorkerError.unknownTransport(id) }
        guard data.endpoints[id] == nil else { return }
        let association: SctpAssociation
        do {
            association = try SctpAssociation(remotePort: remotePort, maxMessageBytes: data.limits.maxMessageBytes,
                                              sendBufferBytes: data.limits.maxBufferedBytes)
        } catch {
            throw WorkerError.transport("no SCTP association: \(error)")
        }
        let e = DataEndpoint(transportId: id, association: association, tokens: Double(max(1, data.limits.maxMessagesPerSec)),
                             write: { [unowned t] packets in _ = t.sendApplicationData(packets) },
                             role: { [unowned t] in t.secure.dtlsRoleInUse })
        data.endpoints[id] = e
        t.secure.setApplicationDataSink { [unowned association] bytes in association.input(bytes) }
        if t.secure.state == .connected { association.connect() }
        if dataTickAt == .max { dataTickAt = monotonicNow() &+ SctpStack.tick }
    }

    /// Publication `pid` is carried by the channel labelled `label` on transport `id` (bound
    /// now if the publisher opened it already, else when it does).
    public func addDataPublication(_ pid: String, on id: TransportId, label: String, enabled: Bool) throws {
        guard let e = data.endpoints[id] else { throw WorkerError.unknownTransport(id) }
        data.addPublication(pid, on: e, label: label, enabled: enabled)
    }

    public func setDataPublicationEnabled(_ pid: String, _ enabled: Bool) { data.publications[pid]?.enabled = enabled }

    /// Ends a data publication (its subscriptions' channels are closed).
    public func removeDataPublication(_ pid: String) {
        data.removePublication(pid)
        data.flush()
    }

    /// Subscription `sid` receives publication `pid` on transport `id`: the server opens a
    /// channel (label: the subscription id, protocol: the publication id) once the association
    /// is up.
    public func addDataSubscription(_ sid: String, publication pid: String, on id: TransportId,
                                    ordered: Bool, maxRetransmits: UInt32?) throws {
        guard let e = data.endpoints[id] else { throw WorkerError.unknownTransport(id) }
        guard data.publications[pid] != nil else { throw WorkerError.transport("no data publication \(pid) on this worker") }
        data.subscriptions[sid] = DataRouter.Subscription(transport: id, publication: pid,
                                                          reliability: Dcep.Reliability(ordered: ordered, maxRetransmits: maxRetransmits))
        data.publications[pid]?.subscriptions.append(sid)
        data.open(sid, on: e)
        data.flush()
    }

    public func removeDataSubscription(_ sid: String) {
        data.removeSubscription(sid)
        data.flush()
    }

    /// The data counters (messages, bytes, drops by `DataDropReason.name`).
    public var dataCounters: DataCounters {
        var drops: [String: UInt64] = [:]
        for r in DataDropReason.allCases { drops[r.name] = data.drops[r.rawValue] }
        return DataCounters(messagesReceived: data.messagesReceived, messagesForwarded: data.messagesForwarded,
                            bytesForwarded: data.bytesForwarded, drops: drops, associations: data.endpoints.count)
    }

    // MARK: Hooks (MediaWorker.swift)

    /// After a DTLS datagram on `t`: what its association received, then everything written.
    func dataReceived(on t: WebRtcTransport, now: Nanoseconds) {
        guard let e = data.endpoints[t.id] else { return }
        data.drain(e, now: now)
        finishData()
    }

    /// `t` connected (DTLS is up): its association starts.
    func dataConnected(_ t: WebRtcTransport) {
        guard let e = data.endpoints[t.id] else { return }
        e.association.connect()
        e.flush()
    }

    func dataTransportClosed(_ id: TransportId) {
        data.removeEndpoint(id)
        if data.endpoints.isEmpty { dataTickAt = .max }
    }

    /// usrsctp's timers (every `SctpStack.tick` while this worker has an association), then
    /// each association's input and output.
    func dataTick(now: Nanoseconds) {
        guard !data.endpoints.isEmpty else { dataTickAt = .max; return }
        dataTickAt = now &+ SctpStack.tick
        SctpStack.shared.advanceTimers(now: now)
        for e in data.endpoints.values { data.drain(e, now: now) }
        finishData()
    }

    private func finishData() {
        data.flush()
        guard !data.notices.isEmpty else { return }
        let notices = data.notices
        data.notices.removeAll()
        for n in notices {
            switch n {
            case .overflow(let sid): eventSink.yield(.dataSubscriptionOverflow(subscriptionId: sid))
            case .error(let id, let label, let reason, let detail):
                eventSink.yield(.dataChannelError(id, label: label, reason: reason, detail: detail))
            }
        }
    }
}

/// Data channel counters of a worker (read through `perform`).
public struct DataCounters: Sendable {
    public var messagesReceived: UInt64 = 0
    public var messagesForwarded: UInt64 = 0
    public var bytesForwarded: UInt64 = 0
    public var drops: [String: UInt64] = [:]
    public var associations = 0
    public init(messagesReceived: UInt64 = 0, messagesForwarded: UInt64 = 0, bytesForwarded: UInt64 = 0,
                drops: [String: UInt64] = [:], associations: Int = 0) {
        self.messagesReceived = messagesReceived; self.messagesForwarded = messagesForwarded
        self.bytesForwarded = bytesForwarded; self.drops = drops; self.associations = associations
    }
}
