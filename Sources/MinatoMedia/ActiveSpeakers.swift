/// Who is speaking in one room, read from the RFC 6464 audio level its publishers put in each
/// audio packet (`urn:ietf:params:rtp-hdrext:ssrc-audio-level`: 0 is 0 dBov, 127 is -127
/// dBov or silence). No decoding. Sans-IO: the engine calls `observe` for each packet (O(1),
/// or O(members) for a voiced packet that needs a forwarding slot; no allocation) and `tick`
/// every `Settings.tick` from its timer; both take the time, nothing reads a clock.
///
/// Three decisions, each with hysteresis:
/// - **Speaking.** A tick (50 ms) is voiced when at least half of its packets are at or above
///   `activeLevel`. Voice accumulates over voiced ticks (gaps shorter than `gapTolerance` do
///   not reset it); `onset` of it makes a speaker, so a click or a cough shorter than that never
///   becomes one. `hangover` of silence (no voiced tick) ends a speaker.
/// - **Order.** Speakers are listed loudest first by their speech level (smoothed over voiced
///   ticks, a fast attack and a slower release, held through pauses). A new speaker joins at the end; one moves ahead of the one before it only
///   when it is louder by `switchMargin` (3 dB), so two people at about the same level do not
///   swap places every tick. The first is the dominant speaker.
/// - **Forwarding** (`forwardLoudest` N > 0): at most N members are audible (forwarded). A
///   voiced packet from one that is not takes a free slot, or the slot of an audible member that
///   has not voiced for `stealAfter` and was heard silent since, on the spot, so its first
///   syllable goes out (a member whose packets merely stopped arriving keeps its slot until the
///   hangover, so jitter cannot reshuffle the slots). When all N
///   are talking, a louder newcomer replaces the quietest at the next tick if it is louder by
///   `switchMargin`. An audible member silent for `hangover` gives its slot up.
///
/// A change of the speaker list (members or order) is due as an event at once, or when
/// `eventInterval` has passed since the last one (`eventDue`; the caller sends `speakers` and
/// calls `eventSent`). Members are entries, reused after `remove`: indexes stay valid.
public struct ActiveSpeakers: Sendable {
    public struct Settings: Sendable, Equatable {
        /// How often `tick` runs.
        public var tick: Nanoseconds = 50_000_000
        /// A packet whose level byte is at most this (louder than -40 dBov) counts as voice.
        public var activeLevel: UInt8 = 40
        /// Voice needed to become a speaker.
        public var onset: Nanoseconds = 200_000_000
        /// Silence shorter than this between voiced ticks keeps the voice counted so far.
        public var gapTolerance: Nanoseconds = 150_000_000
        /// Silence that ends a speaker, and frees an audible member's forwarding slot.
        public var hangover: Nanoseconds = 300_000_000
        /// An audible member that has not voiced for this long gives its slot to a newcomer's
        /// voiced packet at once.
        public var stealAfter: Nanoseconds = 200_000_000
        /// The level ratio (linear) that moves a speaker ahead of another (1.41: 3 dB).
        public var switchMargin: Float = 1.41
        /// Speaker-list events at most this far apart (0: no events).
        public var eventInterval: Nanoseconds = 300_000_000
        /// Members forwarded (0: all of them, no selection).
        public var forwardLoudest = 0
        public init() {}
    }

    struct Entry: Sendable {
        var active = false
        /// The caller's id for this member (the engine's producer slot).
        var owner: Int32 = -1
        // This tick's packets: all, voiced, and the sum of the voiced ones' level bytes.
        var packets: UInt32 = 0
        var voiced: UInt32 = 0
        var voicedLevelSum: UInt32 = 0
        var voiceTime: Nanoseconds = 0
        var silentTime: Nanoseconds = 0
        var lastVoicedAt: Nanoseconds = 0
        /// The last unvoiced packet: silence heard, not merely packets that have not arrived.
        var lastQuietAt: Nanoseconds = 0
        var speaking = false
        var audible = false
        /// Smoothed level, linear amplitude relative to full scale (0...1), silence included.
        var level: Float = 0
        /// The same over voiced ticks only: how loud the member speaks, held through its pauses
        /// (the speaker list's order and levels; someone who just stopped keeps their place
        /// until the hangover ends them, instead of sinking below the others first).
        var speechLevel: Float = 0
    }

    public let settings: Settings
    var entries = ContiguousArray<Entry>()
    private var freeEntries = ContiguousArray<Int32>()
    /// The speakers, loudest first (entry indexes).
    private(set) var order = ContiguousArray<Int32>()
    private var previousOrder = ContiguousArray<Int32>()
    /// The list the last event carried.
    private var emittedOrder = ContiguousArray<Int32>()
    public private(set) var audibleCount = 0
    private var lastTickAt: Nanoseconds = 0
    private var changed = false
    /// A change waits for `eventInterval` to pass.
    private var pendingEvent = false
    private var lastEventAt: Nanoseconds = 0
    private var eventsSent = 0
    /// A speaker-list event is due now (`speakers`, then `eventSent`).
    public private(set) var eventDue = false

    public init(settings: Settings = Settings()) {
        self.settings = settings
    }

    /// Adds a member (control path; may allocate). Returns its entry index.
    public mutating func add(owner: Int32) -> Int {
        var e = Entry()
        e.active = true
        e.owner = owner
        let index: Int
        if let free = freeEntries.popLast() {
            index = Int(free)
            entries[index] = e
        } else {
            index = entries.count
            entries.append(e)
        }
        // The packet path never grows these.
        order.reserveCapacity(entries.count)
        previousOrder.reserveCapacity(entries.count)
        return index
    }

    /// Removes a member: it leaves the speaker list (an event when it was in it) and its slot.
    public mutating func remove(_ i: Int) {
        guard i >= 0, i < entries.count, entries[i].active else { return }
        if entries[i].audible { audibleCount -= 1 }
        let raw = Int32(truncatingIfNeeded: i)
        if order.contains(raw) {
            order.removeAll { $0 == raw }
            changed = true
        }
        entries[i] = Entry()
        freeEntries.append(raw)
    }

    /// True when no member is left.
    public var isEmpty: Bool { entries.count == freeEntries.count }

    /// One audio packet of member `i` with level byte `level` (0...127, -dBov). Returns whether
    /// the packet is forwarded (always, without `forwardLoudest`). Allocation-free.
    @inline(__always)
    public mutating func observe(_ i: Int, level: UInt8, now: Nanoseconds) -> Bool {
        entries[i].packets &+= 1
        guard level <= settings.activeLevel else {
            entries[i].lastQuietAt = now
            return settings.forwardLoudest == 0 || entries[i].audible
        }
        entries[i].voiced &+= 1
        entries[i].voicedLevelSum &+= UInt32(level)
        entries[i].lastVoicedAt = now
        guard settings.forwardLoudest > 0 else { return true }
        if entries[i].audible { return true }
        return admit(i, now: now)
    }

    /// Whether member `i` is forwarded now (a packet without a level keeps its state).
    @inline(__always)
    public func isAudible(_ i: Int) -> Bool { settings.forwardLoudest == 0 || entries[i].audible }

    /// A voiced packet of `i`, which is not audible: a free slot, else the slot of the audible
    /// member that voiced longest ago if that was `stealAfter` or more ago and silence was heard
    /// from it since. Packets that have not arrived are not silence: after a gap in arrival
    /// (network jitter, a sender's stall) the burst that follows must not reshuffle the slots by
    /// whose packets happen to come first; such a member's slot frees after `hangover`.
    private mutating func admit(_ i: Int, now: Nanoseconds) -> Bool {
        if audibleCount < settings.forwardLoudest {
            entries[i].audible = true
            audibleCount += 1
            return true
        }
        var quietest = -1
        var k = 0
        while k < entries.count {
            if entries[k].active, entries[k].audible, now &- entries[k].lastVoicedAt >= settings.stealAfter,
               entries[k].lastQuietAt > entries[k].lastVoicedAt,
               quietest < 0 || entries[k].lastVoicedAt < entries[quietest].lastVoicedAt {
                quietest = k
            }
            k += 1
        }
        guard quietest >= 0 else { return false }
        entries[quietest].audible = false
        entries[i].audible = true
        return true
    }

    /// Updates every member from the packets since the last tick. Returns whether the room still
    /// needs ticks (packets arrived, or someone speaks, is audible, or an event waits).
    public mutating func tick(now: Nanoseconds) -> Bool {
        // A late timer counts its real time; the first tick after a quiet spell (the room stopped
        // ticking) counts one tick, so voice cannot seem to have lasted through the gap.
        let gap = now &- lastTickAt
        let elapsed = lastTickAt == 0 || gap > 4 &* settings.tick ? settings.tick : gap
        lastTickAt = now
        var busy = false
        var k = 0
        while k < entries.count {
            if entries[k].active { busy = update(k, elapsed: elapsed) || busy }
            k += 1
        }
        if settings.forwardLoudest > 0 { rebalance() }
        reorder()
        if changed {
            changed = false
            pendingEvent = settings.eventInterval > 0
        }
        if pendingEvent, eventsSent == 0 || now &- lastEventAt >= settings.eventInterval {
            pendingEvent = false
            // Back to what the last event said (a change and its undoing within the interval): nothing to say.
            eventDue = eventsSent == 0 || order != emittedOrder
        }
        return busy || !order.isEmpty || audibleCount > 0 || pendingEvent || eventDue
    }

    private mutating func update(_ k: Int, elapsed: Nanoseconds) -> Bool {
        var e = entries[k]
        let heard = e.packets > 0
        let voicedTick = heard && e.voiced &* 2 >= e.packets
        if voicedTick {
            e.voiceTime &+= elapsed
            e.silentTime = 0
        } else {
            e.silentTime &+= elapsed
            if e.silentTime >= settings.gapTolerance { e.voiceTime = 0 }
        }
        if !e.speaking, e.voiceTime >= settings.onset { e.speaking = true }
        if e.speaking, e.silentTime >= settings.hangover { e.speaking = false }
        if e.audible, e.silentTime >= settings.hangover {
            e.audible = false
            audibleCount -= 1
        }
        // This tick's level: the voiced packets' mean amplitude, times the share of voiced packets.
        var instant: Float = 0
        if e.voiced > 0 {
            let mean = Int(e.voicedLevelSum / e.voiced)
            instant = Self.amplitude(mean) * Float(e.voiced) / Float(e.packets)
        }
        // Fast attack, slower release (per tick). A tick without packets holds the level (a gap
        // in arrival is not silence: the louder-newcomer switch compares these levels) until
        // the member has been silent for the hangover.
        if heard || e.silentTime >= settings.hangover {
            e.level += (instant - e.level) * (instant > e.level ? 0.5 : 0.25)
            if e.level < 0.0005 { e.level = 0 }
        }
        if voicedTick {
            e.speechLevel += (instant - e.speechLevel) * (e.speechLevel == 0 ? 1 : (instant > e.speechLevel ? 0.5 : 0.25))
        } else if !e.speaking, e.voiceTime == 0 {
            e.speechLevel = 0
        }
        e.packets = 0
        e.voiced = 0
        e.voicedLevelSum = 0
        entries[k] = e
        return heard
    }

    /// All N audible and talking: a louder voiced newcomer takes the quietest one's slot.
    private mutating func rebalance() {
        var k = 0
        while k < entries.count {
            let e = entries[k]
            k += 1
            guard e.active, !e.audible, e.voiceTime > 0, e.silentTime == 0 else { continue }
            if audibleCount < settings.forwardLoudest {
                entries[k - 1].audible = true
                audibleCount += 1
                continue
            }
            var weakest = -1
            var j = 0
            while j < entries.count {
                if entries[j].active, entries[j].audible, weakest < 0 || entries[j].level < entries[weakest].level { weakest = j }
                j += 1
            }
            guard weakest >= 0, e.level > entries[weakest].level * settings.switchMargin else { continue }
            entries[weakest].audible = false
            entries[k - 1].audible = true
        }
    }

    /// The speaker list: the previous order without those who stopped, new speakers after them,
    /// then a speaker moves ahead of the one before it only when louder by `switchMargin`.
    private mutating func reorder() {
        previousOrder.removeAll(keepingCapacity: true)
        previousOrder.append(contentsOf: order)
        order.removeAll(keepingCapacity: true)
        for raw in previousOrder where entries[Int(raw)].active && entries[Int(raw)].speaking { order.append(raw) }
        var k = 0
        while k < entries.count {
            if entries[k].active, entries[k].speaking, !order.contains(Int32(truncatingIfNeeded: k)) {
                order.append(Int32(truncatingIfNeeded: k))
            }
            k += 1
        }
        var swapped = true
        var passes = 0
        while swapped, passes < order.count {
            swapped = false
            passes += 1
            var i = 1
            while i < order.count {
                if entries[Int(order[i])].speechLevel > entries[Int(order[i - 1])].speechLevel * settings.switchMargin {
                    order.swapAt(i, i - 1)
                    swapped = true
                }
                i += 1
            }
        }
        if order != previousOrder { changed = true }
    }

    /// The speakers, loudest first: (owner, speech level 0...1: smoothed over their voiced ticks).
    public var speakers: [(owner: Int32, level: Float)] {
        order.map { (entries[Int($0)].owner, entries[Int($0)].speechLevel) }
    }

    /// The smoothed level of member `i` (0...1 of full scale; 0 when silent).
    public func level(_ i: Int) -> Float { i >= 0 && i < entries.count ? entries[i].level : 0 }

    /// Whether member `i` is a speaker now.
    public func isSpeaking(_ i: Int) -> Bool { i >= 0 && i < entries.count && entries[i].speaking }

    /// The due event went out at `now`.
    public mutating func eventSent(now: Nanoseconds) {
        eventDue = false
        emittedOrder = order
        lastEventAt = now
        eventsSent += 1
    }

    /// 10^(-level/20): the linear amplitude of an RFC 6464 level byte.
    static func amplitude(_ level: Int) -> Float {
        let l = max(0, min(127, level))
        var a: Float = 1
        var n = l / 10
        while n > 0 { a *= 0.316_227_77; n -= 1 }       // -10 dB steps
        var m = l % 10
        while m > 0 { a *= 0.891_250_94; m -= 1 }       // -1 dB steps
        return a
    }
}
