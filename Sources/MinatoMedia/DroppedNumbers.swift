/// The values a consumer left out of an increasing numbering it rewrites (RTP sequence numbers
/// modulo 2^16, VP8 PictureIDs modulo 2^15 or 2^7) when it drops packets of a temporal layer it
/// does not forward: runs of consecutive dropped values, newest last, at most `capacity` runs.
/// The rewriter closes the gaps (each later value moves down by one per drop), and this record
/// lets a late (reordered) value or a NACKed one be mapped with the offset that held at its
/// place. Fixed size, no allocation, no traps.
struct DroppedNumbers: Sendable {
    static let capacity = 32
    /// First value and length of each run, in a ring (`head` = the oldest when full).
    private var starts = SIMD32<UInt16>()
    private var lengths = SIMD32<UInt16>()
    private var count = 0
    private var head = 0
    /// The numbering's modulus less one (0xFFFF, 0x7FFF or 0x7F).
    let mask: UInt16

    init(mask: UInt16) { self.mask = mask }

    mutating func removeAll() { count = 0; head = 0 }

    var isEmpty: Bool { count == 0 }

    /// True when `a` comes after `b` (within half the numbering's range).
    @inline(__always)
    func isNewer(_ a: UInt16, than b: UInt16) -> Bool {
        let d = (a &- b) & mask
        return d != 0 && d <= mask / 2
    }

    @inline(__always)
    private func index(_ k: Int) -> Int { (head + k) & (Self.capacity - 1) }

    /// Records a dropped value newer than every one recorded before it (the caller checks).
    mutating func append(_ value: UInt16) {
        let v = value & mask
        if count > 0 {
            let last = index(count - 1)
            if (starts[last] &+ lengths[last]) & mask == v, lengths[last] < mask / 2 {
                lengths[last] &+= 1
                return
            }
        }
        if count == Self.capacity {
            head = index(1)
            count -= 1
        }
        let i = index(count)
        starts[i] = v
        lengths[i] = 1
        count += 1
    }

    /// How many recorded drops are newer than `value`; nil when `value` is older than the oldest
    /// run kept after the ring overflowed (the answer is then unknown).
    func dropsNewer(than value: UInt16) -> Int? {
        let v = value & mask
        // Runs evicted from a full ring were older than its oldest: unknown whether they were newer than `v`.
        if count == Self.capacity, isNewer(starts[head], than: v) { return nil }
        var n = 0
        var k = count - 1
        while k >= 0 {
            let i = index(k)
            let start = starts[i], length = lengths[i]
            let last = (start &+ length &- 1) & mask
            if isNewer(start, than: v) {
                n += Int(length)
            } else if isNewer(last, than: v) {
                n += Int((last &- v) & mask)
            } else {
                break   // runs are in order: every older one is older still
            }
            k -= 1
        }
        return n
    }

    /// The value that became `output` when each value maps to itself + `offset` + the drops
    /// newer than it (the rewriter's current offset); nil when it lies before the runs kept by a
    /// full ring. Walks the runs from the newest: the values after each run are numbered
    /// contiguously up to the next one.
    func input(forOutput output: UInt16, offset: UInt16) -> UInt16? {
        var later: UInt16 = 0
        var k = count - 1
        while k >= 0 {
            let i = index(k)
            let firstAfter = starts[i] &+ lengths[i]
            let firstOutput = (firstAfter &+ offset &+ later) & mask
            if !isNewer(firstOutput, than: output & mask) { return (output &- offset &- later) & mask }
            later &+= lengths[i]
            k -= 1
        }
        let value = (output &- offset &- later) & mask
        if count == Self.capacity, isNewer(starts[head], than: value) { return nil }
        return value
    }

    /// Whether `value` was dropped (within the runs kept).
    func contains(_ value: UInt16) -> Bool {
        let v = value & mask
        var k = count - 1
        while k >= 0 {
            let i = index(k)
            if (v &- starts[i]) & mask < lengths[i] { return true }
            if isNewer(starts[i], than: v) { k -= 1; continue }
            return false
        }
        return false
    }
}
