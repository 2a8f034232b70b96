// Big-endian field access over raw buffers. Internal; callers validate lengths first, and
// these only trap (in debug builds, via the standard library) if a caller forgot to.

extension UnsafeRawBufferPointer {
    @inlinable @inline(__always)
    func wireU16(_ offset: Int) -> UInt16 {
        UInt16(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt16.self))
    }

    @inlinable @inline(__always)
    func wireU24(_ offset: Int) -> UInt32 {
        UInt32(self[offset]) << 16 | UInt32(self[offset + 1]) << 8 | UInt32(self[offset + 2])
    }

    @inlinable @inline(__always)
    func wireU32(_ offset: Int) -> UInt32 {
        UInt32(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    @inlinable @inline(__always)
    func wireU64(_ offset: Int) -> UInt64 {
        UInt64(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }
}

extension UnsafeMutableRawBufferPointer {
    @inlinable @inline(__always)
    func wireU16(_ offset: Int) -> UInt16 {
        UnsafeRawBufferPointer(self).wireU16(offset)
    }

    @inlinable @inline(__always)
    func wireU32(_ offset: Int) -> UInt32 {
        UnsafeRawBufferPointer(self).wireU32(offset)
    }

    @inlinable @inline(__always)
    func setWireU16(_ offset: Int, _ value: UInt16) {
        storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt16.self)
    }

    @inlinable @inline(__always)
    func setWireU32(_ offset: Int, _ value: UInt32) {
        storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt32.self)
    }

    @inlinable @inline(__always)
    func setWireU64(_ offset: Int, _ value: UInt64) {
        storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt64.self)
    }
}
