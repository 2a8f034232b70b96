import Testing
import Foundation
@testable import MinatoTransport
import MinatoMedia
import MinatoWire

/// A `DataRouter` (the server's data channels) and peer associations (standing for browsers:
/// usrsctp too, driven by hand with DCEP bytes) wired back to back through memory: real SCTP,
/// no DTLS and no socket. Packets move only when `pump` is called; time is the caller's.
final class DataLink {
    let router: DataRouter
    /// Peer association per server endpoint (by transport id).
    var peers: [TransportId: SctpAssociation] = [:]
    /// What each peer received: (stream, ppid, bytes).
    var received: [TransportId: [(UInt16, UInt32, [UInt8])]] = [:]
    /// Transports whose server-to-peer packets are dropped (a subscriber that stopped reading).
    var blackholed: Set<TransportId> = []
    var now: Nanoseconds = 1_000_000_000

    init(limits: DataLimits = DataLimits()) { router = DataRouter(limits: limits) }

    /// A server endpoint (DTLS role `role`) and its peer (the other role), associated.
    @discardableResult
    func connect(_ id: TransportId, role: DtlsTransport.Role) throws -> DataEndpoint {
        let server = try SctpAssociation(remotePort: 5000, maxMessageBytes: router.limits.maxMessageBytes,
                                         sendBufferBytes: router.limits.maxBufferedBytes)
        let peer = try SctpAssociation(remotePort: 5000, maxMessageBytes: 1 << 20, sendBufferBytes: 8 << 20)
        let e = DataEndpoint(transportId: id, association: server, tokens: Double(router.limits.maxMessagesPerSec),
                             write: { [unowned self] packets in
                                 guard !self.blackholed.contains(id) else { return }
                                 for p in packets { p.withUnsafeBytes { peer.input($0) } }
                             }, role: { role })
        router.endpoints[id] = e
        peers[id] = peer
        received[id] = []
        server.connect()
        peer.connect()
        pump()
        #expect(server.isUp && peer.isUp)
        return e
    }

    /// Moves packets both ways until nothing is left, reading what each side received.
    func pump() {
        for _ in 0..<200 {
            var moved = false
            for (id, e) in router.endpoints {
                let peer = peers[id]!
                let toServer = peer.outbox.take()
                for p in toServer { p.withUnsafeBytes { e.association.input($0) } }
                router.drain(e, now: now)
                let toPeer = e.association.outbox.take()
                if !blackholed.contains(id) { for p in toPeer { p.withUnsafeBytes { peer.input($0) } } }
                peer.receive { event in
                    if case .message(let stream, let ppid, let bytes) = event { self.received[id, default: []].append((stream, ppid, Array(bytes))) }
                }
                moved = moved || !toServer.isEmpty || !toPeer.isEmpty
            }
            router.flush()
            if !moved { return }
        }
    }

    /// The peer of `id` opens a channel on `stream` (DATA_CHANNEL_OPEN).
    func open(_ id: TransportId, stream: UInt16, label: String) {
        let bytes = Dcep.Open(reliability: .reliableOrdered, label: label).bytes
        _ = bytes.withUnsafeBytes { peers[id]!.send(stream: stream, ppid: Dcep.Ppid.dcep, $0, unordered: false, maxRetransmits: nil) }
        pump()
    }

    func send(_ id: TransportId, stream: UInt16, _ bytes: [UInt8], ppid: UInt32 = Dcep.Ppid.binary) {
        _ = bytes.withUnsafeBytes { peers[id]!.send(stream: stream, ppid: ppid, $0, unordered: false, maxRetransmits: nil) }
        pump()
    }

    func messages(_ id: TransportId) -> [[UInt8]] {
        received[id, default: []].filter { $0.1 != Dcep.Ppid.dcep }.map(\.2)
    }

    func close() {
        for id in Array(router.endpoints.keys) { router.removeEndpoint(id) }
        for p in peers.values { p.close() }
    }
}

@Suite struct DataRouterTests {
    let pubT = TransportId(1), subT = TransportId(2), sub2T = TransportId(3)

    func room(_ link: DataLink, lossy: Bool = false) throws {
        let p = try link.connect(pubT, role: .server)
        let s = try link.connect(subT, role: .server)
        let s2 = try link.connect(sub2T, role: .server)
        link.open(pubT, stream: 0, label: "chat")
        // The server acknowledged the peer's channel.
        #expect(link.received[pubT]!.contains { $0.0 == 0 && $0.1 == Dcep.Ppid.dcep && $0.2 == Dcep.ackBytes })
        link.router.addPublication("P", on: p, label: "chat", enabled: true)
        for (sid, e) in [("S1", s), ("S2", s2)] {
            link.router.subscriptions[sid] = DataRouter.Subscription(
                transport: e.transportId, publication: "P",
                reliability: lossy ? Dcep.Reliability(ordered: false, maxRetransmits: 0) : .reliableOrdered)
            link.router.publications["P"]?.subscriptions.append(sid)
            link.router.open(sid, on: e)
        }
        link.pump()
    }

    @Test func opensSubscriberChannelsWithOddStreamsAndForwardsInOrder() throws {
        let link = DataLink()
        defer { link.close() }
        try room(link)
        // The server is the DTLS server here: its channels take odd stream ids (RFC 8832 6).
        let opens = link.received[subT]!.filter { $0.1 == Dcep.Ppid.dcep }
        #expect(opens.count == 1 && opens[0].0 == 1)
        let open = opens[0].2.withUnsafeBytes { Dcep.parse($0) }
        #expect(open == .success(.open(Dcep.Open(reliability: .reliableOrdered, label: "S1", protocol: "P"))))
        for i in 0..<200 { link.send(pubT, stream: 0, Array("m\(i)".utf8), ppid: Dcep.Ppid.string) }
        for t in [subT, sub2T] {
            #expect(link.messages(t) == (0..<200).map { Array("m\($0)".utf8) })
        }
        #expect(link.router.messagesForwarded == 400)
    }

    @Test func oversizedMessageIsDroppedAndReported() throws {
        let link = DataLink()
        defer { link.close() }
        try room(link)
        link.send(pubT, stream: 0, [UInt8](repeating: 7, count: 70_000))
        link.send(pubT, stream: 0, [1, 2, 3])
        #expect(link.messages(subT) == [[1, 2, 3]])
        #expect(link.router.drops[DataDropReason.messageTooLarge.rawValue] == 1)
        guard case .error(let t, let label, let reason, _)? = link.router.notices.first else {
            Issue.record("no notice: \(link.router.notices)"); return
        }
        #expect(t == pubT && label == "chat" && reason == "messageTooLarge")
    }

    @Test func unknownDcepMessageIsReported() throws {
        let link = DataLink()
        defer { link.close() }
        try room(link)
        link.send(pubT, stream: 0, [0x07, 0, 0], ppid: Dcep.Ppid.dcep)
        guard case .error(_, _, let reason, let detail)? = link.router.notices.first else {
            Issue.record("no notice"); return
        }
        #expect(reason == "unknownDcepMessage" && detail.contains("0x7"))
        link.send(pubT, stream: 0, [9])
        #expect(link.messages(subT) == [[9]])
    }

    @Test func reliableSubscriberThatStopsReadingIsClosedOthersKeepReceiving() throws {
        var limits = DataLimits()
        limits.maxBufferedBytes = 64 * 1024
        limits.maxMessageBytes = 4096
        let link = DataLink(limits: limits)
        defer { link.close() }
        try room(link)
        link.blackholed.insert(subT)
        let payload = [UInt8](repeating: 1, count: 1000)
        for _ in 0..<200 { link.send(pubT, stream: 0, payload) }
        #expect(link.router.notices.contains { if case .overflow("S1") = $0 { return true }; return false })
        #expect(link.router.subscriptions["S1"] == nil)
        #expect(link.messages(sub2T).count == 200)
        #expect(link.router.drops[DataDropReason.bufferOverflow.rawValue] == 1)
    }

    @Test func lossySubscriberThatStopsReadingLosesMessagesOnly() throws {
        var limits = DataLimits()
        limits.maxBufferedBytes = 64 * 1024
        limits.maxMessageBytes = 4096
        let link = DataLink(limits: limits)
        defer { link.close() }
        try room(link, lossy: true)
        link.blackholed.insert(subT)
        for _ in 0..<200 { link.send(pubT, stream: 0, [UInt8](repeating: 1, count: 1000)) }
        #expect(link.router.subscriptions["S1"] != nil)
        #expect(link.router.drops[DataDropReason.bufferFull.rawValue] > 0)
        #expect(link.messages(sub2T).count == 200)
    }

    @Test func rateLimitDropsPastTheBudget() throws {
        var limits = DataLimits()
        limits.maxMessagesPerSec = 50
        let link = DataLink(limits: limits)
        defer { link.close() }
        try room(link)
        for _ in 0..<80 { link.send(pubT, stream: 0, [1]) }
        #expect(link.messages(subT).count == 50)
        #expect(link.router.drops[DataDropReason.rateLimited.rawValue] == 30)
        link.now += 1_000_000_000   // a second later the budget is back
        for _ in 0..<10 { link.send(pubT, stream: 0, [2]) }
        #expect(link.messages(subT).count == 60)
    }

    @Test func channelsPastTheLimitAreResetAndReported() throws {
        var limits = DataLimits()
        limits.maxChannelsPerTransport = 2
        let link = DataLink(limits: limits)
        defer { link.close() }
        try link.connect(pubT, role: .server)
        link.open(pubT, stream: 0, label: "a")
        link.open(pubT, stream: 2, label: "b")
        link.open(pubT, stream: 4, label: "c")
        #expect(link.router.endpoints[pubT]?.channels.count == 2)
        #expect(link.router.endpoints[pubT]?.closing.contains(4) == true)
        guard case .error(_, let label, let reason, _)? = link.router.notices.first else { Issue.record("no notice"); return }
        #expect(label == "c" && reason == "tooManyChannels")
    }

    @Test func disabledPublicationDropsAndEnabledForwards() throws {
        let link = DataLink()
        defer { link.close() }
        try room(link)
        link.router.publications["P"]?.enabled = false
        link.send(pubT, stream: 0, [1])
        link.router.publications["P"]?.enabled = true
        link.send(pubT, stream: 0, [2])
        #expect(link.messages(subT) == [[2]])
        #expect(link.router.drops[DataDropReason.publicationDisabled.rawValue] == 1)
        // A message on a channel no publication names is dropped too.
        link.open(pubT, stream: 2, label: "nobody")
        link.send(pubT, stream: 2, [3])
        #expect(link.router.drops[DataDropReason.unboundChannel.rawValue] == 1)
        #expect(link.messages(subT) == [[2]])
    }

    @Test func dcepParserRefusesMalformedInput() {
        func parse(_ b: [UInt8]) -> Result<Dcep.Message, Dcep.ParseError> { b.withUnsafeBytes { Dcep.parse($0) } }
        #expect(parse([]) == .failure(.empty))
        #expect(parse([0x03, 0, 0, 0]) == .failure(.truncated))
        #expect(parse([0x03, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) == .failure(.unknownChannelType(5)))
        #expect(parse([0x03, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 1]) == .failure(.truncated))
        #expect(parse([0x03, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0xFF]) == .failure(.notUtf8))
        let lossy = Dcep.Open(reliability: Dcep.Reliability(ordered: false, maxRetransmits: 0), label: "é", protocol: "p")
        #expect(lossy.bytes.withUnsafeBytes { Dcep.parse($0) } == .success(.open(lossy)))
    }
}


/// The fuzzer's harness (fuzz/Sources/FuzzDataChannel) on the committed seeds and a stream of
/// random inputs: nothing traps, and a good message still gets through afterwards.
@Suite struct DataChannelFuzzHarnessTests {
    @Test func seedsAndRandomInputsDoNotBreakTheRouter() throws {
        let h = try DataChannelFuzzHarness()
        defer { h.close() }
        // Through the symlinks: the sanitize package links this directory from sanitize/Tests.
        let seeds = URL(fileURLWithPath: #filePath).resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("../../fuzz/corpus/FuzzDataChannel").standardized
        let files = (try? FileManager.default.contentsOfDirectory(at: seeds, includingPropertiesForKeys: nil)) ?? []
        #expect(files.count >= 5)
        for f in files { try Data(contentsOf: f).withUnsafeBytes { h.feed($0) } }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let bytes = (0..<Int.random(in: 0...300, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            bytes.withUnsafeBytes { h.feed($0) }
        }
        let before = h.delivered
        [UInt8(3), 1, 2, 3].withUnsafeBytes { h.feed($0) }
        #expect(h.delivered == before + 1)
    }
}
