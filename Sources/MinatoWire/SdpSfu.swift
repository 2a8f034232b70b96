// The two descriptions an SFU writes: its answer to a sender's offer, and its offer to a
// receiver. Built from `RtpMediaSection` values; the server's `SdpNegotiation` calls these
// and serializes the result. Control path; plain Sendable values.

/// RTP header extensions (RFC 8285) Minato forwards, with the ids it uses in its own offers.
public enum RtpHeaderExtension: CaseIterable, Sendable, Equatable {
    case audioLevel, absSendTime, videoOrientation, timeOffset, mid

    public var uri: String {
        switch self {
        case .audioLevel: return "urn:ietf:params:rtp-hdrext:ssrc-audio-level"
        case .absSendTime: return "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
        case .videoOrientation: return "urn:3gpp:video-orientation"
        case .timeOffset: return "urn:ietf:params:rtp-hdrext:toffset"
        case .mid: return "urn:ietf:params:rtp-hdrext:sdes:mid"
        }
    }

    public init?(uri: String) {
        guard let e = Self.allCases.first(where: { $0.uri == uri }) else { return nil }
        self = e
    }

    /// The id in Minato's offers to receivers; nil = not forwarded (the MID belongs to each
    /// connection).
    public var receiverId: UInt8? {
        switch self {
        case .audioLevel: return 1
        case .absSendTime: return 2
        case .videoOrientation: return 3
        case .timeOffset: return 4
        case .mid: return nil
        }
    }

    /// Whether the extension is meaningful in an m-section of `kind`.
    public func applies(to kind: String) -> Bool {
        switch self {
        case .audioLevel: return kind == "audio"
        case .videoOrientation, .timeOffset: return kind == "video"
        case .absSendTime, .mid: return true
        }
    }
}

/// What a selective forwarding unit writes: ICE-lite (when its agent is), BUNDLE, rtcp-mux,
/// one codec per m-section, its own candidates in the first m-section.
public enum SfuSdp {
    /// The `o=` username and `s=` value of every description the SFU writes.
    public static let username = "minato"

    /// The `a=rtcp-fb` values the SFU writes for `codec`: "nack pli" and "ccm fir" for video
    /// (it answers both with a key frame request to the sender), none for audio.
    public static func feedback(for codec: ForwardedCodec) -> [String] {
        codec.kind == "video" ? ["nack pli", "ccm fir"] : []
    }

    /// The codec the SFU takes from a sender's m-section: the first the codec map can forward,
    /// in the sender's preference order (`MediaDescription.forwardableCodecs`).
    public static func chosenCodec(_ m: MediaDescription) -> ForwardableCodec? { m.forwardableCodecs.first }

    /// The answer to a sender's offer. Every audio/video m-section with a port and a
    /// forwardable codec is accepted with that one codec, `recvonly` if the sender sends
    /// (`inactive` otherwise), the offered header extensions Minato knows for its kind (with
    /// the sender's ids) and the codec's SFU feedback; every other m-section is rejected
    /// (`MediaDescription.rejecting`). `a=setup` answers the offer's (see `SdpTransport` for
    /// where it is read); candidates go into the first accepted m-section.
    public static func answer(toSenderOffer offer: SessionDescription, local: SdpLocalTransport, sessionId: UInt64,
                              version: Int) throws(SdpNegotiationError) -> SessionDescription {
        let setup = (offer.transportAttribute(named: "setup").flatMap(DtlsSetup.init(rawValue:)) ?? .actpass).answer
        var media: [MediaDescription] = []
        var bundle: [String] = []
        for m in offer.media {
            if let mid = m.mid, !isValidMid(mid) { throw .missingMid }
            let codec = (m.kind == "audio" || m.kind == "video") && m.port != 0 ? chosenCodec(m) : nil
            guard let codec else {
                // Data channels, codecs Minato does not forward, m-sections the offerer rejected.
                media.append(.rejecting(m))
                continue
            }
            guard let mid = m.mid else { throw .missingMid }
            let extensions = m.extMaps.compactMap { e -> ExtMap? in
                guard RtpHeaderExtension(uri: e.uri)?.applies(to: m.kind) == true else { return nil }
                return ExtMap(id: e.id, uri: e.uri)
            }
            let sending = m.direction == .sendonly || m.direction == .sendrecv
            media.append(RtpMediaSection(
                kind: m.kind, mid: mid, transport: local, setup: setup, extensions: extensions,
                direction: sending ? .recvonly : .inactive, codec: codec, feedback: feedback(for: codec.codec),
                includesCandidates: bundle.isEmpty).media)
            bundle.append(mid)
        }
        return SessionDescription(username: username, sessionName: username, sessionId: sessionId, version: version,
                                  bundle: bundle, iceLite: local.iceLite, media: media)
    }

    /// One m-section of the SFU's offer to a receiver.
    public struct ReceiverStream: Sendable, Equatable {
        public var mid: String
        /// "audio" or "video".
        public var kind: String
        public var codec: ForwardableCodec
        /// false: the m-section is kept (mids are never reused) but `inactive`, without msid or ssrc.
        public var active: Bool
        public var ssrc: UInt32
        public var streamId: String
        public var trackId: String
        public var cname: String

        public init(mid: String, kind: String, codec: ForwardableCodec, active: Bool, ssrc: UInt32, streamId: String,
                    trackId: String, cname: String) {
            self.mid = mid
            self.kind = kind
            self.codec = codec
            self.active = active
            self.ssrc = ssrc
            self.streamId = streamId
            self.trackId = trackId
            self.cname = cname
        }
    }

    /// The offer to a receiver: every stream BUNDLEd in order, `a=setup:actpass`, `sendonly`
    /// with `a=msid` and `a=ssrc` cname/msid lines for an active stream (`inactive` without
    /// them otherwise), Minato's header extension ids for the kind, rtcp-rsize, the codec with
    /// its SFU feedback; candidates in the first m-section.
    public static func receiveOffer(streams: [ReceiverStream], local: SdpLocalTransport, sessionId: UInt64,
                                    version: Int) -> SessionDescription {
        var media: [MediaDescription] = []
        for (i, s) in streams.enumerated() {
            let extensions = RtpHeaderExtension.allCases.compactMap { e -> ExtMap? in
                guard e.applies(to: s.kind), let id = e.receiverId else { return nil }
                return ExtMap(id: id, uri: e.uri)
            }
            let msid = s.streamId + " " + s.trackId
            media.append(RtpMediaSection(
                kind: s.kind, mid: s.mid, transport: local, setup: .actpass, extensions: extensions,
                direction: s.active ? .sendonly : .inactive, msid: s.active ? msid : nil, reducedSizeRtcp: true,
                codec: s.codec, feedback: feedback(for: s.codec.codec),
                ssrcs: s.active ? [SsrcLine(ssrc: s.ssrc, attribute: "cname", value: s.cname),
                                   SsrcLine(ssrc: s.ssrc, attribute: "msid", value: msid)] : [],
                includesCandidates: i == 0).media)
        }
        return SessionDescription(username: username, sessionName: username, sessionId: sessionId, version: version,
                                  bundle: streams.map(\.mid), iceLite: local.iceLite, media: media)
    }
}
