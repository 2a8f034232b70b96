import MinatoTransport

/// The data-channel input path (SCTP packets into usrsctp, DCEP and user messages into the
/// DataRouter): nothing traps, whatever the bytes (DataChannelFuzzHarness.feed).
nonisolated(unsafe) let harness = try? DataChannelFuzzHarness()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDataChannel(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    harness?.feed(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

// SwiftPM links an executable's entry point as `FuzzDataChannel_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzDataChannel_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzDataChannel)
}
