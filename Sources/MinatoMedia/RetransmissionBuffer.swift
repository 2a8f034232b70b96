/// The clear originals of one producer's recent RTP packets, for answering NACKs: each packet
/// is stored once, as it arrived from the publisher (before any consumer's rewriting), and
/// shared by every consumer of the producer. A preallocated ring indexed by sequence number
/// modulo `capacity` (a power of two that divides 2^16, so a sequence number always lands in
/// the same place); an entry is usable while it is at most `maxAge` old. Bounded by count and
/// time; nothing is allocated after `init`.
///
/// Owned by one `MediaEngine` (one per video producer), on its media worker's thread.
final class RetransmissionBuffer {
    /// Packets held at most (a power of two, 16...32768).
    let capacity: Int
    /// How long a stored packet is resent on request.
    let maxAge: Nanoseconds
    private let mask: Int
    private let bytes: UnsafeMutableRawPointer
    private let sequences: UnsafeMutablePointer<UInt16>
    /// 0: empty slot (no packet is ever stored at time 0: the engine's clock starts above 0).
    private let storedAt: UnsafeMutablePointer<Nanoseconds>
    private let lengths: UnsafeMutablePointer<UInt16>

    static let slotSize = 1536

    /// `capacity` is rounded up to a power of two in 16...32768.
    init(capacity: Int, maxAge: Nanoseconds) {
        var c = 16
        while c < min(max(capacity, 16), 32_768) { c <<= 1 }
        self.capacity = c
        self.maxAge = maxAge
        mask = c - 1
        bytes = .allocate(byteCount: c * Self.slotSize, alignment: 16)
        sequences = .allocate(capacity: c)
        sequences.initialize(repeating: 0, count: c)
        storedAt = .allocate(capacity: c)
        storedAt.initialize(repeating: 0, count: c)
        lengths = .allocate(capacity: c)
        lengths.initialize(repeating: 0, count: c)
    }

    deinit {
        bytes.deallocate()
        sequences.deallocate()
        storedAt.deallocate()
        lengths.deallocate()
    }

    /// True when a fresh copy of `sequence` is held (the packet arrived before: a duplicate).
    @inline(__always)
    func contains(_ sequence: UInt16, now: Nanoseconds) -> Bool {
        let i = Int(sequence) & mask
        return storedAt[i] != 0 && sequences[i] == sequence && now &- storedAt[i] <= maxAge
    }

    /// Stores a copy of `packet` under `sequence`, replacing whatever held its slot. Packets
    /// longer than a slot are not stored (the engine drops them before this anyway).
    @inline(__always)
    func store(_ sequence: UInt16, packet: UnsafeRawBufferPointer, now: Nanoseconds) {
        guard let source = packet.baseAddress, packet.count <= Self.slotSize else { return }
        let i = Int(sequence) & mask
        (bytes + i * Self.slotSize).copyMemory(from: source, byteCount: packet.count)
        sequences[i] = sequence
        storedAt[i] = now == 0 ? 1 : now
        lengths[i] = UInt16(truncatingIfNeeded: packet.count)
    }

    /// The stored packet `sequence` if it is held and fresh; valid until the next `store`.
    @inline(__always)
    func packet(_ sequence: UInt16, now: Nanoseconds) -> UnsafeRawBufferPointer? {
        guard contains(sequence, now: now) else { return nil }
        let i = Int(sequence) & mask
        return UnsafeRawBufferPointer(start: bytes + i * Self.slotSize, count: Int(lengths[i]))
    }
}
