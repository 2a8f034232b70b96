/// Counters a worker reports (read through `perform`).
public struct WorkerCounters: Sendable {
    /// RTP packets received and decrypted (before the engine's checks), and their clear bytes.
    public var rtpPacketsReceived: UInt64
    public var rtpBytesReceived: UInt64
    /// RTP packets (and clear bytes) sent to subscribers: counted after a successful send.
    public var rtpPacketsForwarded: UInt64
    public var rtpBytesForwarded: UInt64
    public var rtcpPacketsReceived: UInt64
    /// RTCP the worker sent (receiver reports, translated sender reports, PLI/FIR).
    public var rtcpPacketsSent: UInt64
    public var nacksReceived: UInt64
    public var keyFrameRequestsSent: UInt64
    /// Timer wake-ups (deadlines reached); 0 on an idle worker.
    public var timerWakeups: UInt64
    /// Every `DropReason` by its `name`, zeros included.
    public var drops: [String: UInt64]
    public var transports: Int
    /// Transports whose socket the worker reads itself (`DirectReceiver`) now; sockets handed
    /// back to libnice because a datagram came from another address; ICE consent checks the
    /// worker answered without libnice.
    public var directTransports = 0
    public var directHandBacks: UInt64 = 0
    public var consentChecksAnswered: UInt64 = 0
    /// Runs of libnice's agent timers (`WorkerCore.agentTimers`): every 20 ms while a transport
    /// connects, then only when an agent's timer is due (at most 1 s apart).
    public var agentTimerWakeups: UInt64 = 0
    /// Loss recovery (MediaEngine): NACKs sent to publishers, packets resent to subscribers,
    /// retransmission store lookups by result ("hit", "miss", "throttled"), missing packets
    /// that arrived later (and of those, by publisher RTX), keyframe requests by `KeyFrameCause.name`.
    public var nacksSent: UInt64 = 0
    public var packetsRetransmitted: UInt64 = 0
    public var retransmissionLookups: [String: UInt64] = [:]
    public var packetsRecovered: UInt64 = 0
    public var rtxRecovered: UInt64 = 0
    public var keyFrameRequestsByCause: [String: UInt64] = [:]
    /// Congestion control: transport-wide feedback packets sent to publishers, bandwidth
    /// probes started toward subscribers and their padding packets.
    public var transportFeedbackSent: UInt64 = 0
    public var probesStarted: UInt64 = 0
    public var paddingPacketsSent: UInt64 = 0
    /// Data channels (WorkerCore+Data.swift).
    public var data = DataCounters()
    /// RTP that crossed relays between nodes.
    public var relay = RelayCounters()
}
