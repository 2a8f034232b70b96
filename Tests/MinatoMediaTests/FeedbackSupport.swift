import MinatoMedia
import MinatoWire

/// A receiver's transport-wide feedback packet, written by the real writer: `arrivals[k]` is
/// when the packet with sequence number `base &+ k` arrived (nil: lost). The reference time is
/// the earliest arrival's 64 ms unit (`fallback`'s when nothing arrived).
func transportFeedbackPacket(base: UInt16, arrivals: [Nanoseconds?], fallback: Nanoseconds = 0,
                             senderSsrc: UInt32 = 0xABCD, mediaSsrc: UInt32 = 0x5000) -> [UInt8] {
    let reference = (arrivals.compactMap { $0 }.min() ?? fallback) / 64_000_000
    var previous = reference * 256
    let deltas: [TransportFeedback.Arrival] = arrivals.map { at in
        guard let at else { return .notReceived }
        let ticks = at / 250_000
        defer { previous = ticks }
        return .init(delta: Int32(Int64(ticks) - Int64(previous)))
    }
    var bytes = [UInt8](repeating: 0, count: 1500)
    let n = bytes.withUnsafeMutableBytes { b in
        deltas.withUnsafeBufferPointer { a in
            RtcpWriter.transportFeedback(into: b, senderSsrc: senderSsrc, mediaSsrc: mediaSsrc, baseSequence: base,
                                         referenceTime: Int32(reference), feedbackCount: 0, arrivals: a).bytes
        }
    }
    return Array(bytes[0..<n])
}
