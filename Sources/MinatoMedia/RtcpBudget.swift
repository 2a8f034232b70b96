/// What the peer of one transport may make the engine do with RTCP: two token buckets, one of
/// compound packets and one of work units, each refilled at its rate per second and holding at
/// most one second of it. A unit is one RTCP packet inside the compound plus one per item it
/// makes the engine look at (report block, FIR entry, NACK pair, transport-wide status), priced
/// from the header before the engine walks it, so a peer can never make the engine do more than
/// its share of a worker, whatever its packets claim. Sans-IO (the caller passes the time);
/// plain integers, no allocation. Lives in `MediaEngine.TransportEntry`, on the worker thread.
///
/// Credit is kept in unit-nanoseconds (units × 10⁹): refilling by `elapsed × rate` then loses
/// no fraction however often it is called.
struct RtcpBudget {
    /// Compound packets and work units per second (at least 1 each).
    let packetsPerSecond: Int
    let workPerSecond: Int
    private var packetCredit: Int
    private var workCredit: Int
    private var refilledAt: Nanoseconds

    /// Largest rate accepted: keeps `rate × 10⁹` and every sum of credits far from overflow.
    static let maxRate = 10_000_000
    private static let second = 1_000_000_000

    /// A full budget (the first `admitPacket` refills nothing it does not need).
    init(packetsPerSecond: Int, workPerSecond: Int) {
        self.packetsPerSecond = min(max(packetsPerSecond, 1), Self.maxRate)
        self.workPerSecond = min(max(workPerSecond, 1), Self.maxRate)
        packetCredit = self.packetsPerSecond * Self.second
        workCredit = self.workPerSecond * Self.second
        refilledAt = 0
    }

    /// Admits one compound packet at `now` (refilling first); false when none is left.
    mutating func admitPacket(now: Nanoseconds) -> Bool {
        refill(now: now)
        guard packetCredit >= Self.second else { return false }
        packetCredit -= Self.second
        return true
    }

    /// Spends `units` of work (at least 1); false, spending nothing, when they are not left.
    mutating func spend(_ units: Int) -> Bool {
        let units = min(max(units, 1), Self.maxRate)
        guard workCredit >= units * Self.second else { return false }
        workCredit -= units * Self.second
        return true
    }

    private mutating func refill(now: Nanoseconds) {
        guard now > refilledAt else { return }
        let elapsed = now - refilledAt
        refilledAt = now
        if elapsed >= UInt64(Self.second) {
            packetCredit = packetsPerSecond * Self.second
            workCredit = workPerSecond * Self.second
            return
        }
        let e = Int(truncatingIfNeeded: elapsed)  // < 10⁹
        packetCredit = min(packetCredit + e * packetsPerSecond, packetsPerSecond * Self.second)
        workCredit = min(workCredit + e * workPerSecond, workPerSecond * Self.second)
    }
}
