internal import MinatoWire
internal import MinatoMedia

/// The data-channel input path without DTLS or sockets, for the fuzzer (fuzz/Sources/
/// FuzzDataChannel) and its unit test: a `DataRouter` with a publisher's and a subscriber's
/// association, each associated with a usrsctp peer through memory, a publication bound to the
/// publisher's channel (stream 0) and a subscription's channel opened. `feed` hands one input to
/// it: by its first byte, a raw SCTP packet into the publisher's association, a DCEP message or
/// a user message (any PPID, stream and size) sent by the publisher's peer. Whatever the input,
/// nothing may trap, and memory stays bounded (`DataLimits`).
public final class DataChannelFuzzHarness {
    let router: DataRouter
    private let publisher: DataEndpoint
    private let subscriber: DataEndpoint
    private let publisherPeer: SctpAssociation
    private let subscriberPeer: SctpAssociation
    private var now: Nanoseconds = 1_000_000_000
    /// User messages the subscriber's peer received (for the unit test).
    public private(set) var delivered = 0

    public init() throws {
        var limits = DataLimits()
        limits.maxMessageBytes = 4096
        limits.maxBufferedBytes = 64 * 1024
        limits.maxChannelsPerTransport = 8
        limits.maxMessagesPerSec = 100_000
        router = DataRouter(limits: limits)
        func pair(_ id: TransportId) throws -> (DataEndpoint, SctpAssociation) {
            let server = try SctpAssociation(remotePort: 5000, maxMessageBytes: limits.maxMessageBytes,
                                             sendBufferBytes: limits.maxBufferedBytes)
            let peer = try SctpAssociation(remotePort: 5000, maxMessageBytes: 1 << 16, sendBufferBytes: 1 << 20)
            let e = DataEndpoint(transportId: id, association: server, tokens: Double(limits.maxMessagesPerSec),
                                 write: { packets in for p in packets { p.withUnsafeBytes { peer.input($0) } } },
                                 role: { .server })
            return (e, peer)
        }
        (publisher, publisherPeer) = try pair(TransportId(1))
        (subscriber, subscriberPeer) = try pair(TransportId(2))
        router.endpoints[publisher.transportId] = publisher
        router.endpoints[subscriber.transportId] = subscriber
        for (e, peer) in [(publisher, publisherPeer), (subscriber, subscriberPeer)] {
            e.association.connect()
            peer.connect()
        }
        pump()
        let open = Dcep.Open(reliability: .reliableOrdered, label: "fuzz").bytes
        _ = open.withUnsafeBytes { publisherPeer.send(stream: 0, ppid: Dcep.Ppid.dcep, $0, unordered: false, maxRetransmits: nil) }
        router.addPublication("P", on: publisher, label: "fuzz", enabled: true)
        router.subscriptions["S"] = DataRouter.Subscription(transport: subscriber.transportId, publication: "P",
                                                            reliability: .reliableOrdered)
        router.publications["P"]?.subscriptions.append("S")
        pump()
        router.open("S", on: subscriber)
        pump()
    }

    /// One input: `0` + an SCTP packet; `1` + stream (2 bytes) + a DCEP message; `2` + stream
    /// (2 bytes) + PPID (1 byte) + a user message; anything else: a binary message on stream 0.
    public func feed(_ input: UnsafeRawBufferPointer) {
        now &+= 1_000_000
        guard let mode = input.first else { return }
        let rest = UnsafeRawBufferPointer(rebasing: input.dropFirst())
        switch mode {
        case 0:
            publisher.association.input(rest)
        case 1, 2:
            guard rest.count >= 2 else { return }
            let stream = UInt16(rest[0]) << 8 | UInt16(rest[1])
            var body = UnsafeRawBufferPointer(rebasing: rest.dropFirst(2))
            var ppid = Dcep.Ppid.dcep
            if mode == 2 {
                guard let p = body.first else { return }
                ppid = UInt32(p)
                body = UnsafeRawBufferPointer(rebasing: body.dropFirst())
            }
            _ = publisherPeer.send(stream: stream, ppid: ppid, body, unordered: false, maxRetransmits: nil)
        default:
            _ = publisherPeer.send(stream: 0, ppid: Dcep.Ppid.binary, rest, unordered: false, maxRetransmits: nil)
        }
        pump()
    }

    private func pump() {
        for _ in 0..<64 {
            var moved = false
            for (e, peer) in [(publisher, publisherPeer), (subscriber, subscriberPeer)] {
                let toServer = peer.outbox.take()
                for p in toServer { p.withUnsafeBytes { e.association.input($0) } }
                router.drain(e, now: now)
                router.flush()
                peer.receive { event in
                    if case .message(_, let ppid, _) = event, ppid != Dcep.Ppid.dcep { delivered += 1 }
                }
                moved = moved || !toServer.isEmpty || !peer.outbox.isEmpty
            }
            router.notices.removeAll()
            if !moved { return }
        }
    }

    public func close() {
        for id in Array(router.endpoints.keys) { router.removeEndpoint(id) }
        publisherPeer.close()
        subscriberPeer.close()
    }
}
