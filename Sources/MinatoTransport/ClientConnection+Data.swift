public import MinatoWire

/// What a client connection's data channels report, on the worker thread (`onDataEvent`).
public enum ClientDataEvent {
    /// The SCTP association is up: channels can open and carry messages.
    case up
    /// The association ended (the peer shut it down or it was lost).
    case down
    /// A channel is open: one the peer opened (its DATA_CHANNEL_OPEN, acknowledged here), or
    /// one of ours the peer acknowledged.
    case opened(stream: UInt16, label: String, protocol: String)
    /// One message, string or binary (empty ones included); the bytes are borrowed for the call.
    case message(stream: UInt16, binary: Bool, UnsafeRawBufferPointer)
    /// A message longer than this end's `maxMessageBytes` arrived and was discarded.
    case tooLarge(stream: UInt16)
    /// The peer closed the channel (it reset its outgoing stream; ours is reset back).
    case closed(stream: UInt16)
}

/// What `ClientConnection.sendData` did with a message.
public enum DataSendResult: Sendable, Equatable {
    case sent
    /// The association's send buffer (`enableData`'s `sendBufferBytes`) has no room for it.
    case full
    /// No such open channel, or the association is not up.
    case notOpen
    case failed
}

/// The data channels of one client connection (RFC 8831/8832): one SCTP association in the
/// connection's DTLS, one channel per stream. Channels this end opens take even stream ids as
/// the DTLS client and odd ones as the DTLS server (RFC 8832 6). Worker-confined.
final class ClientDataChannels {
    struct Channel {
        var label: String
        var reliability: Dcep.Reliability
        /// Opened by this end (then `acked` once the peer's DATA_CHANNEL_ACK came).
        var ours: Bool
        var acked: Bool
    }

    let association: SctpAssociation
    var channels: [UInt16: Channel] = [:]
    /// Ours, opened before the association was up: their DATA_CHANNEL_OPEN goes out when it is.
    var unsent: [UInt16] = []
    /// Stream ids in use or used before, by either end (not reused while the connection lives).
    var used: Set<UInt16> = []

    init(association: SctpAssociation) { self.association = association }
}

extension ClientConnection {
    /// Makes the connection's SCTP association (the SDP's data section was accepted): it
    /// connects toward the peer's `remotePort` (`a=sctp-port`) as soon as DTLS is up.
    /// `maxMessageBytes` bounds a received message; `sendBufferBytes` what waits for the peer.
    public func enableData(remotePort: UInt16, maxMessageBytes: Int, sendBufferBytes: Int) throws {
        guard data == nil, state != .closed else { return }
        let association = try SctpAssociation(remotePort: remotePort, maxMessageBytes: maxMessageBytes,
                                              sendBufferBytes: sendBufferBytes)
        data = ClientDataChannels(association: association)
        secure.setApplicationDataSink { [unowned association] bytes in association.input(bytes) }
        if state == .connected {
            association.connect()
            pumpData()
        }
    }

    /// Whether `enableData` made the association.
    public var dataEnabled: Bool { data != nil }

    /// Whether the association is up.
    public var dataIsUp: Bool { data?.association.isUp ?? false }

    /// Whether channel `stream` can carry messages: the peer's, or ours once it acknowledged it
    /// (RFC 8832 allows sending earlier; waiting keeps a `publish` honest about the channel).
    public func dataChannelIsOpen(stream: UInt16) -> Bool {
        guard let data, data.association.isUp, let c = data.channels[stream] else { return false }
        return !c.ours || c.acked
    }

    /// Opens a channel labelled `label` (DCEP DATA_CHANNEL_OPEN; sent once the association is
    /// up). Returns its stream id, nil without `enableData` or a free stream id.
    public func openDataChannel(label: String, protocol: String = "", reliability: Dcep.Reliability) -> UInt16? {
        guard let data else { return nil }
        var stream: UInt16 = (secure.dtlsRoleInUse ?? secure.dtlsRole) == .server ? 1 : 0
        while data.used.contains(stream) {
            guard stream < 1022 else { return nil }
            stream += 2
        }
        data.used.insert(stream)
        data.channels[stream] = ClientDataChannels.Channel(label: label, reliability: reliability, ours: true, acked: false)
        let open = Dcep.Open(reliability: reliability, label: label, protocol: `protocol`)
        if data.association.isUp {
            sendDcep(open.bytes, stream: stream)
        } else {
            data.unsent.append(stream)
        }
        return stream
    }

    /// Sends one message on an open channel `stream` with the channel's reliability.
    public func sendData(stream: UInt16, _ bytes: UnsafeRawBufferPointer, binary: Bool) -> DataSendResult {
        guard let data, data.association.isUp, let channel = data.channels[stream], !data.unsent.contains(stream) else {
            return .notOpen
        }
        let ppid: UInt32 = bytes.isEmpty ? (binary ? Dcep.Ppid.emptyBinary : Dcep.Ppid.emptyString)
            : (binary ? Dcep.Ppid.binary : Dcep.Ppid.string)
        // RFC 8832 6.6: an unordered channel's messages are unordered once the peer acknowledged it.
        let unordered = !channel.reliability.ordered && (channel.acked || !channel.ours)
        let result = data.association.send(stream: stream, ppid: ppid, bytes, unordered: unordered,
                                           maxRetransmits: channel.reliability.maxRetransmits)
        flushData()
        switch result {
        case .sent: return .sent
        case .full: return .full
        case .failed: return .failed
        }
    }

    /// Closes channel `stream` (resets our outgoing stream, RFC 8831 6.7).
    public func closeDataChannel(stream: UInt16) {
        guard let data, data.channels.removeValue(forKey: stream) != nil else { return }
        data.unsent.removeAll { $0 == stream }
        data.association.resetOutgoing([stream])
        flushData()
    }

    // MARK: Worker hooks (ClientConnection.swift)

    /// usrsctp's timers, then what the association received, then what it wrote.
    func pumpData() {
        guard let data else { return }
        SctpStack.shared.advanceTimers(now: monotonicNow())
        data.association.receive { [unowned self] event in self.handle(event) }
        if data.association.isUp, !data.unsent.isEmpty {
            let streams = data.unsent
            data.unsent.removeAll()
            for s in streams {
                guard let c = data.channels[s] else { continue }
                sendDcep(Dcep.Open(reliability: c.reliability, label: c.label).bytes, stream: s)
            }
        }
        flushData()
    }

    private func handle(_ event: SctpEvent) {
        guard let data else { return }
        switch event {
        case .up:
            onDataEvent?(.up)
        case .down:
            onDataEvent?(.down)
        case .messageTooLarge(let stream):
            onDataEvent?(.tooLarge(stream: stream))
        case .incomingReset(let streams):
            var closed: [UInt16] = []
            for s in streams where data.channels.removeValue(forKey: s) != nil { closed.append(s) }
            data.association.resetOutgoing(closed)
            for s in closed { onDataEvent?(.closed(stream: s)) }
        case .message(let stream, let ppid, let bytes):
            if ppid == Dcep.Ppid.dcep {
                dcep(bytes, stream: stream)
            } else if Dcep.Ppid.isUserMessage(ppid), data.channels[stream] != nil {
                let binary = ppid == Dcep.Ppid.binary || ppid == Dcep.Ppid.emptyBinary
                let empty = ppid == Dcep.Ppid.emptyString || ppid == Dcep.Ppid.emptyBinary
                onDataEvent?(.message(stream: stream, binary: binary, empty ? UnsafeRawBufferPointer(start: nil, count: 0) : bytes))
            }
        }
    }

    /// A DCEP message on `stream`: the peer's OPEN (acknowledged, the channel is theirs) or the
    /// ACK of ours. Anything else is ignored (a client has no one to report it to).
    private func dcep(_ bytes: UnsafeRawBufferPointer, stream: UInt16) {
        guard let data, case .success(let message) = Dcep.parse(bytes) else { return }
        switch message {
        case .open(let open):
            guard data.channels[stream] == nil else { return }
            data.channels[stream] = ClientDataChannels.Channel(label: open.label, reliability: open.reliability,
                                                               ours: false, acked: true)
            data.used.insert(stream)
            sendDcep([0x02], stream: stream)
            onDataEvent?(.opened(stream: stream, label: open.label, protocol: open.protocol))
        case .ack:
            guard let c = data.channels[stream], c.ours, !c.acked else { return }
            data.channels[stream]?.acked = true
            onDataEvent?(.opened(stream: stream, label: c.label, protocol: ""))
        }
    }

    private func sendDcep(_ bytes: [UInt8], stream: UInt16) {
        guard let data else { return }
        _ = bytes.withUnsafeBytes {
            data.association.send(stream: stream, ppid: Dcep.Ppid.dcep, $0, unordered: false, maxRetransmits: nil)
        }
    }

    /// Writes what usrsctp queued into DTLS records and sends them.
    func flushData() {
        guard let data else { return }
        let packets = data.association.outbox.take()
        guard !packets.isEmpty else { return }
        for p in packets { _ = p.withUnsafeBytes { secure.writeApplicationData($0) } }
        sendHandshake()
    }
}
