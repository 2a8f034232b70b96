import Benchmark
import MinatoMedia
import MinatoWire

/// The audio path with RFC 6464 levels (issue 27): the level read and the speaker state per
/// packet, and forward-loudest-N. Zero mallocs per packet, like every packet-path benchmark.
func audioBenchmarks() {
    /// A 100-byte opus packet with a one-byte header-extension block carrying the audio level (id 1).
    func opusPacket() -> UnsafeMutableRawBufferPointer {
        let b = UnsafeMutableRawBufferPointer.allocate(byteCount: 100, alignment: 16)
        b.initializeMemory(as: UInt8.self, repeating: 0x55)
        _ = RtpPacketView.writeHeader(into: b, payloadType: 111, sequenceNumber: 1, timestamp: 48_000, ssrc: 0x1000)
        b[0] |= 0x10
        let ext: [UInt8] = [0xBE, 0xDE, 0x00, 0x01, 0x10, 20, 0x00, 0x00]   // id 1, level -20 dBov
        for (i, v) in ext.enumerated() { b[12 + i] = v }
        return b
    }

    /// `publishers` audio producers (levels on or off), each consumed by `subscribers` transports.
    func audioRoom(publishers: Int, subscribers: Int, levels: Bool, forwardLoudest: Int) -> (MediaEngine, [TransportIndex]) {
        var tuning = EngineTuning()
        tuning.speakers.forwardLoudest = forwardLoudest
        let engine = MediaEngine(tuning: tuning)
        let subs = (0..<subscribers).map { engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(500 + $0)) }
        var pubs: [TransportIndex] = []
        var ids = ExtensionIdMap()
        ids[1] = 1
        for p in 0..<publishers {
            let t = engine.addTransport(router: RouterId(1), feedbackSsrc: UInt32(100 + p))
            var params = ProducerParameters(transport: t, kind: .audio, ssrc: UInt32(0x1000 + p), payloadType: 111,
                                            clockRate: 48_000, codec: .vp8, keyFrameRequest: .none)
            params.audioLevelExtensionId = levels ? 1 : 0
            let producer = try! engine.addProducer(params)
            for (k, s) in subs.enumerated() {
                _ = try! engine.addConsumer(ConsumerParameters(producer: producer, transport: s,
                                                               ssrc: UInt32(0x10_0000 + p * 1000 + k),
                                                               payloadType: 111, extensionIds: ids), now: 1)
            }
            pubs.append(t)
        }
        engine.clearTransmits()
        return (engine, pubs)
    }

    for levels in [false, true] {
        let name = levels ? "+ RFC 6464 level read and speaker state" : "without the audio-level extension"
        Benchmark("Audio fan-out 1->10 \(name), 100 B (per received packet)") { benchmark in
            let (engine, pubs) = audioRoom(publishers: 1, subscribers: 10, levels: levels, forwardLoudest: 0)
            let packet = opusPacket()
            var now: UInt64 = 1_000_000_000
            var seq: UInt16 = 1
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                seq &+= 1
                now &+= 1_000_000
                packet.storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                engine.handleRtp(from: pubs[0], packet: packet, now: now)
                engine.handleTimeout(now: now)    // the speaker ticks, every 50 ms
                blackHole(engine.transmitCount)
                engine.clearTransmits()
            }
            benchmark.stopMeasurement()
            precondition(!levels || engine.producerStats(ProducerId(slot: 0, generation: 0))?.speaking == true,
                         "the speaker was not detected")
        }
    }

    // An audio room of 8 speakers' microphones, 8 listeners each subscribed to all: 2 speak,
    // 6 send silence. All forwarded, or only the 2 loudest.
    for loudest in [0, 2] {
        let name = loudest == 0 ? "all forwarded" : "forwardLoudest 2"
        Benchmark("Audio room 8 publishers x 8 subscribers, 2 speaking, \(name) (per round of 8 packets)") { benchmark in
            let (engine, pubs) = audioRoom(publishers: 8, subscribers: 8, levels: true, forwardLoudest: loudest)
            let packets = (0..<8).map { p -> UnsafeMutableRawBufferPointer in
                let b = opusPacket()
                b.storeBytes(of: UInt32(0x1000 + p).bigEndian, toByteOffset: 8, as: UInt32.self)
                b[17] = p < 2 ? 20 : 127
                return b
            }
            var now: UInt64 = 1_000_000_000
            var seq: UInt16 = 1
            var queued = 0
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                seq &+= 1
                now &+= 20_000_000
                for p in 0..<8 {
                    packets[p].storeBytes(of: seq.bigEndian, toByteOffset: 2, as: UInt16.self)
                    engine.handleRtp(from: pubs[p], packet: packets[p], now: now)
                }
                engine.handleTimeout(now: now)
                queued &+= engine.transmitCount
                engine.clearTransmits()
            }
            benchmark.stopMeasurement()
            blackHole(queued)
            precondition(loudest == 0 || engine.drops(.notLoudest) > 0, "nothing was left out")
        }
    }
}
