import MinatoWire

/// RTP view: every field, the header-extension walk, and an id remap, on arbitrary bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRtp(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
    defer { buf.deallocate() }
    if size > 0 { buf.copyMemory(from: UnsafeRawBufferPointer(start: data, count: size)) }
    guard let view = RtpPacketView(buf) else { return 0 }
    var sink = UInt64(view.ssrc) &+ UInt64(view.sequenceNumber) &+ UInt64(view.timestamp) &+ UInt64(view.payloadType)
    sink &+= UInt64(view.payload.count &+ view.paddingLength &+ view.csrcCount)
    for i in 0..<view.csrcCount { sink &+= UInt64(view.csrc(at: i) ?? 0) }
    for id in UInt8(0)...UInt8(255) { sink &+= UInt64(view.extensionValue(id: id)?.count ?? 0) }
    precondition(view.headerLength + view.payloadLength <= size, "view exceeds the packet")
    for codec in [VideoCodecKind.vp8, .vp9, .h264, .av1] {
        sink &+= isKeyframe(codec: codec, payload: UnsafeRawBufferPointer(view.payload)) ? 1 : 0
    }
    var map = ExtensionIdMap()
    if size > 0 { map[data[0] & 0x0F] = data[size - 1] & 0x0F }
    view.remapExtensionIds(map)
    // After a remap the packet must still parse to the same header and payload sizes.
    let again = RtpPacketView(buf)
    precondition(again?.headerLength == view.headerLength && again?.payloadLength == view.payloadLength,
                 "remapping header-extension ids changed the packet's layout")
    return sink == 42 ? 0 : 0
}

// SwiftPM links an executable's entry point as `FuzzRtp_main`; hand control to libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

@_cdecl("FuzzRtp_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var args = argv
    return LLVMFuzzerRunDriver(&count, &args, fuzzRtp)
}
