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
    return 0
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
