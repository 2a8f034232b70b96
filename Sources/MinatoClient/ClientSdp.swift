public import MinatoWire
public import MinatoTransport

/// A codec a client sends, as it appears in its SDP. The presets and every codec the offer
/// writes come from the codec map (`ForwardedCodec`): name, kind and clock rate are the map's.
public struct RtpCodec: Sendable, Equatable {
    public var mimeType: String        // "video/VP8", "audio/opus"
    public var payloadType: UInt8
    public var clockRate: Int
    public var channels: Int?
    /// `key=value;...` parameters; written rebuilt from safe tokens (`FmtpParameters`).
    public var fmtp: String?

    public init(mimeType: String, payloadType: UInt8, clockRate: Int, channels: Int? = nil, fmtp: String? = nil) {
        self.mimeType = mimeType; self.payloadType = payloadType; self.clockRate = clockRate
        self.channels = channels; self.fmtp = fmtp
    }

    /// A codec of the codec map, with its MIME type and clock rate.
    public init(_ codec: ForwardedCodec, payloadType: UInt8, channels: Int? = nil, fmtp: String? = nil) {
        self.init(mimeType: codec.mimeType, payloadType: payloadType, clockRate: Int(codec.clockRate),
                  channels: channels, fmtp: fmtp)
    }

    public static let vp8 = RtpCodec(.vp8, payloadType: 96)
    public static let opus = RtpCodec(.opus, payloadType: 111, channels: 2, fmtp: "minptime=10;useinbandfec=1")

    /// The codec map's entry for `mimeType`, or nil when Minato does not forward it.
    public var forwardedCodec: ForwardedCodec? { ForwardedCodec(mimeType: mimeType) }

    public var kind: ContentType {
        if let kind = forwardedCodec?.kind { return kind == "audio" ? .audio : .video }
        return mimeType.lowercased().hasPrefix("audio/") ? .audio : .video
    }

    /// The codec as the offer writes it (nil for a MIME type outside the codec map).
    var forwardable: ForwardableCodec? {
        guard let codec = forwardedCodec else { return nil }
        return ForwardableCodec(payloadType: payloadType, codec: codec, channels: channels.flatMap { UInt8(exactly: $0) },
                                parameters: fmtp.map(FmtpParameters.init(parsing:)) ?? FmtpParameters())
    }
}

/// "audio", "video" or "data", as in SkyWay's `contentType`.
public enum ContentType: String, Sendable, Codable {
    case audio, video
    /// A data publication (docs/protocol.md "Data"): `LocalDataStream`, carried on a data channel.
    case data
}

/// One sending m-line of a client's offer, or (`isData`) the connection's data-channel section.
public struct OfferedTrack: Sendable {
    public var mid: String
    public var codec: RtpCodec
    public var ssrc: UInt32
    public var cname: String
    public var active: Bool
    /// The `m=application` section every data channel of the connection shares (codec, ssrc
    /// and cname unused).
    public var isData = false
    /// The id of the RFC 6464 audio-level header extension the source writes (offered as
    /// `a=extmap:<id> urn:ietf:params:rtp-hdrext:ssrc-audio-level`), nil: none.
    public var audioLevelExtensionId: UInt8?
    public init(mid: String, codec: RtpCodec, ssrc: UInt32, cname: String, active: Bool = true) {
        self.mid = mid; self.codec = codec; self.ssrc = ssrc; self.cname = cname; self.active = active
    }

    /// The data-channel section with mid `mid`.
    public static func data(mid: String) -> OfferedTrack {
        var t = OfferedTrack(mid: mid, codec: .opus, ssrc: 0, cname: "")
        t.isData = true
        return t
    }
}

/// The largest data message this client takes (its `a=max-message-size`; RFC 8841's default).
public let clientMaxDataMessageBytes = 65536

/// A clear error for SDP a client cannot use.
public struct ClientSdpError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}

/// The SDP a client writes and reads (RFC 8829 shapes: BUNDLE, rtcp-mux, one transport),
/// built as `MinatoWire` values (`RtpMediaSection`) and serialized; the remote transport is
/// read by `SessionDescription.transport()`, the same code the server uses.
public enum ClientSdp {
    /// Our transport for `RtpMediaSection`, and the address/port of the m= and c= lines (our
    /// first candidate's; 127.0.0.1 and 9 without one).
    static func localTransport(_ local: LocalTransportParameters) -> (SdpLocalTransport, address: String, port: Int) {
        let t = SdpLocalTransport(iceUfrag: local.iceUfrag, icePwd: local.icePwd, fingerprint: local.fingerprint,
                                  candidates: local.candidates)
        let d = t.defaultAddress
        return (t, d?.address ?? "127.0.0.1", d?.port ?? 9)
    }

    /// The `a=rtcp-fb` values a sending client offers for video: key frame requests only. It
    /// keeps no retransmission store, so it does not offer `nack` (the server then does not
    /// NACK it) and offers no RTX.
    static let sentFeedback = ["nack pli", "ccm fir"]

    /// An offer whose every m-line sends one track (DTLS `actpass`, candidates in the first
    /// m-line). A track whose codec is not in the codec map cannot be sent: its m-line is
    /// written rejected (port 0) and left out of the BUNDLE group.
    public static func offer(local: LocalTransportParameters, tracks: [OfferedTrack], sessionId: UInt64, version: Int) -> String {
        let (transport, address, port) = localTransport(local)
        var media: [MediaDescription] = []
        var bundle: [String] = []
        for t in tracks {
            if t.isData {
                media.append(SdpData.section(mid: t.mid, transport: transport, setup: .actpass,
                                             maxMessageSize: clientMaxDataMessageBytes, includesCandidates: bundle.isEmpty,
                                             port: port, address: address))
                bundle.append(t.mid)
                continue
            }
            guard let codec = t.codec.forwardable else {
                var m = MediaDescription(kind: t.codec.kind.rawValue, formats: [String(t.codec.payloadType)])
                m.mid = t.mid
                media.append(.rejecting(m, address: address))
                continue
            }
            media.append(RtpMediaSection(
                kind: codec.codec.kind, port: port, address: address, mid: t.mid, transport: transport, setup: .actpass,
                extensions: t.audioLevelExtensionId.map { [ExtMap(id: $0, uri: RtpHeaderExtension.audioLevel.uri)] } ?? [],
                direction: t.active ? .sendonly : .inactive, msid: t.cname + " " + t.mid, codec: codec,
                feedback: codec.codec.kind == "video" ? sentFeedback : [], ssrcs: [SsrcLine(ssrc: t.ssrc, attribute: "cname", value: t.cname)],
                includesCandidates: bundle.isEmpty).media)
            bundle.append(t.mid)
        }
        return SessionDescription(username: "-", sessionName: "-", sessionId: sessionId, version: version, bundle: bundle,
                                  iceLite: false, media: media).serialize()
    }

    /// What a receiving client learns from one m-line of a server's offer.
    public struct OfferedStream: Sendable, Equatable {
        public var mid: String
        public var kind: String
        /// The codec the sender will use (the one the answer accepts, in the codec map's
        /// spelling), nil on a rejected m-line.
        public var codec: RtpMap?
        /// SSRCs the sender announced (`a=ssrc`), media first (then an RTX SSRC, which this
        /// client never receives since its answer declines RTX), empty if none.
        public var ssrcs: [UInt32]
        /// The sender's direction: `.sendonly` for a live stream, `.inactive` for a removed one.
        public var direction: MediaDirection
        public var rejected: Bool
        /// A data-channel section (kind "application"): the peer's SCTP port and
        /// `a=max-message-size` (nil: absent, 64 KiB assumed; 0: no limit).
        public var sctpPort: UInt16?
        public var maxMessageSize: Int?
    }

    /// The `a=rtcp-fb` values a receiving client answers: of those offered for the codec, the
    /// key frame requests it can send (never `nack`: it does not NACK).
    static let answeredFeedback: Set<String> = ["nack pli", "ccm fir"]

    /// A receive-only answer to a server's offer: every sending m-line is received with its
    /// first codec the codec map knows (`MediaDescription.forwardableCodecs`; its fmtp rebuilt
    /// from the parsed parameters, never copied) and only that codec: RTX and RED formats the
    /// offer lists (RED first) are left out, since the client decodes neither, so the server
    /// resends plainly and sends plain opus. Inactive lines stay inactive; a data-channel
    /// section is accepted (our `a=sctp-port:5000` and `a=max-message-size`); m-lines we
    /// cannot take (no known codec, no mid) are rejected. `dtlsRole` picks our
    /// `a=setup`: `.client` answers `active` (what browsers do), `.server` answers `passive`
    /// (the peer sends the ClientHello once ICE is up; Janus needs it to avoid dropping an
    /// early hello, see bench/JANUS-NOTES.md).
    public static func answer(to offer: SessionDescription, local: LocalTransportParameters, sessionId: UInt64,
                              version: Int, dtlsRole: DtlsRole = .client) -> (sdp: String, streams: [OfferedStream]) {
        let setup: DtlsSetup = dtlsRole == .client ? .active : .passive
        let (transport, address, port) = localTransport(local)
        var streams: [OfferedStream] = []
        var media: [MediaDescription] = []
        var bundle: [String] = []
        for m in offer.media {
            if SdpData.isDataChannelSection(m), let mid = m.mid {
                media.append(SdpData.section(mid: mid, transport: transport, setup: setup, maxMessageSize: clientMaxDataMessageBytes,
                                             includesCandidates: bundle.isEmpty, port: port, address: address))
                bundle.append(mid)
                streams.append(OfferedStream(mid: mid, kind: m.kind, codec: nil, ssrcs: [], direction: .sendrecv, rejected: false,
                                             sctpPort: SdpData.sctpPort(m), maxMessageSize: SdpData.maxMessageSize(m)))
                continue
            }
            let rtp = m.proto.contains("RTP") && (m.kind == "audio" || m.kind == "video")
            guard rtp, m.port != 0, let mid = m.mid, let codec = m.forwardableCodecs.first else {
                media.append(.rejecting(m, address: address))
                streams.append(OfferedStream(mid: m.mid ?? String(streams.count), kind: m.kind, codec: nil, ssrcs: [],
                                             direction: .inactive, rejected: true))
                continue
            }
            let theirs = m.direction
            let ours: MediaDirection = theirs == .sendonly || theirs == .sendrecv ? .recvonly : .inactive
            media.append(RtpMediaSection(
                kind: m.kind, port: port, address: address, mid: mid, transport: transport, setup: setup, direction: ours,
                codec: codec, feedback: codec.feedback.filter(answeredFeedback.contains),
                includesCandidates: bundle.isEmpty).media)
            bundle.append(mid)
            streams.append(OfferedStream(mid: mid, kind: m.kind, codec: codec.rtpMap, ssrcs: m.ssrcIds,
                                         direction: theirs == .sendrecv ? .sendonly : theirs, rejected: false))
        }
        let sdp = SessionDescription(username: "-", sessionName: "-", sessionId: sessionId, version: version, bundle: bundle,
                                     iceLite: false, media: media)
        return (sdp.serialize(), streams)
    }

    /// The remote transport (ICE credentials, fingerprint, setup, candidates) of a BUNDLEd SDP,
    /// read by `SessionDescription.transport()`: the BUNDLE-tagged m-section's values, else the
    /// session-level ones (see `SdpTransport`). Minato and Janus put every candidate into the
    /// description, so candidates without `a=end-of-candidates` are taken as complete too.
    public static func remoteTransport(of sdp: SessionDescription) throws(ClientSdpError) -> RemoteTransportParameters {
        let t: SdpTransport
        do { t = try sdp.transport() } catch { throw ClientSdpError(error.description) }
        return RemoteTransportParameters(iceUfrag: t.iceUfrag, icePwd: t.icePwd, fingerprintAlgorithm: t.fingerprint.algorithm,
                                         fingerprint: t.fingerprint.value, setup: t.setup.rawValue, candidates: t.candidates,
                                         endOfCandidates: t.endOfCandidates || !t.candidates.isEmpty)
    }

    /// Our DTLS role given the remote's `a=setup` in an answer to our `actpass` offer.
    public static func dtlsRole(answeringOurOffer remoteSetup: String) -> DtlsRole {
        remoteSetup == "active" ? .server : .client
    }
}
