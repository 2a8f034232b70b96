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
    /// The payload type of the publisher's RTX stream (RFC 4588, `apt` = `payloadType`) on
    /// `rtxSsrc`; nil when RTX was not negotiated (then packets on `rtxSsrc` are dropped).
    public var rtxPayloadType: UInt8?
    /// Audio: the publisher's RED payload type (RFC 2198, `red/48000` around opus). Packets
    /// with it are forwarded as RED to consumers that negotiated RED and reduced to their
    /// primary (newest) block for the others. nil: RED was not negotiated.
    public var redPayloadType: UInt8?
    /// The publisher negotiated `a=rtcp-fb:<pt> nack`: lost packets are NACKed to it.
    public var nack: Bool
    public init(transport: TransportIndex, kind: MediaKind, ssrc: UInt32, rtxSsrc: UInt32? = nil,
                payloadType: UInt8, clockRate: UInt32, codec: VideoCodecKind,
                keyFrameRequest: KeyFrameRequestMethod, paused: Bool = false,
                rtxPayloadType: UInt8? = nil, redPayloadType: UInt8? = nil, nack: Bool = false) {
        self.transport = transport; self.kind = kind; self.ssrc = ssrc
        self.rtxSsrc = rtxSsrc; self.payloadType = payloadType; self.clockRate = clockRate
        self.codec = codec; self.keyFrameRequest = keyFrameRequest; self.paused = paused
        self.rtxPayloadType = rtxPayloadType; self.redPayloadType = redPayloadType; self.nack = nack
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
    /// The subscriber's RTX stream (RFC 4588): our SSRC for it and its payload type, when the
    /// subscriber accepted RTX. nil: NACKed packets are resent as they were first sent.
    public var rtxSsrc: UInt32?
    public var rtxPayloadType: UInt8?
    /// Audio: the subscriber's RED payload type when it accepted RED; nil: RED packets from the
    /// producer are reduced to their primary block for this subscriber.
    public var redPayloadType: UInt8?
    public init(producer: ProducerId, transport: TransportIndex, ssrc: UInt32, payloadType: UInt8, extensionIds: ExtensionIdMap,
                rtxSsrc: UInt32? = nil, rtxPayloadType: UInt8? = nil, redPayloadType: UInt8? = nil) {
        self.producer = producer; self.transport = transport; self.ssrc = ssrc
        self.payloadType = payloadType; self.extensionIds = extensionIds
        self.rtxSsrc = rtxSsrc; self.rtxPayloadType = rtxPayloadType; self.redPayloadType = redPayloadType
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
