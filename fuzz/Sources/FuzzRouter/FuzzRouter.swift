import MinatoMedia
import MinatoWire

/// The forwarding engine fed arbitrary operations for two rooms that reuse the same SSRCs.
/// Invariants: a forwarded packet goes only to a consumer's own transport in the source's
/// router, with that consumer's SSRC and payload type, and its sequence number and timestamp
/// keep one constant offset from the publisher's between resyncs (so numbering is continuous).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRouter(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var world = World()
    var i = 0
    let input = UnsafeBufferPointer(start: data, count: size)
    while i + 2 <= size {
        let op = input[i] % 6, arg = input[i + 1]
        i += 2
        switch op {
        case 0, 1:
            // A packet of up to 255 bytes from transport arg % 5.
            let n = i < size ? min(Int(input[i]), size - i - 1) : 0
            i += 1
            let bytes = UnsafeRawBufferPointer(start: data + i, count: max(0, n))
            i += max(0, n)
            world.receive(op == 0 ? .rtp : .rtcp, on: Int(arg) % 5, bytes: bytes)
        case 2: world.advance(by: Nanoseconds(arg) * 10_000_000)
        case 3: world.togglePause(Int(arg) % world.producers.count)
        case 4:
            world.engine.requestKeyFrame(world.producers[Int(arg) % world.producers.count].id, now: world.now)
            world.lastInput = nil
            world.verifyOutbox(source: nil)
        default:
            // A well-formed RTP packet of a known stream, so the forwarding path runs deep.
            world.receiveValid(producer: Int(arg) % world.producers.count, keyframe: arg & 0x80 != 0, step: arg)
        }
        world.check()
    }
    return 0
}

struct World {
    struct ConsumerState { let id: ConsumerId; let producer: Int; let transport: TransportIndex; let ssrc: UInt32; let pt: UInt8
        var seqOffset: UInt16?; var tsOffset: UInt32? }
    struct ProducerState { let id: ProducerId; let transport: TransportIndex; let ssrc: UInt32; let pt: UInt8; let kind: MediaKind
        var paused = false; var seq: UInt16 = 1000; var ts: UInt32 = 5000 }
    enum Kind { case rtp, rtcp }

    let engine = MediaEngine(outboxSlots: 64)
    var now: Nanoseconds = 1_000_000_000
    var transports: [TransportIndex] = []
    var routerOf: [TransportIndex: Int] = [:]
    var producers: [ProducerState] = []
    var consumers: [ConsumerState] = []
    /// The producer whose input is being forwarded, with the input's seq/ts (for offsets).
    var lastInput: (producer: Int, seq: UInt16, ts: UInt32)?

    init() {
        for (index, router) in [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)] {
            let t = engine.addTransport(router: RouterId(Int32(router)), feedbackSsrc: UInt32(0xF000 + index))
            transports.append(t)
            routerOf[t] = router
        }
        // Both rooms' publishers use SSRCs 1 (VP8) and 2 (Opus).
        for pub in [0, 3] {
            for (ssrc, pt, kind) in [(UInt32(1), UInt8(96), MediaKind.video), (2, 111, .audio)] {
                let id = try! engine.addProducer(ProducerParameters(
                    transport: transports[pub], kind: kind, ssrc: ssrc, rtxSsrc: kind == .video ? 3 : nil, payloadType: pt,
                    clockRate: kind == .video ? 90_000 : 48_000, codec: kind == .video ? .vp8 : .other,
                    keyFrameRequest: kind == .video ? .pli : .none))
                producers.append(ProducerState(id: id, transport: transports[pub], ssrc: ssrc, pt: pt, kind: kind))
            }
        }
        for (p, subs) in [(0, [1, 2]), (1, [1, 2]), (2, [4]), (3, [4])] {
            for s in subs {
                let ssrc = UInt32(0x1000 * (s + 1) + p), pt = UInt8(100 + p)
                let id = try! engine.addConsumer(ConsumerParameters(producer: producers[p].id, transport: transports[s], ssrc: ssrc,
                                                                    payloadType: pt, extensionIds: .identity), now: now)
                consumers.append(ConsumerState(id: id, producer: p, transport: transports[s], ssrc: ssrc, pt: pt))
            }
        }
        engine.clearTransmits()
    }

    mutating func receive(_ kind: Kind, on t: Int, bytes: UnsafeRawBufferPointer) {
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 8)
        defer { copy.deallocate() }
        if bytes.count > 0 { copy.copyMemory(from: bytes) }
        let packet = UnsafeMutableRawBufferPointer(rebasing: copy[0..<bytes.count])
        lastInput = nil
        if kind == .rtp, let view = RtpPacketView(packet),
           let p = producers.firstIndex(where: { $0.transport == transports[t] && $0.ssrc == view.ssrc }) {
            lastInput = (p, view.sequenceNumber, view.timestamp)
        }
        if kind == .rtp { engine.handleRtp(from: transports[t], packet: packet, now: now) }
        else { engine.handleRtcp(from: transports[t], packet: UnsafeRawBufferPointer(packet), now: now) }
        verifyOutbox(source: transports[t])
    }

    mutating func receiveValid(producer p: Int, keyframe: Bool, step: UInt8) {
        producers[p].seq &+= UInt16(step % 4)   // 0 = duplicate, >1 = a gap
        producers[p].ts &+= UInt32(step) * 30
        var bytes = [UInt8](repeating: 0, count: 40)
        bytes.withUnsafeMutableBytes { b in
            _ = RtpPacketView.writeHeader(into: b, payloadType: producers[p].pt, sequenceNumber: producers[p].seq,
                                          timestamp: producers[p].ts, ssrc: producers[p].ssrc)
            b[12] = 0x10
            b[13] = keyframe ? 0 : 1
        }
        now &+= 1_000_000
        bytes.withUnsafeMutableBytes { b in
            lastInput = (p, producers[p].seq, producers[p].ts)
            engine.handleRtp(from: producers[p].transport, packet: b, now: now)
        }
        verifyOutbox(source: producers[p].transport)
    }

    mutating func advance(by ns: Nanoseconds) {
        // Timers by deadline: before the engine's deadline a timeout does nothing, and after
        // one the next deadline lies in the future.
        let due = engine.nextDeadline
        now &+= ns
        lastInput = nil
        if let due, now < due {
            engine.handleTimeout(now: now)
            precondition(engine.transmitCount == 0, "work done before the deadline")
        } else {
            engine.handleTimeout(now: now)
        }
        if let next = engine.nextDeadline { precondition(next > now, "a deadline in the past after handleTimeout") }
        verifyOutbox(source: nil)
    }

    mutating func togglePause(_ p: Int) {
        producers[p].paused.toggle()
        engine.setPaused(producers[p].id, producers[p].paused, now: now)
        if !producers[p].paused {
            for c in consumers.indices where consumers[c].producer == p { consumers[c].seqOffset = nil; consumers[c].tsOffset = nil }
        }
        lastInput = nil
        verifyOutbox(source: nil)
    }

    mutating func verifyOutbox(source: TransportIndex?) {
        for k in 0..<engine.transmitCount {
            let tx = engine.transmit(at: k)
            precondition(tx.length > 0 && tx.length <= MediaEngine.slotSize - MediaEngine.srtpTrailerRoom)
            guard !tx.isRtcp else { continue }
            let view = RtpPacketView(UnsafeMutableRawBufferPointer(start: tx.bytes, count: tx.length))!
            guard let c = consumers.firstIndex(where: { $0.ssrc == view.ssrc }) else {
                preconditionFailure("forwarded a packet with SSRC \(view.ssrc), which no consumer has")
            }
            precondition(consumers[c].transport == tx.transport, "a consumer's packet left on another transport")
            precondition(view.payloadType == consumers[c].pt, "payload type not rewritten")
            if let source { precondition(routerOf[source] == routerOf[tx.transport], "a packet crossed rooms") }
            guard let input = lastInput else { preconditionFailure("RTP forwarded with no RTP input") }
            precondition(consumers[c].producer == input.producer, "forwarded to a consumer of another producer")
            let seqOffset = view.sequenceNumber &- input.seq, tsOffset = view.timestamp &- input.ts
            if let expected = consumers[c].seqOffset {
                precondition(seqOffset == expected && tsOffset == consumers[c].tsOffset!, "numbering jumped without a resync")
            } else {
                consumers[c].seqOffset = seqOffset
                consumers[c].tsOffset = tsOffset
            }
        }
        engine.clearTransmits()
    }

    func check() {
        precondition(engine.transmitCount == 0)
        precondition(engine.activeConsumerCount == consumers.count && engine.activeProducerCount == producers.count)
    }
}

// SwiftPM links an executable's entry point as `FuzzRouter_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzRouter_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzRouter)
}
