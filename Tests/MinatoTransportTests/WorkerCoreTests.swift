import Testing
import Foundation
import Logging
import Synchronization
@testable import MinatoTransport
import MinatoMedia
import MinatoWire

/// A `WorkerCore` driven on the test's thread (no loop, no libnice): one publisher and one
/// subscriber transport keyed with SRTP directly, each sending into an AF_UNIX datagram pair.
final class DirectWorker {
    let core: WorkerCore
    let publisher: WebRtcTransport
    let subscriber: WebRtcTransport
    let publisherSocket: DatagramPair
    let subscriberSocket: DatagramPair
    let producer: ProducerId
    private let context: OpaquePointer
    static let ssrc: UInt32 = 0x1111
    static let runtime = try! CryptoRuntime()

    init() throws {
        context = makeMainContext()!
        let (_, sink) = AsyncStream<WorkerEvent>.makeStream()
        core = WorkerCore(context: context, runtime: Self.runtime, ice: IceConfiguration(), events: sink,
                          transportTimeout: 10_000_000_000, logger: Logger(label: "test"))
        publisherSocket = try DatagramPair()
        subscriberSocket = try DatagramPair()
        core.batch.gso = false   // UDP GSO means nothing on AF_UNIX (the segments would arrive as one)
        publisher = try Self.transport(1, publisherSocket.sender, core)
        subscriber = try Self.transport(2, subscriberSocket.sender, core)
        producer = try core.engine.addProducer(ProducerParameters(
            transport: publisher.index, kind: .video, ssrc: Self.ssrc, payloadType: 96, clockRate: 90_000, codec: .vp8,
            keyFrameRequest: .pli))
        _ = try core.engine.addConsumer(ConsumerParameters(producer: producer, transport: subscriber.index, ssrc: 0x2000,
                                                           payloadType: 100, extensionIds: .identity), now: 0)
        core.flush()
        _ = publisherSocket.drain()
        _ = subscriberSocket.drain()
    }

    deinit { releaseMainContext(context) }

    static func transport(_ n: UInt64, _ fd: Int32, _ core: WorkerCore) throws -> WebRtcTransport {
        let k1 = [UInt8](repeating: 0x11, count: 28), k2 = [UInt8](repeating: 0x22, count: 28)
        let index = core.engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(n))
        let secure = try SecureTransport(runtime: runtime, now: 0, timeouts: core.timeouts)
        let t = WebRtcTransport(id: TransportId(n), index: index, worker: core, secure: secure)
        #expect(t.connectDirectly(profile: .aeadAes128Gcm, local: k2, remote: k1,
                                  sender: DatagramSender(fd: fd, peer: sockaddr_storage(), peerLength: 0)) == .connected)
        core.adopt(t)
        return t
    }

    /// Routes `count` VP8 keyframe packets from the publisher into the engine, then flushes once.
    func routeAndFlush(_ count: Int, firstSequence: UInt16 = 1) {
        var clear = [UInt8](repeating: 0, count: 1200)
        for i in 0..<count {
            clear.withUnsafeMutableBytes { b in
                _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: firstSequence &+ UInt16(i),
                                              timestamp: 90_000, ssrc: Self.ssrc)
                b[12] = 0x10
                core.engine.handleRtp(from: publisher.index, packet: UnsafeMutableRawBufferPointer(rebasing: b[0..<200]),
                                      now: 1_000_000)
            }
        }
        core.flush()
    }
}

@Suite("WorkerCore: send accounting against the kernel")
struct WorkerCoreTests {
    @Test("what the kernel refuses is counted as send_failed, what it takes as forwarded, packet by packet")
    func partialBatchAccounting() throws {
        let w = try DirectWorker()
        w.routeAndFlush(40)
        let arrived = w.subscriberSocket.drain()
        let counters = w.core.counters
        #expect(arrived.count > 0 && arrived.count < 40, "the AF_UNIX queue takes only some of one burst")
        #expect(counters.rtpPacketsForwarded == UInt64(arrived.count))
        #expect(counters.drops["send_failed"] == UInt64(40 - arrived.count))
        #expect(counters.rtpBytesForwarded == UInt64(arrived.count * 200))
        // The packets that arrived are the first ones, protected for the subscriber: its own
        // SRTP (keys k1/k2 reversed) decrypts them in order.
        let receiver = try SrtpSession(profile: .aeadAes128Gcm, localKeyAndSalt: [UInt8](repeating: 0x11, count: 28),
                                       remoteKeyAndSalt: [UInt8](repeating: 0x22, count: 28))
        var sequences: [UInt16] = []
        for var d in arrived {
            let n = d.withUnsafeMutableBytes { receiver.unprotectRtp($0.baseAddress!, length: $0.count) }
            #expect(n == 200)
            sequences.append(UInt16(d[2]) << 8 | UInt16(d[3]))
        }
        #expect(sequences == Array(sequences.sorted()) && Set(sequences).count == sequences.count)
        // After the queue drained, everything goes out and is counted as sent.
        w.routeAndFlush(5, firstSequence: 41)
        #expect(w.subscriberSocket.drain().count == 5)
        #expect(w.core.counters.rtpPacketsForwarded == UInt64(arrived.count + 5))
        #expect(w.core.counters.drops["send_failed"] == UInt64(40 - arrived.count))
    }

    @Test("a transport with ICE down counts its packets as ice_not_connected, not as sent")
    func notConnected() throws {
        let w = try DirectWorker()
        // A fresh transport (ICE never up) as a second subscriber.
        let index = w.core.engine.addTransport(router: RouterId(1), feedbackSsrc: 9)
        let secure = try SecureTransport(runtime: DirectWorker.runtime, now: 0, timeouts: w.core.timeouts)
        let t = WebRtcTransport(id: TransportId(9), index: index, worker: w.core, secure: secure)
        _ = secure.connect(profile: .aeadAes128Gcm, local: [UInt8](repeating: 3, count: 28), remote: [UInt8](repeating: 4, count: 28))
        w.core.adopt(t)
        _ = try w.core.engine.addConsumer(ConsumerParameters(producer: w.producer, transport: index, ssrc: 0x3000,
                                                             payloadType: 100, extensionIds: .identity), now: 0)
        w.core.flush()
        let before = w.core.counters.drops["ice_not_connected"] ?? 0
        w.routeAndFlush(3)
        #expect(w.subscriberSocket.drain().count == 3)
        #expect((w.core.counters.drops["ice_not_connected"] ?? 0) - before == 3)
    }
}

/// Runs jobs from many tasks on one worker thread (for ThreadSanitizer: the inbox is the only
/// state that crosses threads).
final class Tally: @unchecked Sendable { var value = 0 }

@Suite("MediaWorker: commands cross threads only through the inbox")
struct MediaWorkerThreadTests {
    @Test("concurrent perform and post calls all run, one at a time, on the worker thread")
    func concurrentCommands() async throws {
        let worker = MediaWorker(index: 0, runtime: DirectWorker.runtime, ice: IceConfiguration(),
                                 transportTimeout: .seconds(30), logger: Logger(label: "test"))
        let tally = Tally()   // touched only on the worker thread
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<50 {
                        try await worker.perform { _ in tally.value += 1 }
                        worker.post { _ in tally.value += 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = try await worker.perform { core -> Int in
            core.assertOnThread()
            return tally.value
        }
        #expect(total == 800)
        let transports = try await worker.perform { $0.counters.transports }
        #expect(transports == 0)
        worker.shutdown()
        for await _ in worker.events {}
    }
}
