import MinatoMedia
import MinatoWire

/// The forwarding engine fed arbitrary operations for two rooms that reuse the same SSRCs.
/// Invariants: a forwarded packet goes only to a consumer's own transport in the source's
/// router, with that consumer's SSRC and payload type, and its sequence number and timestamp
/// keep one constant offset from the publisher's between resyncs (so numbering is continuous).
/// Loss recovery runs too: video producers NACK and take RTX (SSRC 3, PT 97), half the video
/// consumers take RTX, the audio producers may send RED (PT 63) which one consumer takes. A
/// packet resent on a NACK goes only to the transport the NACK came from, with the consumer's
/// SSRC and payload type or its RTX SSRC and RTX payload type.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRouter(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var world = World()
    var i = 0
    let input = UnsafeBufferPointer(start: data, count: size)
    while i + 2 <= size {
        let op = input[i] % 7, arg = input[i + 1]
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
            world.rtcpFrom = nil
            world.verifyOutbox(source: nil)
        case 6:
            // A subscriber's NACK for packets it was sent recently, so the resend path runs deep.
            world.nackRecent(consumer: Int(arg) % world.consumers.count, back: UInt16(arg >> 3), mask: UInt16(arg) &* 0x0101)
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
        let rtxSsrc: UInt32?; let redPt: UInt8?
        var seqOffset: UInt16?; var tsOffset: UInt32?; var lastSeq: UInt16? }
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
    /// The transport the last RTCP came from (a NACK there may make resends).
    var rtcpFrom: TransportIndex?

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
                    keyFrameRequest: kind == .video ? .pli : .none, rtxPayloadType: kind == .video ? 97 : nil,
                    redPayloadType: kind == .audio ? 63 : nil, nack: kind == .video))
                producers.append(ProducerState(id: id, transport: transports[pub], ssrc: ssrc, pt: pt, kind: kind))
            }
        }
        for (p, subs) in [(0, [1, 2]), (1, [1, 2]), (2, [4]), (3, [4])] {
            for s in subs {
                let ssrc = UInt32(0x1000 * (s + 1) + p), pt = UInt8(100 + p)
                let rtx: UInt32? = producers[p].kind == .video && s != 2 ? ssrc | 0x8000 : nil
                let red: UInt8? = producers[p].kind == .audio && s == 1 ? 63 : nil
                let id = try! engine.addConsumer(ConsumerParameters(producer: producers[p].id, transport: transports[s], ssrc: ssrc,
                                                                    payloadType: pt, extensionIds: .identity, rtxSsrc: rtx,
                                                                    rtxPayloadType: rtx == nil ? nil : 120, redPayloadType: red), now: now)
                consumers.append(ConsumerState(id: id, producer: p, transport: transports[s], ssrc: ssrc, pt: pt, rtxSsrc: rtx, redPt: red))
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
        rtcpFrom = kind == .rtcp ? transports[t] : nil
        if kind == .rtp, let view = RtpPacketView(packet) {
            if let p = producers.firstIndex(where: { $0.transport == transports[t] && $0.ssrc == view.ssrc }) {
                lastInput = (p, view.sequenceNumber, view.timestamp)
            } else if view.ssrc == 3, view.payloadType == 97, view.payloadLength > 2,
                      let p = producers.firstIndex(where: { $0.transport == transports[t] && $0.kind == .video }) {
                // RTX: forwarded as the original, whose sequence number leads the payload.
                let osn = UInt16(view.payload[0]) << 8 | UInt16(view.payload[1])
                lastInput = (p, osn, view.timestamp)
            }
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
        rtcpFrom = nil
        bytes.withUnsafeMutableBytes { b in
            lastInput = (p, producers[p].seq, producers[p].ts)
            engine.handleRtp(from: producers[p].transport, packet: b, now: now)
        }
        verifyOutbox(source: producers[p].transport)
    }

    mutating func nackRecent(consumer c: Int, back: UInt16, mask: UInt16) {
        guard let last = consumers[c].lastSeq else { return }
        var bytes = [UInt8](repeating: 0, count: 16)
        let n = bytes.withUnsafeMutableBytes {
            RtcpWriter.nack(into: $0, senderSsrc: 0x5555, mediaSsrc: consumers[c].ssrc, pid: last &- back, blp: mask)
        }
        now &+= 1_000_000
        bytes.withUnsafeBytes { b in
            lastInput = nil
            rtcpFrom = consumers[c].transport
            engine.handleRtcp(from: consumers[c].transport, packet: UnsafeRawBufferPointer(rebasing: b[0..<n]), now: now)
        }
        verifyOutbox(source: consumers[c].transport)
    }

    mutating func advance(by ns: Nanoseconds) {
        // Timers by deadline: before the engine's deadline a timeout does nothing, and after
        // one the next deadline lies in the future.
        let due = engine.nextDeadline
        now &+= ns
        lastInput = nil
        rtcpFrom = nil
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
        rtcpFrom = nil
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
            if let c = consumers.firstIndex(where: { $0.rtxSsrc == view.ssrc }) {
                precondition(rtcpFrom == tx.transport && consumers[c].transport == tx.transport, "RTX sent without a NACK from its transport")
                precondition(view.payloadType == 120 && view.payloadLength >= 2, "RTX with a wrong payload type or no original sequence number")
                continue
            }
            guard let c = consumers.firstIndex(where: { $0.ssrc == view.ssrc }) else {
                preconditionFailure("forwarded a packet with SSRC \(view.ssrc), which no consumer has")
            }
            precondition(consumers[c].transport == tx.transport, "a consumer's packet left on another transport")
            precondition(view.payloadType == consumers[c].pt || (consumers[c].redPt != nil && view.payloadType == consumers[c].redPt),
                         "payload type not rewritten")
            if let source { precondition(routerOf[source] == routerOf[tx.transport], "a packet crossed rooms") }
            guard let input = lastInput else {
                // A plain resend on the subscriber's NACK.
                precondition(rtcpFrom == tx.transport, "RTP sent with no RTP input and no NACK from its transport")
                continue
            }
            precondition(consumers[c].producer == input.producer, "forwarded to a consumer of another producer")
            let seqOffset = view.sequenceNumber &- input.seq, tsOffset = view.timestamp &- input.ts
            consumers[c].lastSeq = view.sequenceNumber
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
