public import MinatoWire

/// How a producer is asked for a keyframe (what the publisher negotiated).
public enum KeyFrameRequestMethod: Sendable, Codable { case pli, fir, none }

/// What the engine needs to know about a published stream.
public struct ProducerParameters: Sendable, Codable {
    public var transport: TransportIndex
    public var kind: MediaKind
    public var ssrc: UInt32
    public var rtxSsrc: UInt32?
    public var payloadType: UInt8
    public var clockRate: UInt32
    public var codec: VideoCodecKind
    public var keyFrameRequest: KeyFrameRequestMethod
    public var paused: Bool
    /// The payload type of the publisher's RTX stream (RFC 4588, `apt` = `payloadType`) on
    /// `rtxSsrc`; nil when RTX was not negotiated (then packets on `rtxSsrc` are dropped).
    public var rtxPayloadType: UInt8?
    /// Audio: the publisher's RED payload type (RFC 2198, `red/48000` around opus). Packets
    /// with it are forwarded as RED to consumers that negotiated RED and reduced to their
    /// primary (newest) block for the others. nil: RED was not negotiated.
    public var redPayloadType: UInt8?
    /// The publisher negotiated `a=rtcp-fb:<pt> nack`: lost packets are NACKed to it.
    public var nack: Bool
    /// Video simulcast (RFC 8853): the layers' RIDs, lowest first. When set, `ssrc` and
    /// `rtxSsrc` are ignored: each layer's SSRC (and RTX SSRC) is learned from the first
    /// packet carrying its RID in the `ridExtensionId` (`repairedRidExtensionId`) header
    /// extension. Each layer is received like a stream of its own (statistics, NACKs,
    /// keyframe requests); consumers take one layer at a time. Empty: one stream.
    public var rids: [String]
    /// The publisher's header extension ids of `rtp-stream-id` and `repaired-rtp-stream-id`
    /// (RFC 8852); 0: not negotiated.
    public var ridExtensionId: UInt8
    public var repairedRidExtensionId: UInt8
    /// Simulcast with SSRCs known in advance (a relay between nodes, whose sending side chose
    /// them): layer i is bound to `layerSsrcs[i]` (and `layerRtxSsrcs[i]`, when given) at once
    /// instead of by RID. Either empty or one per RID.
    public var layerSsrcs: [UInt32] = []
    public var layerRtxSsrcs: [UInt32] = []
    /// The publisher's header extension id of the transport-wide sequence number; nonzero:
    /// the engine sends it transport-wide feedback for its transport (every stream on it).
    public var transportSequenceExtensionId: UInt8 = 0
    /// Audio: the publisher's header extension id of the RFC 6464 audio level
    /// (`ssrc-audio-level`); nonzero: the engine reads each packet's level for the room's
    /// active speakers (`ActiveSpeakers`) and, with `forwardLoudest`, to choose what is forwarded.
    public var audioLevelExtensionId: UInt8 = 0
    public init(transport: TransportIndex, kind: MediaKind, ssrc: UInt32, rtxSsrc: UInt32? = nil,
                payloadType: UInt8, clockRate: UInt32, codec: VideoCodecKind,
                keyFrameRequest: KeyFrameRequestMethod, paused: Bool = false,
                rtxPayloadType: UInt8? = nil, redPayloadType: UInt8? = nil, nack: Bool = false,
                rids: [String] = [], ridExtensionId: UInt8 = 0, repairedRidExtensionId: UInt8 = 0) {
        self.transport = transport; self.kind = kind; self.ssrc = ssrc
        self.rtxSsrc = rtxSsrc; self.payloadType = payloadType; self.clockRate = clockRate
        self.codec = codec; self.keyFrameRequest = keyFrameRequest; self.paused = paused
        self.rtxPayloadType = rtxPayloadType; self.redPayloadType = redPayloadType; self.nack = nack
        self.rids = rids; self.ridExtensionId = ridExtensionId; self.repairedRidExtensionId = repairedRidExtensionId
    }
}

/// What the engine needs to know about one subscriber's copy of a stream.
public struct ConsumerParameters: Sendable, Codable {
    public var producer: ProducerId
    public var transport: TransportIndex
    public var ssrc: UInt32
    public var payloadType: UInt8
    /// Publisher extension id -> subscriber extension id (0 erases the element).
    public var extensionIds: ExtensionIdMap
    /// The subscriber's RTX stream (RFC 4588): our SSRC for it and its payload type, when the
    /// subscriber accepted RTX. nil: NACKed packets are resent as they were first sent.
    public var rtxSsrc: UInt32?
    public var rtxPayloadType: UInt8?
    /// Audio: the subscriber's RED payload type when it accepted RED; nil: RED packets from the
    /// producer are reduced to their primary block for this subscriber.
    public var redPayloadType: UInt8?
    /// Simulcast: the highest layer to take (0 = lowest; nil: no cap), as `setPreferredLayer`.
    public var preferredLayer: Int?
    /// The subscriber's header extension id of the transport-wide sequence number (after the
    /// `extensionIds` remap); nonzero: every packet sent on the transport that carries the
    /// element gets the transport's next number there (for the subscriber's feedback).
    public var transportSequenceExtensionId: UInt8 = 0
    /// Audio: forwarded whether or not its producer is among the room's loudest
    /// (`EngineTuning.speakers.forwardLoudest`); the subscriber pinned it.
    public var pinned = false
    public init(producer: ProducerId, transport: TransportIndex, ssrc: UInt32, payloadType: UInt8, extensionIds: ExtensionIdMap,
                rtxSsrc: UInt32? = nil, rtxPayloadType: UInt8? = nil, redPayloadType: UInt8? = nil, preferredLayer: Int? = nil) {
        self.producer = producer; self.transport = transport; self.ssrc = ssrc
        self.payloadType = payloadType; self.extensionIds = extensionIds
        self.rtxSsrc = rtxSsrc; self.rtxPayloadType = rtxPayloadType; self.redPayloadType = redPayloadType
        self.preferredLayer = preferredLayer
    }
}

/// A packet the engine wants sent: the clear RTP/RTCP bytes sit in the engine's outbox slot,
/// which has `SrtpTrailerRoom` spare bytes after `length` so the caller can protect in place.
public struct Transmit {
    public let transport: TransportIndex
    public let isRtcp: Bool
    public let bytes: UnsafeMutableRawPointer
    public let length: Int
}

public struct ProducerStats: Sendable, Codable {
    public var packetsReceived: UInt64, bytesReceived: UInt64, keyFrameRequests: UInt64
    /// Generic NACK packets sent to the publisher, and missing packets that arrived later.
    public var nacksSent: UInt64 = 0, packetsRecovered: UInt64 = 0
    /// Packets never received (RFC 3550 cumulative loss: expected minus received).
    public var packetsLost: Int64 = 0
    /// Interarrival jitter in timestamp units.
    public var jitter: UInt32 = 0
    /// Simulcast: per layer (lowest first), whether its SSRC is known yet and the packets
    /// received on it; the fields above sum over the layers (jitter: the highest's).
    public var layers: [LayerStats] = []
    /// Audio with the audio-level extension: the smoothed level (linear amplitude, 0...1 of
    /// full scale), whether it is a speaker now, and whether it is forwarded under
    /// `forwardLoudest`. nil without levels.
    public var audioLevel: Float?
    public var speaking = false
    public var audible = true
}

/// One simulcast layer of a producer (`ProducerStats.layers`).
public struct LayerStats: Sendable, Equatable, Codable {
    public var rid: String
    public var ssrc: UInt32?
    public var packetsReceived: UInt64
    public var bytesReceived: UInt64
    /// VP8: how many temporal layers (TIDs) the layer carried over the last second (0: no
    /// temporal index), and each one's bitrate then (bits per second, TID 0 first).
    public var temporalLayers: Int = 0
    public var temporalBitrates: [Int] = []
}
public struct ConsumerStats: Sendable, Codable {
    public var packetsSent: UInt64, bytesSent: UInt64
    /// NACK packets received from the subscriber and packets resent to it.
    public var nacksReceived: UInt64 = 0, packetsRetransmitted: UInt64 = 0
    /// From the subscriber's last receiver report (zero before one arrived).
    public var fractionLost: UInt8 = 0, packetsLost: Int32 = 0, jitter: UInt32 = 0
    /// Round-trip time of the subscriber's transport (from its receiver reports); nil unknown.
    public var roundTripTime: Nanoseconds?
    /// The subscriber transport's bandwidth estimate (bits per second) once its receiver sent
    /// transport-wide feedback; nil before (then layers are not limited by bandwidth).
    public var estimate: Int?
    /// Simulcast: the highest layer the estimate allows this consumer now (nil: no limit).
    public var bandwidthLayer: Int?
    /// Simulcast: the layer forwarded now (nil before the first keyframe) and the one the
    /// consumer is switching to or stays on (indexes into the producer's layers, lowest 0);
    /// both nil for a producer without layers.
    public var layer: Int?
    public var targetLayer: Int?
    /// Simulcast: layer switches made.
    public var layerSwitches: UInt64 = 0
    /// VP8 simulcast with temporal layers: the highest TID forwarded now and the one chosen
    /// (nil: all of them), and temporal switches made.
    public var temporalLayer: Int?
    public var targetTemporalLayer: Int?
    public var temporalLayerSwitches: UInt64 = 0
}

/// Why a keyframe was requested from a publisher (counted per cause).
public enum KeyFrameCause: Int, CaseIterable, Sendable {
    /// A subscriber sent PLI or FIR.
    case subscriber
    /// A consumer started, resumed or restarted and waits for a keyframe.
    case consumerStart
    /// Missing packets were given up (too old, NACKed too often, or too many at once).
    case nackGaveUp
    /// An earlier request brought no keyframe in time.
    case retry
    /// The control plane asked (admin API, room layer).
    case control
    /// A simulcast consumer switches to this layer and waits for its keyframe.
    case layerSwitch
    /// A subscriber's transport finished an ICE restart (its path may have been down).
    case iceRestart

    /// The Prometheus label value.
    public var name: String {
        switch self {
        case .subscriber: return "subscriber"
        case .consumerStart: return "consumer_start"
        case .nackGaveUp: return "nack_gave_up"
        case .retry: return "retry"
        case .control: return "control"
        case .layerSwitch: return "layer_switch"
        case .iceRestart: return "ice_restart"
        }
    }
}

/// The engine's loss-recovery settings (config `media.*`, docs/architecture.md "Loss recovery").
public struct EngineTuning: Sendable, Equatable {
    /// Packets held per video producer for answering NACKs (rounded up to a power of two;
    /// each takes 1.5 KiB, preallocated when the producer is added).
    public var retransmissionPackets: Int = 512
    /// How long a stored packet can be resent (2 s: aiortc's receiver repeats a NACK only when a
    /// new gap appears, up to about 2 s after the loss).
    public var retransmissionMaxAge: Nanoseconds = 2_000_000_000
    /// How long a missing packet from a publisher is NACKed before it is given up.
    public var nackMaxAge: Nanoseconds = 1_000_000_000
    /// How many times one missing packet is NACKed at most.
    public var nackMaxRetries: UInt8 = 10
    /// The round-trip time assumed where none was measured (a publisher's transport).
    public var defaultRoundTripTime: Nanoseconds = 40_000_000
    /// A keyframe request that brought no keyframe is sent again after this long.
    public var keyFrameRetryInterval: Nanoseconds = KeyFrameRequester.defaultRetryInterval
    /// A subscriber transport's bandwidth estimate (bits per second) before its first
    /// feedback, and the range it stays in (config `media.bandwidth.*`).
    public var initialSubscriberBitrate = 2_000_000
    public var minSubscriberBitrate = 50_000
    public var maxSubscriberBitrate = 20_000_000
    /// RTCP one transport's peer may send (config `media.rtcp.*`): compound packets per second,
    /// and work units per second (a unit: one RTCP packet of a compound, or one item in it that
    /// the engine looks at — report block, FIR entry, NACK pair, transport-wide packet status).
    /// Beyond either, RTCP is dropped and counted (`DropReason.rtcpOverBudget`).
    public var rtcpPacketsPerSecond = 1000
    public var rtcpWorkPerSecond = 20_000
    /// Active speakers and forward-loudest-N (config `rooms.speakerEventIntervalMs`,
    /// `rooms.audio.forwardLoudest`; docs/architecture.md "Active speakers").
    public var speakers = ActiveSpeakers.Settings()

    public init() {}
}
