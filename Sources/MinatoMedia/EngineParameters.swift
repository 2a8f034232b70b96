public import MinatoWire

/// How a producer is asked for a keyframe (what the publisher negotiated).
public enum KeyFrameRequestMethod: Sendable { case pli, fir, none }

/// What the engine needs to know about a published stream.
public struct ProducerParameters: Sendable {
    public var transport: TransportIndex
    public var kind: MediaKind
    public var ssrc: UInt32
    public var rtxSsrc: UInt32?
    public var payloadType: UInt8
    public var clockRate: UInt32
    public var codec: VideoCodecKind
    public var keyFrameRequest: KeyFrameRequestMethod
    public var paused: Bool
    public init(transport: TransportIndex, kind: MediaKind, ssrc: UInt32, rtxSsrc: UInt32? = nil,
                payloadType: UInt8, clockRate: UInt32, codec: VideoCodecKind,
                keyFrameRequest: KeyFrameRequestMethod, paused: Bool = false) {
        self.transport = transport; self.kind = kind; self.ssrc = ssrc
        self.rtxSsrc = rtxSsrc; self.payloadType = payloadType; self.clockRate = clockRate
        self.codec = codec; self.keyFrameRequest = keyFrameRequest; self.paused = paused
    }
}

/// What the engine needs to know about one subscriber's copy of a stream.
public struct ConsumerParameters: Sendable {
    public var producer: ProducerId
    public var transport: TransportIndex
    public var ssrc: UInt32
    public var payloadType: UInt8
    /// Publisher extension id -> subscriber extension id (0 erases the element).
    public var extensionIds: ExtensionIdMap
    public init(producer: ProducerId, transport: TransportIndex, ssrc: UInt32, payloadType: UInt8, extensionIds: ExtensionIdMap) {
        self.producer = producer; self.transport = transport; self.ssrc = ssrc
        self.payloadType = payloadType; self.extensionIds = extensionIds
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

public struct ProducerStats: Sendable {
    public var packetsReceived: UInt64, bytesReceived: UInt64, keyFrameRequests: UInt64
}
public struct ConsumerStats: Sendable {
    public var packetsSent: UInt64, bytesSent: UInt64
}
