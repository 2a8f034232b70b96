/// The 16-bit RTP sequence number as it appears on the wire. Comparisons are modulo 2^16
/// (RFC 1982 serial number arithmetic): use `isNewer(than:)` / `distance(to:)`, never `<`.
public struct SequenceNumber: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    @inlinable public init(_ v: UInt16) { rawValue = v }

    /// True when `self` follows `other` by less than half the number space.
    @inlinable public func isNewer(than other: SequenceNumber) -> Bool {
        let d = rawValue &- other.rawValue
        return d != 0 && d < 0x8000
    }

    /// Signed forward distance from `self` to `other` in -32768...32767.
    @inlinable public func distance(to other: SequenceNumber) -> Int {
        Int(Int16(bitPattern: other.rawValue &- rawValue))
    }

    @inlinable public func advanced(by n: Int) -> SequenceNumber {
        SequenceNumber(rawValue &+ UInt16(truncatingIfNeeded: n))
    }

    public var description: String { String(rawValue) }
}

/// A sequence number extended with its wrap-around count (RFC 3550 A.1: cycles << 16 | seq).
/// Ordered with plain `<`. Produced by `SequenceUnwrapper`.
public struct ExtendedSequenceNumber: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    @inlinable public init(_ v: UInt64) { rawValue = v }
    /// The low 16 bits, as sent on the wire.
    @inlinable public var wire: SequenceNumber { SequenceNumber(UInt16(truncatingIfNeeded: rawValue)) }
    @inlinable public var cycles: UInt64 { rawValue >> 16 }
    @inlinable public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { String(rawValue) }
}

/// Turns 16-bit wire sequence numbers into 64-bit extended ones, handling wrap-around and
/// reordering: each number is placed at the extended value nearest to the highest one seen
/// (within ±32768). The first number seen is returned as is (cycle 0). A reordered number that
/// would fall before extended value 0 (older than the very first packet, across zero) is
/// returned as 0. Owned by one stream; not thread-safe (a plain struct).
public struct SequenceUnwrapper: Sendable {
    @usableFromInline var highest: UInt64 = 0
    @usableFromInline var started = false

    @inlinable public init() {}

    /// The highest extended number returned so far, or nil before the first call.
    @inlinable public var highestExtended: UInt64? { started ? highest : nil }

    @inlinable public mutating func unwrap(_ s: UInt16) -> UInt64 {
        guard started else {
            started = true
            highest = UInt64(s)
            return highest
        }
        let delta = Int64(Int16(bitPattern: s &- UInt16(truncatingIfNeeded: highest)))
        if delta >= 0 {
            highest &+= UInt64(delta)
            return highest
        }
        let back = UInt64(-delta)
        return back > highest ? 0 : highest - back
    }

    @inlinable public mutating func unwrap(_ s: SequenceNumber) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber(unwrap(s.rawValue))
    }
}
