/// Index of a transport registered with a `MediaEngine` (one per WebRTC connection): the
/// engine's slot and that slot's generation. Slots are reused after `removeTransport`; the
/// generation is bumped when a slot is freed, so an id kept past its removal never reaches
/// the transport that reuses the slot (the engine treats it as unknown). A plain 8-byte value.
public struct TransportIndex: Hashable, Sendable, Codable, CustomStringConvertible {
    /// Position in the engine's transport table.
    public let slot: UInt32
    /// The slot's generation when this id was handed out.
    public let generation: UInt32
    public init(slot: UInt32, generation: UInt32) { self.slot = slot; self.generation = generation }
    public var description: String { "transport#\(slot).\(generation)" }
}

/// A Router groups the Producers and Consumers of one room; a Consumer may only attach to a
/// Producer of its own Router.
public struct RouterId: Hashable, Sendable {
    public let rawValue: Int32
    public init(_ rawValue: Int32) { self.rawValue = rawValue }
}

/// A Producer of a `MediaEngine`: slot and generation (see `TransportIndex`). A stale id (its
/// producer was removed, the slot possibly reused) is a no-op or `unknownProducer`.
public struct ProducerId: Hashable, Sendable, Codable, CustomStringConvertible {
    public let slot: UInt32
    public let generation: UInt32
    public init(slot: UInt32, generation: UInt32) { self.slot = slot; self.generation = generation }
    public var description: String { "producer#\(slot).\(generation)" }
}

/// A Consumer of a `MediaEngine`: slot and generation (see `TransportIndex`). A stale id is a
/// no-op or `unknownConsumer`.
public struct ConsumerId: Hashable, Sendable, Codable, CustomStringConvertible {
    public let slot: UInt32
    public let generation: UInt32
    public init(slot: UInt32, generation: UInt32) { self.slot = slot; self.generation = generation }
    public var description: String { "consumer#\(slot).\(generation)" }
}

/// Monotonic time in nanoseconds. The engine never reads a clock: callers pass `now`.
public typealias Nanoseconds = UInt64

public enum MediaKind: Sendable, Equatable, Codable { case audio, video }

/// Why a packet was not forwarded, counted per reason (never logged per packet) and exported
/// as `minato_packets_dropped_total{reason=<name>}`. Receive-side reasons count received
/// datagrams (the engine's and the transport's checks); send-side reasons count outgoing
/// packets (one per consumer copy, or one RTCP packet) that the worker could not send.
public enum DropReason: Int, CaseIterable, Sendable {
    // Receive side.
    /// Shorter than an RTP header, or a header that does not parse.
    case malformedRtp
    /// Larger than an outbox slot can hold (`MediaEngine.maxPacketLength` clear bytes), or a
    /// datagram larger than the worker's direct receive buffers (2048 bytes).
    case oversize
    case malformedRtcp
    /// A transport-wide feedback packet that does not validate (`TransportFeedback.init?`), or
    /// claims more packets than the estimator remembers (`SendSideEstimator.historySize`).
    case invalidFeedback
    /// RTCP beyond its transport's budget (`RtcpBudget`: `media.rtcp.maxPacketsPerSec`,
    /// `media.rtcp.maxWorkPerSec`); the rest of that compound packet is not read.
    case rtcpOverBudget
    case unknownSsrc
    /// RTX (RFC 4588) on a producer's RTX SSRC that cannot be used: RTX was not negotiated
    /// with the publisher, or the packet has another payload type.
    case unusableRtx
    /// An RTX packet with no original packet inside (padding a sender uses to probe).
    case rtxPadding
    /// A packet the producer already delivered (a retransmission of one that was only late).
    case duplicate
    /// A RED (RFC 2198) packet whose block headers do not fit its payload, for a consumer
    /// that needs it reduced to its primary block.
    case malformedRed
    case unknownPayloadType
    case producerPaused
    case waitingForKeyFrame
    /// A simulcast layer the consumer does not take now (counted once per consumer).
    case layerNotSelected
    /// A VP8 temporal layer above the one the consumer forwards now (counted once per consumer).
    case temporalLayerNotSelected
    /// Audio of a producer that is not among the room's loudest (`forwardLoudest`), for a
    /// consumer that did not pin it (counted once per consumer).
    case notLoudest
    /// A late (reordered) packet with no number left in the consumer's stream: it arrived after
    /// the numbers around it closed up over dropped packets (counted once per consumer).
    case lateAfterDrop
    case outboxFull
    /// The copy in the outbox did not parse again (cannot happen for a packet that parsed once;
    /// counted rather than assumed).
    case reparseFailed
    /// SRTP or SRTCP arrived before DTLS set up the keys (or after the transport closed).
    case noSrtpSession
    /// `srtp_unprotect` rejected it (authentication, replay, or a malformed SRTP packet).
    case srtpUnprotectFailed
    /// Neither RTP, RTCP nor DTLS (RFC 7983 first byte), STUN libnice did not consume, or STUN
    /// read by the worker itself that did not validate or came from an address other than the
    /// pair's peer (libnice answers the peer's retransmission).
    case unknownPacket
    /// On a plain RTP transport: a datagram from another address than its remote's, or RTP on
    /// an egress one, or neither RTP nor RTCP.
    case plainUnexpected
    // Send side.
    /// Queued for a transport that closed before the flush.
    case transportClosed
    /// `srtp_protect` failed.
    case srtpProtectFailed
    /// The transport has no ICE connection to send on yet.
    case iceNotConnected
    /// The kernel (or libnice) refused the datagram: socket buffer full, network error.
    case sendFailed

    /// The Prometheus label value: stable, snake_case.
    public var name: String {
        switch self {
        case .malformedRtp: return "malformed_rtp"
        case .oversize: return "oversize"
        case .malformedRtcp: return "malformed_rtcp"
        case .invalidFeedback: return "invalid_feedback"
        case .rtcpOverBudget: return "rtcp_over_budget"
        case .unknownSsrc: return "unknown_ssrc"
        case .unusableRtx: return "unusable_rtx"
        case .rtxPadding: return "rtx_padding"
        case .duplicate: return "duplicate"
        case .malformedRed: return "malformed_red"
        case .unknownPayloadType: return "unknown_payload_type"
        case .producerPaused: return "producer_paused"
        case .waitingForKeyFrame: return "waiting_for_key_frame"
        case .layerNotSelected: return "layer_not_selected"
        case .temporalLayerNotSelected: return "temporal_layer_not_selected"
        case .notLoudest: return "not_loudest"
        case .lateAfterDrop: return "late_after_drop"
        case .outboxFull: return "outbox_full"
        case .reparseFailed: return "reparse_failed"
        case .noSrtpSession: return "no_srtp_session"
        case .srtpUnprotectFailed: return "srtp_unprotect_failed"
        case .unknownPacket: return "unknown_packet"
        case .plainUnexpected: return "plain_unexpected"
        case .transportClosed: return "transport_closed"
        case .srtpProtectFailed: return "srtp_protect_failed"
        case .iceNotConnected: return "ice_not_connected"
        case .sendFailed: return "send_failed"
        }
    }
}

public enum MediaError: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownTransport(TransportIndex)
    case unknownProducer(ProducerId)
    case unknownConsumer(ConsumerId)
    case routerMismatch
    case ssrcInUse(UInt32)
    /// Simulcast layers (RIDs) on audio, or without the RID header extension to learn their SSRCs.
    case simulcastUnsupported
    public var description: String {
        switch self {
        case .unknownTransport(let t): return "no such \(t)"
        case .unknownProducer(let p): return "no such \(p)"
        case .unknownConsumer(let c): return "no such \(c)"
        case .routerMismatch: return "a consumer must belong to its producer's router"
        case .ssrcInUse(let s): return "SSRC \(s) is already used by another producer on this transport"
        case .simulcastUnsupported: return "simulcast layers need video and the rtp-stream-id header extension"
        }
    }
}
