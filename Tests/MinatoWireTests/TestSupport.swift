@testable import MinatoWire

/// Runs `body` over a mutable copy of `bytes` and returns the (possibly modified) bytes too.
@discardableResult
func withPacket<R>(_ bytes: [UInt8], _ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> (R, [UInt8]) {
    var copy = bytes
    let r = try copy.withUnsafeMutableBytes { try body($0) }
    return (r, copy)
}

func withBytes<R>(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try bytes.withUnsafeBytes { try body($0) }
}

func be16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
