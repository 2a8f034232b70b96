import MinatoWire

/// RTCP compound packets: every packet type Minato reads, every accessor.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRtcp(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    var it = RtcpIterator(bytes)
    var sink: UInt64 = 0
    while let p = it.next() {
        precondition(p.offset + p.bytes.count <= size, "packet exceeds the compound")
        if let sr = SenderReport(p) {
            sink &+= sr.ntpTimestamp &+ UInt64(sr.rtpTimestamp) &+ UInt64(sr.packetCount)
            for i in 0..<sr.reportCount { sink &+= UInt64(sr.reportBlock(at: i)?.jitter ?? 0) }
        }
        if let rr = ReceiverReport(p) {
            for i in 0..<rr.reportCount { sink &+= UInt64(truncatingIfNeeded: rr.reportBlock(at: i)?.cumulativeLost ?? 0) }
        }
        if let sdes = Sdes(p) { for i in 0..<sdes.chunkCount { sink &+= UInt64(sdes.ssrc(at: i) ?? 0) } }
        if let bye = Bye(p) { for i in 0..<bye.ssrcCount { sink &+= UInt64(bye.ssrc(at: i) ?? 0) } }
        if let pli = PictureLossIndication(p) { sink &+= UInt64(pli.mediaSsrc) }
        if let fir = FullIntraRequest(p) { for i in 0..<fir.entryCount { sink &+= UInt64(fir.entry(at: i)?.ssrc ?? 0) } }
        if let nack = GenericNack(p) { for i in 0..<nack.pairCount { sink &+= UInt64(nack.pair(at: i)?.pid ?? 0) } }
        if let remb = Remb(p) {
            sink &+= remb.bitrate
            for i in 0..<remb.ssrcCount { sink &+= UInt64(remb.ssrc(at: i) ?? 0) }
        }
        if let twcc = TransportFeedback(p) {
            sink &+= UInt64(twcc.baseSequence) &+ UInt64(twcc.feedbackCount) &+ UInt64(UInt32(bitPattern: twcc.referenceTime))
            var reported = 0
            for (sequence, arrival) in twcc {
                sink &+= UInt64(sequence) &+ UInt64(UInt32(bitPattern: arrival.delta))
                reported += 1
            }
            precondition(reported == twcc.statusCount, "TWCC iteration stopped early")
        }
        // Maximal claims: with the engine's cap a packet parses only when its claim fits, and
        // then exactly as without the cap.
        let capped = TransportFeedback(p, maxStatusCount: 4096)
        let claimed = TransportFeedback.claimedStatusCount(p)
        if let capped {
            precondition(capped.statusCount <= 4096 && capped.statusCount == claimed, "cap not applied")
            precondition(TransportFeedback(p)?.statusCount == capped.statusCount, "capped parse differs")
        } else if let claimed, claimed <= 4096 {
            precondition(TransportFeedback(p) == nil, "cap refused a packet within it")
        }
    }
    return sink == 42 ? 0 : 0
}

// SwiftPM links an executable's entry point as `FuzzRtcp_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzRtcp_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzRtcp)
}
