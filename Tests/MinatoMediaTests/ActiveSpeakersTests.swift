import Testing
@testable import MinatoMedia

/// The speaker state machine on a simulated clock: 20 ms audio packets with an RFC 6464 level
/// byte (0 loudest, 127 silence), a tick every 50 ms.
final class SpeakerClock {
    var speakers: ActiveSpeakers
    var now: Nanoseconds = 1_000_000_000
    var nextTick: Nanoseconds
    /// Every event taken: the owners in order, and when.
    var events: [(at: Nanoseconds, owners: [Int32])] = []
    /// Whether each member's last packet was forwarded.
    var forwarded: [Int: Bool] = [:]

    init(_ settings: ActiveSpeakers.Settings = ActiveSpeakers.Settings(), members: Int) {
        speakers = ActiveSpeakers(settings: settings)
        for m in 0..<members { _ = speakers.add(owner: Int32(m)) }
        nextTick = now &+ settings.tick
    }

    /// Runs `ms` milliseconds: each member sends a packet every 20 ms at `level(member, t)`
    /// (nil: no packet), ticks run on time, due events are taken.
    func run(_ ms: Int, level: (Int, Nanoseconds) -> UInt8?) {
        let end = now &+ UInt64(ms) * 1_000_000
        while now < end {
            now &+= 20_000_000
            for m in speakers.entries.indices where speakers.entries[m].active {
                if let l = level(m, now) { forwarded[m] = speakers.observe(m, level: l, now: now) }
            }
            while nextTick <= now {
                _ = speakers.tick(now: nextTick)
                if speakers.eventDue {
                    events.append((nextTick, speakers.speakers.map(\.owner)))
                    speakers.eventSent(now: nextTick)
                }
                nextTick &+= speakers.settings.tick
            }
        }
    }

    var order: [Int32] { speakers.speakers.map(\.owner) }
}

@Suite struct ActiveSpeakersTests {
    @Test func voiceBecomesASpeakerAfterTheOnsetAndSilenceEndsIt() {
        let c = SpeakerClock(members: 2)
        c.run(160) { m, _ in m == 0 ? 20 : 127 }
        #expect(c.order.isEmpty, "160 ms of voice is below the 200 ms onset")
        c.run(100) { m, _ in m == 0 ? 20 : 127 }
        #expect(c.order == [0])
        #expect(c.events.count == 1 && c.events[0].owners == [0])
        c.run(2000) { m, _ in m == 0 ? 20 : 127 }
        #expect(c.order == [0] && c.events.count == 1, "a steady speaker makes no more events")
        let silenceStart = c.now
        c.run(260) { _, _ in 127 }
        #expect(c.order == [0], "260 ms of silence is within the 300 ms hangover")
        c.run(100) { _, _ in 127 }
        #expect(c.order.isEmpty)
        let ended = try! #require(c.events.last)
        #expect(ended.owners.isEmpty && ended.at - silenceStart <= 400_000_000)
    }

    @Test func aHundredMillisecondClickDoesNotStealTheFloor() {
        let c = SpeakerClock(members: 2)
        c.run(1000) { m, _ in m == 0 ? 30 : 127 }
        #expect(c.order == [0])
        let clickAt = c.now
        // Member 1 clicks for 100 ms, much louder than member 0 speaks.
        c.run(1000) { m, t in m == 0 ? 30 : (t > clickAt && t <= clickAt + 100_000_000 ? 0 : 127) }
        #expect(c.order == [0])
        #expect(c.events.count == 1, "the click made no event: \(c.events.map(\.owners))")
        #expect(!c.speakers.isSpeaking(1))
    }

    @Test func aClickAfterAQuietSpellIsNoSpeakerEither() {
        var s = ActiveSpeakers(settings: ActiveSpeakers.Settings())
        let m = s.add(owner: 0)
        var now: Nanoseconds = 1_000_000_000
        _ = s.observe(m, level: 127, now: now)
        _ = s.tick(now: now)
        // Ten seconds without a packet or a tick (the engine stopped ticking the room), then a 100 ms click.
        now += 10_000_000_000
        for _ in 0..<5 {
            now += 20_000_000
            _ = s.observe(m, level: 0, now: now)
            if now % 50_000_000 < 20_000_000 { _ = s.tick(now: now) }
        }
        for _ in 0..<10 {
            now += 50_000_000
            _ = s.tick(now: now)
        }
        #expect(!s.isSpeaking(m) && s.speakers.isEmpty && !s.eventDue)
    }

    @Test func shortGapsBetweenWordsKeepTheVoiceCounting() {
        let c = SpeakerClock(members: 1)
        // 120 ms of voice, 60 ms of gap, twice: voice adds up across the gaps.
        c.run(360) { _, t in (t / 20_000_000) % 9 < 6 ? 25 : 127 }
        c.run(120) { _, _ in 25 }
        #expect(c.order == [0])
    }

    @Test func theOrderChangesOnlyForAClearlyLouderSpeaker() {
        let c = SpeakerClock(members: 2)
        c.run(400) { m, _ in m == 0 ? 22 : 127 }
        c.run(600) { m, _ in m == 0 ? 22 : 20 }     // 2 dB louder: not enough to pass
        #expect(c.order == [0, 1])
        c.run(600) { m, _ in m == 0 ? 22 : 10 }     // 12 dB louder: passes
        #expect(c.order == [1, 0])
        #expect(c.events.map(\.owners) == [[0], [0, 1], [1, 0]])
    }

    @Test func eventsAreAtLeastTheIntervalApart() {
        var s = ActiveSpeakers.Settings()
        s.onset = 50_000_000
        s.hangover = 50_000_000
        s.gapTolerance = 50_000_000
        let c = SpeakerClock(s, members: 1)
        // On and off every 100 ms: the list changes every 100 ms or so.
        c.run(3000) { _, t in (t / 100_000_000) % 2 == 0 ? 20 : 127 }
        #expect(c.events.count >= 3)
        for (a, b) in zip(c.events, c.events.dropFirst()) {
            #expect(b.at - a.at >= 300_000_000, "events \(a.at) and \(b.at) are closer than 300 ms")
        }
    }

    @Test func noEventsWithAZeroInterval() {
        var s = ActiveSpeakers.Settings()
        s.eventInterval = 0
        let c = SpeakerClock(s, members: 1)
        c.run(1000) { _, _ in 20 }
        #expect(c.order == [0] && c.events.isEmpty)
    }

    @Test func removingASpeakerChangesTheList() {
        let c = SpeakerClock(members: 2)
        c.run(500) { _, _ in 20 }
        #expect(c.order.count == 2)
        c.speakers.remove(0)
        c.run(400) { _, _ in 20 }
        #expect(c.order == [1])
        #expect(c.events.last?.owners == [1])
        #expect(c.speakers.add(owner: 7) == 0, "the entry is reused")
    }

    @Test func levelIsTheSmoothedAmplitude() {
        let c = SpeakerClock(members: 1)
        c.run(1000) { _, _ in 20 }                  // -20 dBov: amplitude 0.1
        #expect(abs(c.speakers.level(0) - 0.1) < 0.002)
        c.run(2000) { _, _ in 127 }
        #expect(c.speakers.level(0) == 0)
        #expect(abs(ActiveSpeakers.amplitude(0) - 1) < 1e-6 && abs(ActiveSpeakers.amplitude(6) - 0.501) < 0.001)
    }

    // MARK: forwardLoudest

    func loudest(_ n: Int) -> ActiveSpeakers.Settings {
        var s = ActiveSpeakers.Settings()
        s.forwardLoudest = n
        return s
    }

    @Test func aVoicedPacketTakesAFreeSlotAtOnce() {
        let c = SpeakerClock(loudest(2), members: 4)
        c.run(200) { _, _ in 127 }
        #expect(c.forwarded.values.allSatisfy { !$0 }, "silence is not forwarded")
        var first: Bool?
        c.run(20) { m, _ in m == 2 ? 20 : 127 }
        first = c.forwarded[2]
        #expect(first == true, "the first voiced packet is forwarded")
        #expect(c.forwarded[0] == false && c.forwarded[1] == false && c.forwarded[3] == false)
        c.run(500) { m, _ in m == 2 ? 20 : 127 }
        #expect(c.forwarded[2] == true)
    }

    @Test func aFullSetGivesTheSlotOfAMemberThatStoppedTalking() {
        let c = SpeakerClock(loudest(2), members: 3)
        c.run(1000) { m, _ in m < 2 ? 20 : 127 }
        #expect(c.forwarded == [0: true, 1: true, 2: false])
        // Member 1 stops; 220 ms later member 2 starts: its first packet takes member 1's slot.
        c.run(220) { m, _ in m == 0 ? 20 : 127 }
        c.run(20) { m, _ in m == 1 ? 127 : 20 }
        #expect(c.forwarded[2] == true, "the first voiced packet is forwarded")
        #expect(c.speakers.isAudible(0) && !c.speakers.isAudible(1) && c.speakers.isAudible(2))
        #expect(c.speakers.audibleCount == 2)
    }

    @Test func withEveryoneTalkingALouderNewcomerReplacesTheQuietest() {
        let c = SpeakerClock(loudest(2), members: 3)
        c.run(1000) { m, _ in m == 0 ? 20 : (m == 1 ? 30 : 127) }
        #expect(c.forwarded == [0: true, 1: true, 2: false])
        // Member 2 talks 10 dB louder than member 1, who keeps talking: a tick or two later it is in.
        c.run(40) { m, _ in [20, 30, 20][m] }
        #expect(c.forwarded[2] == false, "no free slot, and everyone is talking")
        c.run(200) { m, _ in [20, 30, 20][m] }
        #expect(c.forwarded == [0: true, 1: false, 2: true])
        // A newcomer as quiet as the quietest stays out.
        c.run(1000) { m, _ in [20, 30, 20][m] }
        #expect(c.forwarded == [0: true, 1: false, 2: true])
    }

    @Test func aGapInArrivalIsNotSilenceAndStealsNothing() {
        // 0 and 1 talk, 2 talks as loud from the start. 0's packets stop arriving for 240 ms (a
        // sender's stall or network jitter) and then come again: 2 takes no slot meanwhile, as
        // neither "silent for stealAfter" nor "louder than the quietest" may read a gap as silence.
        let c = SpeakerClock(loudest(2), members: 3)
        c.run(1000) { m, _ in m < 2 ? 20 : 127 }
        c.run(500) { _, _ in 20 }
        #expect(c.forwarded == [0: true, 1: true, 2: false])
        c.run(240) { m, _ in m == 0 ? nil : 20 }
        #expect(c.forwarded[2] == false, "the gap stole 0's slot")
        #expect(c.speakers.isAudible(0) && c.speakers.isAudible(1) && !c.speakers.isAudible(2))
        c.run(500) { _, _ in 20 }
        #expect(c.forwarded == [0: true, 1: true, 2: false])
        #expect(c.speakers.audibleCount == 2)
    }

    @Test func aMemberWhosePacketsStopGivesItsSlotUpAfterTheHangover() {
        let c = SpeakerClock(loudest(1), members: 2)
        c.run(500) { m, _ in m == 0 ? 20 : 127 }
        // 0 stops sending altogether (no silence packets); 1 starts talking.
        c.run(200) { m, _ in m == 0 ? nil : 20 }
        #expect(c.forwarded[1] == false, "not before the hangover")
        c.run(300) { m, _ in m == 0 ? nil : 20 }
        #expect(c.forwarded[1] == true)
        #expect(!c.speakers.isAudible(0))
        c.run(2000) { m, _ in m == 0 ? nil : 20 }
        #expect(c.speakers.level(0) == 0, "the level of a member that stopped decays after the hangover")
    }

    @Test func silenceFreesTheSlotAfterTheHangover() {
        let c = SpeakerClock(loudest(1), members: 2)
        c.run(500) { m, _ in m == 0 ? 20 : 127 }
        c.run(400) { _, _ in 127 }
        #expect(c.speakers.audibleCount == 0)
        #expect(c.forwarded[0] == false)
    }
}
