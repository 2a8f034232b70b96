import MinatoWire

/// RFC 7983 demux: classification never traps and agrees with the first-byte ranges.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDemux(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let kind = classifyPacket(UnsafeRawBufferPointer(start: data, count: size))
    if size > 0 {
        let b = data[0]
        switch kind {
        case .stun: precondition(b <= 3)
        case .dtls: precondition(b >= 20 && b <= 63)
        case .rtp, .rtcp: precondition(b >= 128 && b <= 191)
        case .unknown: break
        }
    }
    return 0
}

// SwiftPM links an executable's entry point as `FuzzDemux_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzDemux_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzDemux)
}
