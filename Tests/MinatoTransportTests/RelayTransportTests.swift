import Testing
import Foundation
import Logging
import Synchronization
@testable import MinatoTransport
import MinatoMedia
import MinatoWire

/// A relay between two media workers, as two nodes will make one for a room they share
/// (docs/architecture.md "Relays between workers"): on worker A an ordinary ICE-lite transport,
/// on worker B one made with `relayClient` (full ICE, controlling, DTLS client). A publisher's
/// stream goes client → A → relay → B → subscriber client: one consumer on A's relay transport,
/// one producer on B's; a subscriber's PLI goes back the same way to the publisher.
///
/// Real sockets, libnice, DTLS and SRTP on 127.0.0.1: enabled only with MINATO_NETNS_TESTS=1,
/// which `Tests/interop/test_relay_transport.py` sets when it runs this suite inside the
/// interop suite's network namespace (`make unit` skips it).
@Suite(.enabled(if: ProcessInfo.processInfo.environment["MINATO_NETNS_TESTS"] == "1",
                "opens sockets: run by Tests/interop/test_relay_transport.py in a network namespace"))
struct RelayTransportTests {
    static let publisherSsrc: UInt32 = 0x1111
    static let relaySsrc: UInt32 = 0x2222
    static let subscriberSsrc: UInt32 = 0x3333

    /// What the two client connections saw, touched only on the client thread.
    final class Clients: @unchecked Sendable {
        var publisher: ClientConnection?
        var subscriber: ClientConnection?
        var connected = 0
        var received = 0
        var wrong = 0
        var plisAtPublisher = 0
        /// The next packet starts a keyframe (the first, and after each PLI, as an encoder would).
        var keyFrameWanted = true
        var sequence: UInt16 = 0
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 2048, alignment: 16)
        deinit { buffer.deallocate() }
    }

    /// Events of both workers: the transports that connected.
    final class Connected: Sendable {
        let ids = Mutex<Set<UInt64>>([])
        func watch(_ w: MediaWorker) -> Task<Void, Never> {
            Task { for await e in w.events { if case .transportConnected(let id, _) = e { ids.withLock { _ = $0.insert(id.rawValue) } } } }
        }
    }

    static func remote(_ d: TransportDescription, setup: String) -> RemoteTransportParameters {
        let parts = d.fingerprint.split(separator: " ", maxSplits: 1).map(String.init)
        return RemoteTransportParameters(iceUfrag: d.iceUfrag, icePwd: d.icePwd, fingerprintAlgorithm: parts[0],
                                         fingerprint: parts.count > 1 ? parts[1] : "", setup: setup,
                                         candidates: d.candidates, endOfCandidates: true)
    }

    static func remote(_ l: LocalTransportParameters, setup: String) -> RemoteTransportParameters {
        let parts = l.fingerprint.split(separator: " ", maxSplits: 1).map(String.init)
        return RemoteTransportParameters(iceUfrag: l.iceUfrag, icePwd: l.icePwd, fingerprintAlgorithm: parts[0],
                                         fingerprint: parts.count > 1 ? parts[1] : "", setup: setup,
                                         candidates: l.candidates, endOfCandidates: true)
    }

    static func waitUntil(_ what: String, seconds: Double = 10, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("timed out waiting: \(what)")
        throw CancellationError()
    }

    /// Walks a clear RTCP compound: true if it holds a PLI (PT 206, FMT 1) for `ssrc`.
    static func hasPli(_ p: UnsafeRawBufferPointer, for ssrc: UInt32) -> Bool {
        var at = 0
        while at + 12 <= p.count {
            let fmt = p[at] & 0x1f, pt = p[at + 1]
            let words = Int(p[at + 2]) << 8 | Int(p[at + 3])
            if pt == 206, fmt == 1 {
                let media = UInt32(p[at + 8]) << 24 | UInt32(p[at + 9]) << 16 | UInt32(p[at + 10]) << 8 | UInt32(p[at + 11])
                if media == ssrc { return true }
            }
            at += (words + 1) * 4
        }
        return false
    }

    /// A VP8 producer (`ssrc`, payload type 96) on `from` and its consumer on `to`.
    static func forward(_ core: WorkerCore, from: TransportId, ssrc: UInt32, to: TransportId, as out: UInt32,
                        payloadType: UInt8) throws {
        let p = try core.addProducer(on: from) {
            ProducerParameters(transport: $0, kind: .video, ssrc: ssrc, payloadType: 96, clockRate: 90_000, codec: .vp8,
                               keyFrameRequest: .pli)
        }
        _ = try core.addConsumer(on: to) {
            ConsumerParameters(producer: p, transport: $0, ssrc: out, payloadType: payloadType, extensionIds: .identity)
        }
    }

    @Test("media crosses a relay between two workers (full-ICE DTLS-client side on one), and a PLI crosses it back")
    func mediaAndKeyFrameRequestsCrossARelay() async throws {
        let runtime = try CryptoRuntime()
        let ice = IceConfiguration(portMin: 0, portMax: 0, tcp: false)
        let a = MediaWorker(index: 0, runtime: runtime, ice: ice, transportTimeout: .seconds(30), logger: Logger(label: "relay-a"))
        let b = MediaWorker(index: 1, runtime: runtime, ice: ice, transportTimeout: .seconds(30), logger: Logger(label: "relay-b"))
        let client = ClientWorker(runtime: runtime)
        let connected = Connected()
        let watchers = [connected.watch(a), connected.watch(b)]
        let clients = Clients()
        defer {
            a.shutdown(); b.shutdown(); client.shutdown()
            for w in watchers { w.cancel() }
        }
        let router = RouterId(1)
        let (tp, ts, ta) = (TransportId(1), TransportId(2), TransportId(3))
        let tb = TransportId(4)

        // The publisher's and the subscriber's transports (ordinary, ICE-lite).
        let pubServer = try await a.perform { try $0.createTransport(id: tp, router: router) }
        let subServer = try await b.perform { try $0.createTransport(id: ts, router: router) }
        #expect(pubServer.iceLite)
        let (pubLocal, subLocal) = try await client.perform { core -> (LocalTransportParameters, LocalTransportParameters) in
            let p = try core.makeConnection(), s = try core.makeConnection()
            clients.publisher = p
            clients.subscriber = s
            for c in [p, s] {
                c.onStateChange = { state in if state == .connected { clients.connected += 1 } }
            }
            p.onPacket = { packet, isRtcp in
                guard isRtcp, let n = p.unprotectRtcp(packet) else { return }
                if RelayTransportTests.hasPli(UnsafeRawBufferPointer(rebasing: packet[0..<n]), for: RelayTransportTests.publisherSsrc) {
                    clients.plisAtPublisher += 1
                    clients.keyFrameWanted = true
                }
            }
            s.onPacket = { packet, isRtcp in
                guard !isRtcp, let n = s.unprotectRtp(packet) else { return }
                let ssrc = UInt32(packet[8]) << 24 | UInt32(packet[9]) << 16 | UInt32(packet[10]) << 8 | UInt32(packet[11])
                // The subscriber's SSRC and payload type, and the publisher's payload unchanged
                // (byte i of a packet is i plus its original sequence number).
                guard n == 300, ssrc == RelayTransportTests.subscriberSsrc, packet[1] & 0x7f == 100,
                      packet[15] == packet[14] &+ 1, packet[299] == packet[14] &+ 29 else { clients.wrong += 1; return }
                clients.received += 1
            }
            return (p.local, s.local)
        }
        try await a.perform { try $0.setRemote(tp, RelayTransportTests.remote(pubLocal, setup: "active")) }
        try await b.perform { try $0.setRemote(ts, RelayTransportTests.remote(subLocal, setup: "active")) }
        try await client.perform { _ in
            clients.publisher?.setRemote(RelayTransportTests.remote(pubServer, setup: "passive"), dtlsRole: .client)
            clients.subscriber?.setRemote(RelayTransportTests.remote(subServer, setup: "passive"), dtlsRole: .client)
        }

        // The relay: B connects (full ICE, controlling; DTLS client since A is "passive").
        let relayA = try await a.perform { try $0.createTransport(id: ta, router: router, role: .relayServer) }
        let relayB = try await b.perform { try $0.createTransport(id: tb, router: router, role: .relayClient) }
        #expect(relayA.iceLite)
        #expect(!relayB.iceLite)
        try await a.perform { try $0.setRemote(ta, RelayTransportTests.remote(relayB, setup: "active")) }
        try await b.perform { try $0.setRemote(tb, RelayTransportTests.remote(relayA, setup: "passive")) }

        try await Self.waitUntil("every transport connected") {
            let ids = connected.ids.withLock { $0 }
            let clientsUp = try await client.perform { _ in clients.connected }
            return ids.isSuperset(of: [tp.rawValue, ts.rawValue, ta.rawValue, tb.rawValue]) && clientsUp == 2
        }
        // A's relay transport is read directly like any client's; B's connecting side stays with
        // libnice (its consent checks' responses must reach the agent).
        let (aDirect, bDirect) = (try await a.perform { $0.counters.directTransports }, try await b.perform { $0.counters.directTransports })
        #expect(aDirect == 2)
        #expect(bDirect == 1)

        // The stream: producer on A, its consumer on A's relay transport; on B a producer on the
        // relay transport with that consumer's SSRC, and the subscriber's consumer of it.
        try await a.perform { try Self.forward($0, from: tp, ssrc: Self.publisherSsrc, to: ta, as: Self.relaySsrc, payloadType: 96) }
        try await b.perform { try Self.forward($0, from: tb, ssrc: Self.relaySsrc, to: ts, as: Self.subscriberSsrc, payloadType: 100) }

        // The publisher: a VP8 keyframe, then delta frames, one 300-byte packet every 10 ms.
        let timer = try await client.perform { core in
            core.every(milliseconds: 10) {
                guard let p = clients.publisher else { return false }
                let b = clients.buffer
                clients.sequence &+= 1
                let seq = clients.sequence
                let bytes = b.assumingMemoryBound(to: UInt8.self)
                for i in 0..<300 { bytes[i] = UInt8(truncatingIfNeeded: i &+ Int(seq)) }
                bytes[0] = 0x80; bytes[1] = 0x80 | 96
                bytes[2] = UInt8(seq >> 8); bytes[3] = UInt8(seq & 0xff)
                let ts = UInt32(seq) &* 3000
                bytes[4] = UInt8(ts >> 24); bytes[5] = UInt8(ts >> 16 & 0xff); bytes[6] = UInt8(ts >> 8 & 0xff); bytes[7] = UInt8(ts & 0xff)
                let ssrc = RelayTransportTests.publisherSsrc
                bytes[8] = UInt8(ssrc >> 24); bytes[9] = UInt8(ssrc >> 16 & 0xff); bytes[10] = UInt8(ssrc >> 8 & 0xff); bytes[11] = UInt8(ssrc & 0xff)
                bytes[12] = 0x10                                     // VP8 descriptor: start of a partition
                bytes[13] = clients.keyFrameWanted ? 0x00 : 0x01     // VP8 payload header: keyframe or delta frame
                clients.keyFrameWanted = false
                p.sendRtp(b, length: 300)
                return true
            }
        }
        try await Self.waitUntil("the subscriber received 100 packets through the relay") {
            try await client.perform { _ in clients.received } >= 100
        }
        let (received, wrong) = try await client.perform { _ in (clients.received, clients.wrong) }
        #expect(wrong == 0)
        #expect(received >= 100)
        let relayed = try await b.perform { core in core.counters.rtpPacketsReceived }
        #expect(relayed >= UInt64(received))
        // Both ends count the relay's RTP apart from the clients' (A sends on it, B receives).
        let aRelay = try await a.perform { $0.counters.relay }
        let bRelay = try await b.perform { $0.counters.relay }
        #expect(aRelay.packetsSent >= UInt64(received) && aRelay.bytesSent == aRelay.packetsSent * 300)
        #expect(bRelay.packetsReceived >= UInt64(received) && bRelay.bytesReceived == bRelay.packetsReceived * 300)
        #expect(aRelay.packetsReceived == 0 && bRelay.packetsSent == 0)

        // A PLI from the subscriber reaches the publisher through both workers (each counts a
        // keyframe request caused by its subscriber: B's subscriber is the client, A's is the relay).
        let before = try await (a.perform { $0.counters.keyFrameRequestsByCause["subscriber"] ?? 0 },
                                b.perform { $0.counters.keyFrameRequestsByCause["subscriber"] ?? 0 },
                                client.perform { _ in clients.plisAtPublisher })
        try await client.perform { _ in
            guard let s = clients.subscriber else { return }
            let bytes = clients.buffer.assumingMemoryBound(to: UInt8.self)
            let media = RelayTransportTests.subscriberSsrc
            let pli: [UInt8] = [0x81, 206, 0, 2, 0, 0, 0x44, 0x44,
                                UInt8(media >> 24), UInt8(media >> 16 & 0xff), UInt8(media >> 8 & 0xff), UInt8(media & 0xff)]
            for (i, v) in pli.enumerated() { bytes[i] = v }
            s.sendRtcp(clients.buffer, length: pli.count)
        }
        try await Self.waitUntil("the publisher received the PLI") {
            try await client.perform { _ in clients.plisAtPublisher } > before.2
        }
        let afterA = try await a.perform { $0.counters.keyFrameRequestsByCause["subscriber"] ?? 0 }
        let afterB = try await b.perform { $0.counters.keyFrameRequestsByCause["subscriber"] ?? 0 }
        #expect(afterB > before.1)
        #expect(afterA > before.0)
        try await client.perform { core in
            core.cancel(timer)
            clients.publisher?.close()
            clients.subscriber?.close()
        }
        print("relay: subscriber got \(received) packets through the relay, PLI crossed it back "
              + "(subscriber-caused keyframe requests: A \(before.0) -> \(afterA), B \(before.1) -> \(afterB))")
    }
}
