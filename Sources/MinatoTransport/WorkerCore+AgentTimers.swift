internal import CNice
internal import CMinatoShims

/// libnice's agent timers (`WorkerCore.agentTimers`, docs/architecture.md "libnice's own
/// timers"): one worker source runs them every `agentTimerPeriodMs` while a transport connects,
/// and when the soonest is due once all are connected.
extension WorkerCore {
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
