import Testing
@testable import MinatoMedia
import MinatoWire

/// A subscriber behind a token-bucket policer (nftables' `limit rate over N kbytes/second`: a
/// packet passes when the bucket holds its whole length; the bucket holds a second's worth),
/// on the lowest simulcast layer, while the server keeps probing for the top one: the probes
/// must cost its media nothing.
@Suite struct ProbeCostTests {
    /// nft's byte limit: `rate` bytes a second, a bucket of one second's worth.
    final class TokenBucket {
        let rate: Double
        var tokens: Double
        var last: Nanoseconds = 0
        init(bytesPerSecond: Double) { rate = bytesPerSecond; tokens = bytesPerSecond }
        func pass(_ length: Int, at now: Nanoseconds) -> Bool {
            if last != 0 { tokens = min(rate, tokens + rate * Double(now - last) / 1e9) }
            last = now
            guard tokens >= Double(length) else { return false }
            tokens -= Double(length)
            return true
        }
    }

    /// Layers of 300, 700 and 1150-byte payloads at 30 packets a second (about 80, 180 and
    /// 290 kbit/s); the link is policed at 1.3 times the lowest layer's rate on the wire (about
    /// 120 kbit/s): the top layer is 2.4 times that, as in issue 25's 640x360 case.
    static func policedRig() throws -> (AllocationTests.Rig, TokenBucket) {
        let rig = try AllocationTests.Rig(sizes: [300, 700, 1150])
        let bucket = TokenBucket(bytesPerSecond: 1.3 * 30 * (300 + 40 + 44))
        rig.policer = { bucket.pass($0, at: $1) }
        return (rig, bucket)
    }

    /// `ms` of the three layers at 30 frames a second, with the engine's timers every 11 ms
    /// (probe padding goes out between the media packets, as it does on a real link) and the
    /// subscriber's feedback every 55 ms.
    static func run(_ rig: AllocationTests.Rig, ms: Int) {
        for step in 0..<(ms / 11) {
            rig.h.now &+= 11_000_000
            if step % 3 == 0 { for layer in 0..<3 { rig.send(layer) } }
            rig.h.engine.handleTimeout(now: rig.h.now)
            rig.collect()
            if step % 5 == 4 { rig.feedback { _ in false } }
        }
    }

    @Test func probesIntoAPolicerCostTheMediaOnTheLowestLayerNothing() throws {
        let (rig, _) = try Self.policedRig()
        rig.send(2, keyframe: true)
        // The policer empties its bucket on the top layer: the consumer goes down to the lowest.
        Self.run(rig, ms: 4000)
        rig.send(0, keyframe: true)
        Self.run(rig, ms: 2000)
        var stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        #expect(stats.layer == 0 && stats.targetLayer == 0)
        // 30 s on the lowest layer while the server probes for the top one every few seconds.
        let probes = rig.h.engine.probesStarted
        rig.mediaDropped = 0; rig.mediaPassed = 0; rig.paddingDropped = 0
        Self.run(rig, ms: 30_000)
        stats = try #require(rig.h.engine.consumerStats(rig.consumer))
        let started = rig.h.engine.probesStarted - probes
        print("[probe-cost] 30 s policed: \(started) probes, padding packets dropped \(rig.paddingDropped), media packets dropped \(rig.mediaDropped) of \(rig.mediaDropped + rig.mediaPassed), estimate \(stats.estimate ?? -1), layer \(stats.layer ?? -1)")
        #expect(started >= 3)
        #expect(rig.paddingDropped > 0)  // the probes did run into the policer
        #expect(stats.layer == 0)
        // Before probe packets were as long as the media's, each probe that emptied the bucket
        // took the tokens from the media for the rest of its run (6 of 909 packets here, 23 padding
        // packets dropped; with them 3 and 7).
        #expect(rig.mediaDropped <= 3)
    }

    @Test func aProbePacketIsAsLongAsTheLongestMediaPacketAndCarriesNoPayload() throws {
        let (rig, _) = try Self.policedRig()
        rig.policer = nil
        rig.send(2, keyframe: true)
        // Loss takes the consumer down; on the clean link that follows, the server probes.
        rig.run(ms: 2000) { $0 % 4 != 0 }
        rig.send(0, keyframe: true)
        rig.padding = 0
        for _ in 0..<100 where rig.padding == 0 { Self.run(rig, ms: 110) }
        print("[probe-cost] probe packet lengths \(rig.paddingLengths)")
        #expect(rig.padding > 0)
        // Padding only (the RTP padding bit, no payload), numbered, and no shorter than the
        // longest media packet a sender puts on the wire (libwebrtc's 1200-byte packets).
        #expect(rig.paddingLengths == [MediaEngine.probePacketLength])
        #expect(MediaEngine.probePacketLength >= 1200)
    }
}
