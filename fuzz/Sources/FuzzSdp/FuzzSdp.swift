import MinatoWire

/// SDP parse -> serialize -> parse: whatever parses must serialize to text that parses again,
/// and serialization is canonical: serializing that re-parsed description gives the same text
/// and the same description (a fixed point after one round; the first parse may accept lines
/// out of RFC 4566 order, which serialization puts in order). The codecs Minato would forward
/// are validated and their fmtp parameters safe tokens that reparse to themselves.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSdp(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: data, count: size), as: UTF8.self)
    guard let first = try? SessionDescription.parse(text) else { return 0 }
    let out1 = first.serialize()
    let second: SessionDescription
    do { second = try SessionDescription.parse(out1) } catch {
        preconditionFailure("serialized SDP does not parse again: \(error)\n\(out1)")
    }
    let out2 = second.serialize()
    precondition(out2 == out1, "serialize(parse(serialize(sdp))) differs from serialize(sdp)\n\(out1)\n---\n\(out2)")
    let third = try? SessionDescription.parse(out2)
    precondition(third == second, "parsing the canonical text twice gave different descriptions\n\(out2)")
    // What Minato would copy into another member's SDP is validated and made of safe tokens.
    for m in first.media {
        for c in m.forwardableCodecs {
            precondition(c.payloadType <= 127 && c.clockRate == c.codec.clockRate, "unvalidated codec \(c)")
            let fmtp = c.parameters.text ?? ""
            precondition(fmtp.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }, "unsafe fmtp \(fmtp)")
            precondition(FmtpParameters(parsing: fmtp) == c.parameters, "fmtp does not reparse: \(fmtp)")
        }
    }
    checkReceiverAnswer(to: first)
    checkLimitsAndIndex(text, first)
    return 0
}

/// Limits only refuse: under `SdpLimits` a description parses to the same value, or the parse
/// stops with a limit error (never a syntax error). And the one-pass lookups by payload type
/// (`PayloadTypeIndex`) find what the one-line lookups find.
private func checkLimitsAndIndex(_ text: String, _ parsed: SessionDescription) {
    let small = SdpLimits(maxMediaSections: 4, maxFormatsPerSection: 8, maxCandidatesPerSection: 4)
    do {
        let limited = try SessionDescription.parse(text, limits: small)
        precondition(limited == parsed, "a parse within the limits gave another description")
    } catch {
        precondition(error.limit != nil, "a limit turned SDP that parses into a syntax error: \(error)")
    }
    for m in parsed.media {
        let index = m.payloadTypeIndex
        for pt in index.listed {
            precondition(index.rtpMap(for: pt) == m.rtpMap(for: pt) && index.fmtp(for: pt) == m.fmtp(for: pt)
                         && index.rtcpFeedback(for: pt) == m.rtcpFeedback(for: pt), "index and lookups differ for \(pt)")
        }
    }
}

private let fuzzLocal = SdpLocalTransport(iceUfrag: "ufrag", icePwd: "passwordpasswordpassword",
                                          fingerprint: "sha-256 00:11", candidates: ["candidate:1 1 udp 1 127.0.0.1 40000 typ host"],
                                          iceLite: true)

/// The description as a WHEP player's offer: the SFU's answer (`SfuSdp.answer(toReceiverOffer:)`)
/// for the codec each m-section would take must serialize to text that parses, answer every
/// offered m-section in order, and send only payload types the offer listed for that codec.
private func checkReceiverAnswer(to offer: SessionDescription) {
    var streams: [SfuSdp.AnsweredReceiverStream] = []
    for (i, m) in offer.media.enumerated() {
        guard let mid = m.mid, !streams.contains(where: { $0.mid == mid }), let first = m.forwardableCodecs.first,
              let codec = SfuSdp.receiverCodec(in: m, for: first) else { continue }
        precondition(m.forwardableCodecs.contains(codec), "receiverCodec chose a codec the m-section did not offer")
        let rtx = m.kind == "video" ? m.rtxPayloadType(associatedWith: codec.payloadType) : nil
        streams.append(SfuSdp.AnsweredReceiverStream(mid: mid, codec: codec, rtxPayloadType: rtx, ssrc: UInt32(i + 1),
                                                     rtxSsrc: UInt32(i + 1000), streamId: "s", trackId: "t", cname: "c",
                                                     extensions: SfuSdp.receiverExtensions(in: m)))
    }
    let answer = SfuSdp.answer(toReceiverOffer: offer, streams: streams, local: fuzzLocal, sessionId: 1, version: 1)
    precondition(answer.media.count == offer.media.count, "the answer must have one m-section per offered one")
    let text = answer.serialize()
    guard let reparsed = try? SessionDescription.parse(text) else { preconditionFailure("the answer does not parse:\n\(text)") }
    for (m, s) in zip(reparsed.media, answer.media) where s.port != 0 {
        precondition(m.payloadTypes == s.payloadTypes, "answer payload types changed on reparse")
    }
}

// SwiftPM links an executable's entry point as `FuzzSdp_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzSdp_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzSdp)
}
