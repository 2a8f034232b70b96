import MinatoWire

/// SDP parse -> serialize -> parse: whatever parses must serialize to text that parses to the
/// same description.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSdp(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: data, count: size), as: UTF8.self)
    guard let first = try? SessionDescription.parse(text) else { return 0 }
    let out = first.serialize()
    let second: SessionDescription
    do { second = try SessionDescription.parse(out) } catch {
        preconditionFailure("serialized SDP does not parse again: \(error)\n\(out)")
    }
    precondition(second == first, "parse(serialize(sdp)) differs from sdp\n\(out)")
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
