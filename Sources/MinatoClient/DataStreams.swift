public import MinatoWire
internal import MinatoTransport
internal import Synchronization

/// One data message, as it was written: a string or bytes (SkyWay's `onData` gives either).
public enum DataMessage: Sendable, Equatable {
    case string(String)
    case binary([UInt8])
}

/// A data stream to publish (SkyWay's `LocalDataStream`, from `createDataStream()`): publish it
/// with `member.publish(_:options:)`, then `write` strings or bytes; every subscriber of the
/// publication receives each message as it was written, on a WebRTC data channel through the
/// server (docs/protocol.md "Data"). Reliable and ordered by default; `ordered: false,
/// maxRetransmits: 0` for data where the latest value matters more than every value (positions,
/// cursors). One stream is published once.
public final class LocalDataStream: Sendable {
    public let ordered: Bool
    public let maxRetransmits: UInt32?

    struct Binding: Sendable {
        let worker: ClientWorker
        let connection: WorkerBound<ClientConnection>
        let stream: UInt16
        /// The largest message the server takes (its answer's `a=max-message-size`).
        let maxMessageBytes: Int
    }
    let binding = Mutex<Binding?>(nil)

    public init(ordered: Bool = true, maxRetransmits: UInt32? = nil) {
        self.ordered = ordered
        self.maxRetransmits = maxRetransmits
    }

    /// Sends a string (UTF-8) to every subscriber.
    public func write(_ text: String) async throws { try await send(Array(text.utf8), binary: false) }

    /// Sends bytes to every subscriber.
    public func write(_ bytes: [UInt8]) async throws { try await send(bytes, binary: true) }

    /// Throws `ClientError.dataMessageTooLarge` for a message the server would not take,
    /// `.dataStreamNotOpen` before `publish` returned or after the channel closed, and
    /// `.dataBufferFull` when the channel's send buffer has no room (nothing is sent then).
    private func send(_ bytes: [UInt8], binary: Bool) async throws {
        guard let b = binding.withLock({ $0 }) else { throw ClientError.dataStreamNotOpen }
        guard b.maxMessageBytes == 0 || bytes.count <= b.maxMessageBytes else {
            throw ClientError.dataMessageTooLarge(size: bytes.count, max: b.maxMessageBytes)
        }
        let message = bytes
        let result = try await b.worker.perform { _ in
            message.withUnsafeBytes { b.connection.value.sendData(stream: b.stream, $0, binary: binary) }
        }
        switch result {
        case .sent: return
        case .full: throw ClientError.dataBufferFull
        case .notOpen, .failed: throw ClientError.dataStreamNotOpen
        }
    }
}

/// A data subscription's messages on their way to the application (worker-confined; the stream
/// is `Sendable`). Holds at most `limit` unread messages; more are dropped and counted.
final class DataInbox {
    let messages: AsyncStream<DataMessage>
    private let continuation: AsyncStream<DataMessage>.Continuation
    private(set) var dropped: UInt64 = 0
    /// The server's channel for it opened.
    var open = false
    static let limit = 100_000

    init() {
        (messages, continuation) = AsyncStream<DataMessage>.makeStream(bufferingPolicy: .bufferingOldest(Self.limit))
    }

    func deliver(binary: Bool, _ bytes: UnsafeRawBufferPointer) {
        let m: DataMessage = binary ? .binary(Array(bytes)) : .string(String(decoding: bytes, as: UTF8.self))
        if case .dropped = continuation.yield(m) { dropped &+= 1 }
    }

    func finish() { continuation.finish() }
}

extension MemberMedia {
    /// Routes the receive connection's data channels: the server opens one per data
    /// subscription, labelled with the subscription's id.
    func routeData(_ event: ClientDataEvent) {
        switch event {
        case .opened(let stream, let label, _):
            if let inbox = dataInboxes[label] {
                dataByStream[stream] = inbox
                inbox.open = true
            }
        case .message(let stream, let binary, let bytes):
            dataByStream[stream]?.deliver(binary: binary, bytes)
        case .closed(let stream):
            dataByStream.removeValue(forKey: stream)?.finish()
        case .down:
            for inbox in dataByStream.values { inbox.finish() }
            dataByStream.removeAll()
        case .up, .tooLarge:
            break
        }
    }

    func dropDataInbox(_ subscriptionId: String) {
        guard let inbox = dataInboxes.removeValue(forKey: subscriptionId) else { return }
        for (stream, i) in dataByStream where i === inbox { dataByStream[stream] = nil }
        inbox.finish()
    }

    func finishData() {
        for inbox in dataInboxes.values { inbox.finish() }
        dataInboxes.removeAll()
        dataByStream.removeAll()
    }
}

extension LocalSFURoomMember {
    /// Publishes a data stream (`contentType: "data"`): the send connection gets its data
    /// section (once), the server answers, the SCTP association comes up and the stream's
    /// channel opens; then `stream.write` sends. Returns when the channel is open (up to 10 s).
    /// Unlike media, a data publication is not published again after a rejoin.
    public func publish(_ stream: LocalDataStream, options: PublicationOptions = PublicationOptions()) async throws -> RoomPublication {
        guard stream.binding.withLock({ $0 }) == nil else { throw ClientError.badResponse("this data stream is published already") }
        let media = self.media
        let local = try await connection(.send).local
        let firstNegotiation = tracks.isEmpty
        var addedSection = false
        let mid: String
        if let existing = tracks.first(where: \.isData) { mid = existing.mid } else {
            mid = String(tracks.count)
            tracks.append(.data(mid: mid))
            addedSection = true
        }
        dataLabels &+= 1
        let label = "data-\(dataLabels)"
        sendVersion += 1
        let offer = ClientSdp.offer(local: local, tracks: tracks, sessionId: sessionId, version: sendVersion)
        var channelJSON: [String: JSON] = ["label": .string(label), "ordered": .bool(stream.ordered)]
        if let n = stream.maxRetransmits { channelJSON["maxRetransmits"] = .number(Double(n)) }
        var p: [String: JSON] = ["memberId": .string(id), "contentType": .string("data"), "mid": .string(mid),
                                 "offer": ["type": "offer", "sdp": .string(offer)], "isEnabled": .bool(options.isEnabled),
                                 "dataChannel": .object(channelJSON)]
        if let m = options.metadata { p["metadata"] = .string(m) }
        if let m = options.maxSubscribers { p["maxSubscribers"] = .number(Double(m)) }
        let result: JSON
        do { result = try await channel.call("publish", .object(p)) } catch {
            if addedSection { tracks.removeLast() }
            throw error
        }
        guard let pubJSON = result["publication"], let answer = result["answer"]?["sdp"]?.string else {
            throw ClientError.badResponse("publish returned no publication or answer")
        }
        let publication = try pubJSON.decode(Publication.self)
        let answerSdp = try SessionDescription.parse(answer)
        guard let section = answerSdp.media.first(where: { $0.mid == mid }), SdpData.isDataChannelSection(section) else {
            throw ClientError.badResponse("the answer rejected the data section")
        }
        if firstNegotiation {
            let remote = try ClientSdp.remoteTransport(of: answerSdp)
            let role = ClientSdp.dtlsRole(answeringOurOffer: remote.setup)
            try await worker.perform { _ in media.value.send?.setRemote(remote, dtlsRole: role) }
            try await waitConnected(send: true)
        }
        let port = SdpData.sctpPort(section), maxMessage = SdpData.maxMessageSize(section) ?? 65536
        let sendBuffer = room.context.options.dataSendBufferBytes
        let reliability = Dcep.Reliability(ordered: stream.ordered, maxRetransmits: stream.maxRetransmits)
        let opened = try await worker.perform { _ -> UInt16? in
            guard let c = media.value.send else { return nil }
            try c.enableData(remotePort: port, maxMessageBytes: clientMaxDataMessageBytes, sendBufferBytes: sendBuffer)
            return c.openDataChannel(label: label, reliability: reliability)
        }
        guard let streamId = opened else { throw ClientError.transport("no data channel could be opened") }
        try await waitOnWorker("the data channel to open") { _ in media.value.send?.dataChannelIsOpen(stream: streamId) ?? false }
        let connection = try await worker.perform { _ -> WorkerBound<ClientConnection>? in media.value.send.map(WorkerBound.init) }
        guard let connection else { throw ClientError.dataStreamNotOpen }
        stream.binding.withLock {
            $0 = LocalDataStream.Binding(worker: worker, connection: connection, stream: streamId, maxMessageBytes: maxMessage)
        }
        return RoomPublication(publication: publication, mid: mid, ssrc: 0)
    }

    /// A data subscription is coming: its messages wait in an inbox for the server's channel.
    func expectData(_ subscriptionId: String) async throws {
        let media = self.media
        try await worker.perform { _ in media.value.dataInboxes[subscriptionId] = DataInbox() }
    }

    /// Waits (up to 10 s) for the server's channel of data subscription `subscriptionId`: the
    /// server forwards a publication's messages to a subscription from when it is open.
    func waitDataOpen(_ subscriptionId: String) async throws {
        let media = self.media
        try await waitOnWorker("the server's data channel for subscription \(subscriptionId) to open") { _ in
            media.value.dataInboxes[subscriptionId]?.open ?? false
        }
    }

    /// Checks `condition` on the worker every 10 ms until it holds; throws `ClientError.timeout`
    /// naming `what` after `seconds`.
    func waitOnWorker(_ what: String, seconds: Int = 10,
                      _ condition: @escaping @Sendable (ClientWorkerCore) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while try await !worker.perform(condition) {
            guard ContinuousClock.now < deadline else { throw ClientError.timeout("waiting for \(what) (\(seconds) s)") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// The receive connection's answer accepted a data section: its SCTP association (once).
    func enableReceivedData(_ streams: [ClientSdp.OfferedStream]) async throws {
        guard let section = streams.first(where: { $0.kind == "application" && !$0.rejected }) else { return }
        let media = self.media
        let port = section.sctpPort ?? SdpData.defaultSctpPort
        let sendBuffer = room.context.options.dataSendBufferBytes
        try await worker.perform { _ in
            guard let c = media.value.recv, !c.dataEnabled else { return }
            c.onDataEvent = { event in media.value.routeData(event) }
            try c.enableData(remotePort: port, maxMessageBytes: clientMaxDataMessageBytes, sendBufferBytes: sendBuffer)
        }
    }

    /// The messages of a data subscription (SkyWay's `onData`), in order for a reliable ordered
    /// publication; the stream ends when the subscription does. nil for a media subscription.
    public func dataMessages(of subscription: RoomSubscription) async throws -> AsyncStream<DataMessage>? {
        let media = self.media
        let sid = subscription.id
        return try await worker.perform { _ in media.value.dataInboxes[sid]?.messages }
    }
}
