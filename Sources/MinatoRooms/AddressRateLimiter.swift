/// How many new things (WHIP/WHEP sessions) each client address may start: a token bucket per
/// address holding `perSecond` starts and refilled at `perSecond` a second. Addresses whose
/// bucket is full again are forgotten when the table grows past `maxAddresses`; while it stays
/// that full, new addresses are refused (one client cannot grow it without bound). Plain value,
/// owned by `RoomService` (on its actor).
struct AddressRateLimiter {
    let perSecond: Int
    let maxAddresses: Int
    private var buckets: [String: (tokens: Double, at: ContinuousClock.Instant)] = [:]

    init(perSecond: Int, maxAddresses: Int = 16_384) {
        self.perSecond = max(perSecond, 1)
        self.maxAddresses = max(maxAddresses, 1)
    }

    /// Takes one start for `address` at `now`; false when its bucket is empty (or the table is
    /// full of addresses that are all still limited).
    mutating func admit(_ address: String, now: ContinuousClock.Instant) -> Bool {
        let rate = Double(perSecond)
        var bucket = buckets[address] ?? (rate, now)
        let elapsed = now - bucket.at
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        bucket.tokens = min(rate, bucket.tokens + max(seconds, 0) * rate)
        bucket.at = now
        guard bucket.tokens >= 1 else {
            buckets[address] = bucket
            return false
        }
        if buckets[address] == nil, buckets.count >= maxAddresses {
            forgetRefilled(now: now)
            guard buckets.count < maxAddresses else { return false }
        }
        bucket.tokens -= 1
        buckets[address] = bucket
        return true
    }

    /// Addresses tracked now (tests, stats).
    var count: Int { buckets.count }

    /// Drops every address whose bucket has refilled by `now` (it would start full anyway).
    private mutating func forgetRefilled(now: ContinuousClock.Instant) {
        let rate = Double(perSecond)
        buckets = buckets.filter { _, b in
            let elapsed = now - b.at
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            return b.tokens + seconds * rate < rate
        }
    }
}
