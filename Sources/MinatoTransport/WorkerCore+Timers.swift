internal import CNice
internal import CMinatoShims
internal import MinatoMedia

/// The worker's timers: its own deadline timer, armed after every loop iteration for the soonest
/// of the engine's, the transports' and the data channels' deadlines (docs/architecture.md
/// "Timers are deadlines"), and libnice's agent timers (`WorkerCore.agentTimers`, "libnice's
/// own timers"), run every `agentTimerPeriodMs` while a transport connects and when the
/// soonest is due once all are connected.
extension WorkerCore {
    func startTimer() {
        // Dispatched only by its deadline; the callback says what is due.
        timer = CallbackSource(context: context, callback: { data in
            guard let data else { return 0 }
            Unmanaged<WorkerCore>.fromOpaque(data).takeUnretainedValue().timerFired()
            return 1
        }, owner: Unmanaged.passUnretained(self).toOpaque())
    }

    func stopTimer() {
        timer?.destroy()
        timer = nil
    }

    /// Arms the timer for the soonest deadline (after every loop iteration). O(1) unless a
    /// transport's deadline may have moved.
    func armTimer() {
        if transportDeadlinesStale {
            transportDeadlinesStale = false
            let now = monotonicNow()
            var soonest: Nanoseconds = .max
            var settling = false
            for t in transports.values {
                soonest = min(soonest, t.deadline(now: now))
                if !settling, !t.isSettled { settling = true }
            }
            transportDeadline = soonest
            noteSettling(settling)
        }
        let due = min(engine.nextDeadline ?? .max, transportDeadline, dataTickAt)
        guard due != armedFor, let timer else { return }
        armedFor = due
        // The deadline is CLOCK_MONOTONIC in microseconds (rounded up: never early).
        timer.setDeadline(due == .max ? -1 : Int64(clamping: due / 1000 + (due % 1000 == 0 ? 0 : 1)))
    }

    func timerFired() {
        timerWakeups &+= 1
        armedFor = 0   // the deadline stays in the past until armTimer sets it again
        let now = monotonicNow()
        engine.handleTimeout(now: now)
        if engine.speakerEventsDue {
            for (router, list) in engine.takeSpeakerEvents(now: now) { eventSink.yield(.activeSpeakers(router, list)) }
        }
        if now >= transportDeadline {
            var failed: [(WebRtcTransport, TransportUpdate)] = []
            for t in transports.values {
                let update = t.handleTimeout(now: now)
                if update != .none { failed.append((t, update)) }
            }
            for (t, update) in failed { apply(update, to: t) }
            transportDeadlinesStale = true
        }
        if now >= dataTickAt { dataTick(now: now) }
        flush()
    }

    /// Attaches (`on`) or removes the worker source that iterates `agentTimers`: attached while
    /// the worker has transports, so an idle worker still sleeps.
    func runAgentTimers(_ on: Bool) {
        if on, agentTimerSource == nil {
            agentTimerSource = CallbackSource(context: context, callback: { data in
                guard let data else { return 1 }
                Unmanaged<WorkerCore>.fromOpaque(data).takeUnretainedValue().agentTimersDue()
                return 1
            }, owner: Unmanaged.passUnretained(self).toOpaque())
            transportsSettling = true
            armAgentTimers(inMs: Self.agentTimerPeriodMs)
        } else if !on, let s = agentTimerSource {
            s.destroy()
            agentTimerSource = nil
        }
    }

    func agentTimersDue() {
        agentTimerWakeups &+= 1
        // Whatever is due, without waiting (a few rounds: a timer may make another due).
        var rounds = 0
        while rounds < 4, g_main_context_iteration(agentTimers, 0) != 0 { rounds += 1 }
        if transportsSettling {
            armAgentTimers(inMs: Self.agentTimerPeriodMs)
        } else {
            let next = Int64(minato_main_context_timeout_ms(agentTimers))
            // -1: no timer at all; 0: one became due meanwhile (run it on the next iteration).
            armAgentTimers(inMs: next < 0 ? Self.agentTimerIdleMs : min(next, Self.agentTimerIdleMs))
        }
    }

    func armAgentTimers(inMs ms: Int64) {
        guard let s = agentTimerSource else { return }
        s.setDeadline(Int64(g_get_monotonic_time()) + ms * 1000)
    }

    /// Recomputed with the transport deadlines: a transport that started connecting (or an ICE
    /// restart) brings the agent-timer source back to its short period at once.
    func noteSettling(_ settling: Bool) {
        guard settling != transportsSettling else { return }
        transportsSettling = settling
        if settling { armAgentTimers(inMs: Self.agentTimerPeriodMs) }
    }
}
