internal import MinatoTransport
internal import Prometheus
internal import Synchronization

/// Sums of every worker's counters at one scrape.
struct WorkerTotals {
    var received: UInt64 = 0, bytesReceived: UInt64 = 0, forwarded: UInt64 = 0, bytesForwarded: UInt64 = 0
    var rtcpReceived: UInt64 = 0, rtcpSent: UInt64 = 0, nacksReceived: UInt64 = 0, keyFrameRequests: UInt64 = 0
    var timerWakeups: UInt64 = 0, agentTimerWakeups: UInt64 = 0
    var transports = 0, directTransports = 0, directHandBacks: UInt64 = 0, consentChecks: UInt64 = 0
    var drops: [String: UInt64] = [:]
    var nacksSent: UInt64 = 0, retransmitted: UInt64 = 0, recovered: UInt64 = 0, rtxRecovered: UInt64 = 0
    var lookups: [String: UInt64] = [:]
    var keyFrameCauses: [String: UInt64] = [:]
    var transportFeedback: UInt64 = 0, probes: UInt64 = 0, padding: UInt64 = 0
    var dataReceived: UInt64 = 0, dataForwarded: UInt64 = 0, dataBytesForwarded: UInt64 = 0
    var dataDrops: [String: UInt64] = [:]
    var relay = RelayCounters()
    mutating func add(_ c: WorkerCounters) {
        relay.packetsSent &+= c.relay.packetsSent; relay.bytesSent &+= c.relay.bytesSent
        relay.packetsReceived &+= c.relay.packetsReceived; relay.bytesReceived &+= c.relay.bytesReceived
        relay.packetsMissing &+= c.relay.packetsMissing; relay.packetsRetransmitted &+= c.relay.packetsRetransmitted
        dataReceived &+= c.data.messagesReceived; dataForwarded &+= c.data.messagesForwarded
        dataBytesForwarded &+= c.data.bytesForwarded
        for (k, v) in c.data.drops { dataDrops[k, default: 0] &+= v }
        transportFeedback &+= c.transportFeedbackSent; probes &+= c.probesStarted; padding &+= c.paddingPacketsSent
        received &+= c.rtpPacketsReceived; bytesReceived &+= c.rtpBytesReceived
        forwarded &+= c.rtpPacketsForwarded; bytesForwarded &+= c.rtpBytesForwarded
        rtcpReceived &+= c.rtcpPacketsReceived; rtcpSent &+= c.rtcpPacketsSent
        nacksReceived &+= c.nacksReceived; keyFrameRequests &+= c.keyFrameRequestsSent
        timerWakeups &+= c.timerWakeups; agentTimerWakeups &+= c.agentTimerWakeups
        transports += c.transports
        directTransports += c.directTransports
        directHandBacks &+= c.directHandBacks; consentChecks &+= c.consentChecksAnswered
        for (k, v) in c.drops { drops[k, default: 0] &+= v }
        nacksSent &+= c.nacksSent; retransmitted &+= c.packetsRetransmitted
        recovered &+= c.packetsRecovered; rtxRecovered &+= c.rtxRecovered
        for (k, v) in c.retransmissionLookups { lookups[k, default: 0] &+= v }
        for (k, v) in c.keyFrameRequestsByCause { keyFrameCauses[k, default: 0] &+= v }
    }
}

/// The packet-path counters in the Prometheus registry. The workers count on their own
/// threads (no metrics call per packet); each scrape adds what grew since the last one.
/// Every drop reason is exported from the first scrape on (zeros included).
final class PacketMetrics: Sendable {
    let received, bytesReceived, forwarded, bytesForwarded, rtcpReceived, rtcpSent, nacksReceived: Counter
    let keyFrameRequests, timerWakeups, agentTimerWakeups: Counter
    let nacksSent, retransmitted, recovered, rtxRecovered: Counter
    let transportFeedback, probes, padding: Counter
    let transports, directTransports, rooms, members, publications, subscriptions: Gauge
    let registry: PrometheusCollectorRegistry
    private let last = Mutex<WorkerTotals>(WorkerTotals())

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        received = registry.makeCounter(name: "minato_rtp_packets_received_total", help: "RTP packets received from publishers (decrypted).")
        bytesReceived = registry.makeCounter(name: "minato_rtp_bytes_received_total", help: "RTP bytes (clear) received from publishers.")
        forwarded = registry.makeCounter(name: "minato_rtp_packets_forwarded_total",
                                         help: "RTP packets sent to subscribers (counted after the send succeeded).")
        bytesForwarded = registry.makeCounter(name: "minato_rtp_bytes_forwarded_total", help: "RTP bytes (clear) sent to subscribers.")
        rtcpReceived = registry.makeCounter(name: "minato_rtcp_packets_received_total", help: "RTCP compound packets received.")
        rtcpSent = registry.makeCounter(name: "minato_rtcp_packets_sent_total",
                                        help: "RTCP packets sent (receiver reports, translated sender reports, PLI/FIR).")
        nacksReceived = registry.makeCounter(name: "minato_rtcp_nacks_received_total", help: "Generic NACKs received from subscribers.")
        keyFrameRequests = registry.makeCounter(name: "minato_keyframe_requests_total", help: "PLI/FIR sent to publishers.")
        timerWakeups = registry.makeCounter(name: "minato_worker_timer_wakeups_total",
                                            help: "Media worker timer wake-ups (a deadline was due).")
        agentTimerWakeups = registry.makeCounter(name: "minato_worker_agent_timer_wakeups_total",
                                                 help: "Runs of libnice's agent timers on the media workers (20 ms apart while a transport connects, else when one is due).")
        nacksSent = registry.makeCounter(name: "minato_rtcp_nacks_sent_total", help: "Generic NACKs sent to publishers for missing packets.")
        retransmitted = registry.makeCounter(name: "minato_rtp_packets_retransmitted_total",
                                             help: "Packets resent to subscribers on their NACKs (RTX or plain).")
        recovered = registry.makeCounter(name: "minato_rtp_packets_recovered_total",
                                         help: "Packets a publisher's stream was missing that arrived later (retransmitted or late).")
        rtxRecovered = registry.makeCounter(name: "minato_rtx_recovered_total",
                                            help: "Missing packets recovered from a publisher's RTX stream.")
        transportFeedback = registry.makeCounter(name: "minato_rtcp_transport_feedback_sent_total",
                                                 help: "Transport-wide congestion control feedback packets sent to publishers.")
        probes = registry.makeCounter(name: "minato_bandwidth_probes_total",
                                      help: "Bandwidth probes started toward subscribers (to find room for a higher simulcast layer).")
        padding = registry.makeCounter(name: "minato_probe_padding_packets_total", help: "Padding-only RTX packets sent for bandwidth probes.")
        transports = registry.makeGauge(name: "minato_transports", help: "WebRTC transports open.")
        directTransports = registry.makeGauge(name: "minato_transports_direct",
                                              help: "WebRTC transports whose UDP socket the media worker reads itself (one epoll set, recvmmsg) rather than through libnice.")
        rooms = registry.makeGauge(name: "minato_rooms", help: "Rooms open.")
        members = registry.makeGauge(name: "minato_members", help: "Members joined.")
        publications = registry.makeGauge(name: "minato_publications", help: "Publications.")
        subscriptions = registry.makeGauge(name: "minato_subscriptions", help: "Subscriptions.")
    }

    func update(_ now: WorkerTotals, rooms counts: (rooms: Int, members: Int, publications: Int, subscriptions: Int)) {
        last.withLock { last in
            func grow(_ c: Counter, _ new: UInt64, _ old: UInt64) { if new > old { c.increment(by: Int64(clamping: new - old)) } }
            grow(received, now.received, last.received)
            grow(bytesReceived, now.bytesReceived, last.bytesReceived)
            grow(forwarded, now.forwarded, last.forwarded)
            grow(bytesForwarded, now.bytesForwarded, last.bytesForwarded)
            grow(rtcpReceived, now.rtcpReceived, last.rtcpReceived)
            grow(rtcpSent, now.rtcpSent, last.rtcpSent)
            grow(nacksReceived, now.nacksReceived, last.nacksReceived)
            grow(keyFrameRequests, now.keyFrameRequests, last.keyFrameRequests)
            grow(timerWakeups, now.timerWakeups, last.timerWakeups)
            grow(agentTimerWakeups, now.agentTimerWakeups, last.agentTimerWakeups)
            grow(nacksSent, now.nacksSent, last.nacksSent)
            grow(retransmitted, now.retransmitted, last.retransmitted)
            grow(recovered, now.recovered, last.recovered)
            grow(rtxRecovered, now.rtxRecovered, last.rtxRecovered)
            grow(transportFeedback, now.transportFeedback, last.transportFeedback)
            grow(probes, now.probes, last.probes)
            grow(padding, now.padding, last.padding)
            grow(registry.makeCounter(name: "minato_direct_receive_handbacks_total",
                                      help: "Direct-read sockets handed back to libnice because a datagram came from an address other than the selected pair's peer."),
                 now.directHandBacks, last.directHandBacks)
            grow(registry.makeCounter(name: "minato_ice_consent_checks_answered_total",
                                      help: "ICE checks (consent freshness) answered by the media worker on direct-read sockets, without libnice."),
                 now.consentChecks, last.consentChecks)
            for (result, n) in now.lookups {
                let c = registry.makeCounter(name: "minato_retransmission_store_lookups_total", labels: [("result", result)],
                                             help: "Subscriber NACKs looked up in the retransmission store: hit, miss (not held, too old, or never sent to that subscriber), throttled (resent less than an RTT ago; a hit not resent).")
                grow(c, n, last.lookups[result] ?? 0)
            }
            for (cause, n) in now.keyFrameCauses {
                let c = registry.makeCounter(name: "minato_keyframe_requests_by_cause_total", labels: [("cause", cause)],
                                             help: "PLI/FIR sent to publishers, by cause: subscriber, consumer_start, nack_gave_up, retry, control, layer_switch, ice_restart.")
                grow(c, n, last.keyFrameCauses[cause] ?? 0)
            }
            grow(registry.makeCounter(name: "minato_data_messages_received_total", help: "Data channel messages received from publishers."),
                 now.dataReceived, last.dataReceived)
            grow(registry.makeCounter(name: "minato_data_messages_forwarded_total", help: "Data channel messages sent to subscribers."),
                 now.dataForwarded, last.dataForwarded)
            grow(registry.makeCounter(name: "minato_data_bytes_forwarded_total", help: "Data channel message bytes sent to subscribers."),
                 now.dataBytesForwarded, last.dataBytesForwarded)
            for (reason, n) in now.dataDrops {
                let c = registry.makeCounter(name: "minato_data_messages_dropped_total", labels: [("reason", reason)],
                                             help: "Data channel messages not forwarded, by reason (rate_limited, message_too_large, buffer_full: a lossy message a subscriber had no room for, buffer_overflow: a reliable one, which closed the subscription, ...).")
                grow(c, n, last.dataDrops[reason] ?? 0)
            }
            let relayCounters: [(String, String, KeyPath<RelayCounters, UInt64>)] = [
                ("minato_relay_rtp_packets_sent_total", "RTP packets sent to other nodes over relays (both ends of a relay count; clients' traffic excluded).", \.packetsSent),
                ("minato_relay_rtp_bytes_sent_total", "RTP bytes (clear) sent to other nodes over relays.", \.bytesSent),
                ("minato_relay_rtp_packets_received_total", "RTP packets received from other nodes over relays (decrypted).", \.packetsReceived),
                ("minato_relay_rtp_bytes_received_total", "RTP bytes (clear) received from other nodes over relays.", \.bytesReceived),
                ("minato_relay_rtp_packets_missing_total", "Packets found missing (sequence gaps) in streams from other nodes: the relay hops' loss before NACK repair.", \.packetsMissing),
                ("minato_relay_rtp_packets_retransmitted_total", "Packets resent to other nodes over relays on their NACKs.", \.packetsRetransmitted),
            ]
            for (name, help, path) in relayCounters {
                grow(registry.makeCounter(name: name, help: help), now.relay[keyPath: path], last.relay[keyPath: path])
            }
            for (reason, n) in now.drops {
                // Made (at 0) on the first scrape, so every reason is listed.
                let c = registry.makeCounter(name: "minato_packets_dropped_total", labels: [("reason", reason)],
                                             help: "Packets not forwarded, by reason: received datagrams, or outgoing packets the worker could not send.")
                grow(c, n, last.drops[reason] ?? 0)
            }
            last = now
        }
        transports.set(Int64(now.transports))
        directTransports.set(Int64(now.directTransports))
        rooms.set(Int64(counts.rooms))
        members.set(Int64(counts.members))
        publications.set(Int64(counts.publications))
        subscriptions.set(Int64(counts.subscriptions))
    }
}
