// The two descriptions an SFU writes: its answer to a sender's offer, and its offer to a
// receiver. Built from `RtpMediaSection` values; the server's `SdpNegotiation` calls these
// and serializes the result. Control path; plain Sendable values.

/// RTP header extensions (RFC 8285) Minato forwards, with the ids it uses in its own offers.
public enum RtpHeaderExtension: CaseIterable, Sendable, Equatable {
    case audioLevel, absSendTime, videoOrientation, timeOffset, mid
    /// RFC 8852: the RID of a simulcast layer (`rtpStreamId`) and the RID an RTX stream
    /// repairs (`repairedRtpStreamId`); the SFU learns a layer's SSRCs from them.
    case rtpStreamId, repairedRtpStreamId
    /// draft-holmer-rmcat-transport-wide-cc-extensions-01: one sequence number per packet
    /// across a transport, for the receiver's transport-wide feedback (congestion control).
    /// The SFU feeds back on what publishers send and numbers what it sends to subscribers.
    case transportWideCC

    public var uri: String {
        switch self {
        case .audioLevel: return "urn:ietf:params:rtp-hdrext:ssrc-audio-level"
        case .absSendTime: return "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
        case .videoOrientation: return "urn:3gpp:video-orientation"
        case .timeOffset: return "urn:ietf:params:rtp-hdrext:toffset"
        case .mid: return "urn:ietf:params:rtp-hdrext:sdes:mid"
        case .rtpStreamId: return "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"
        case .repairedRtpStreamId: return "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id"
        case .transportWideCC: return "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
        }
    }

    public init?(uri: String) {
        guard let e = Self.allCases.first(where: { $0.uri == uri }) else { return nil }
        self = e
    }

    /// The id in Minato's offers to receivers; nil = not forwarded (the MID and RIDs belong to
    /// each connection).
    public var receiverId: UInt8? {
        switch self {
        case .audioLevel: return 1
        case .absSendTime: return 2
        case .videoOrientation: return 3
        case .timeOffset: return 4
        case .transportWideCC: return 5
        case .mid, .rtpStreamId, .repairedRtpStreamId: return nil
        }
    }

    /// Whether the extension is meaningful in an m-section of `kind`.
    public func applies(to kind: String) -> Bool {
        switch self {
        case .audioLevel: return kind == "audio"
        case .videoOrientation, .timeOffset, .rtpStreamId, .repairedRtpStreamId: return kind == "video"
        case .absSendTime, .mid, .transportWideCC: return true
        }
    }
}

/// What a selective forwarding unit writes: ICE-lite (when its agent is), BUNDLE, rtcp-mux,
/// one codec per m-section (with its RTX or RED format when negotiated), its own candidates in
/// the first m-section.
public enum SfuSdp {
    /// The `o=` username and `s=` value of every description the SFU writes.
    public static let username = "minato"

    /// The `a=rtcp-fb` values the SFU writes for `codec`: "nack" (it NACKs senders and answers
    /// receivers' NACKs from its retransmission store), "nack pli" and "ccm fir" (it answers
    /// both with a key frame request to the sender), "rrtr" (it answers a receiver's RTCP XR
    /// reference time with a DLRR, so a receive-only browser learns its round-trip time and
    /// paces its NACK retries by it) for video; and "transport-cc" for both (it sends
    /// publishers transport-wide feedback and numbers what it sends subscribers).
    public static func feedback(for codec: ForwardedCodec) -> [String] {
        codec.kind == "video" ? ["nack", "nack pli", "ccm fir", "rrtr", "transport-cc"] : ["transport-cc"]
    }

    /// The codec the SFU takes from a sender's m-section: the first the codec map can forward,
    /// in the sender's preference order (`MediaDescription.forwardableCodecs`).
    public static func chosenCodec(_ m: MediaDescription) -> ForwardableCodec? { m.forwardableCodecs.first }

    /// The sender's RTX format for the chosen video `codec` the SFU accepts (the first with
    /// `apt=<codec>`, `MediaDescription.rtxPayloadType(associatedWith:)`); nil for audio.
    public static func acceptedRtx(_ m: MediaDescription, for codec: ForwardableCodec) -> UInt8? {
        codec.codec.kind == "video" ? m.rtxPayloadType(associatedWith: codec.payloadType) : nil
    }

    /// The sender's RED format around the chosen opus `codec` the SFU accepts (fmtp
    /// `<opus>/<opus>`, `MediaDescription.redPayloadType(wrapping:)`); nil otherwise.
    public static func acceptedRed(_ m: MediaDescription, for codec: ForwardableCodec) -> UInt8? {
        codec.codec == .opus ? m.redPayloadType(wrapping: codec.payloadType) : nil
    }

    /// Whether the sender offered plain `a=rtcp-fb:<pt> nack` (or `*`) for video `codec`, so
    /// it retransmits what the SFU NACKs.
    public static func sendsNack(for codec: ForwardableCodec) -> Bool {
        codec.codec.kind == "video" && codec.feedback.contains("nack")
    }

    /// The most simulcast layers `simulcastRids` accepts in one m-section.
    public static let maxSimulcastLayers = 16

    /// The RIDs a sender's m-section sends as simulcast (RFC 8853), in its `a=simulcast:send`
    /// order: each stream's first alternative (a paused `~` one included), each also declared
    /// with `a=rid:<id> send`. A RID is 1...16 characters of `[A-Za-z0-9_-]` (what fits one
    /// RFC 8285 one-byte element). nil: no simulcast (no `a=simulcast`, or nothing to send);
    /// `invalid`: a simulcast line Minato cannot take (a bad or undeclared RID, a RID twice,
    /// more than `maxSimulcastLayers`).
    public static func simulcastRids(_ m: MediaDescription) -> SimulcastLayers? {
        guard let value = m.simulcast else { return nil }
        let fields = Substring(value).sdpFields
        guard let sendAt = fields.firstIndex(of: "send") else { return nil }
        guard sendAt + 1 < fields.count else { return .invalid("a=simulcast:send lists no stream") }
        let declared = Set(m.rids.filter { $0.direction == "send" }.map(\.id))
        var rids: [String] = []
        for stream in fields[sendAt + 1].split(separator: ";", omittingEmptySubsequences: false) {
            guard let first = stream.split(separator: ",", omittingEmptySubsequences: false).first else {
                return .invalid("a=simulcast:send has an empty stream")
            }
            let rid = String(first.hasPrefix("~") ? first.dropFirst() : first)
            guard isValidRid(rid) else { return .invalid("RID '\(rid.prefix(32))' must be 1...16 characters of A-Z, a-z, 0-9, '-', '_'") }
            guard declared.contains(rid) else { return .invalid("RID '\(rid)' has no a=rid:\(rid) send line") }
            guard !rids.contains(rid) else { return .invalid("RID '\(rid)' is listed twice") }
            rids.append(rid)
            guard rids.count <= maxSimulcastLayers else { return .invalid("more than \(maxSimulcastLayers) simulcast streams") }
        }
        return .layers(rids)
    }

    /// What `simulcastRids` found.
    public enum SimulcastLayers: Sendable, Equatable {
        /// The layers' RIDs in the sender's order.
        case layers([String])
        /// Why the simulcast line cannot be taken.
        case invalid(String)
    }

    /// 1...16 characters of `[A-Za-z0-9_-]`.
    public static func isValidRid(_ rid: String) -> Bool { isSdpIdentifier(rid, maxLength: 16) }

    /// The answer to a sender's offer. Every audio/video m-section with a port and a
    /// forwardable codec is accepted with that one codec, `recvonly` if the sender sends
    /// (`inactive` otherwise), the offered header extensions Minato knows for its kind (with
    /// the sender's ids) and the codec's SFU feedback that the offer also lists; beside it the offered RTX format
    /// (`acceptedRtx`, after the codec) or RED format (`acceptedRed`, listed FIRST so Chromium
    /// sends RED), and opus with `useinbandfec=1` (the sender adds in-band FEC); every other
    /// m-section is rejected
    /// (`MediaDescription.rejecting`). `a=setup` answers the offer's (see `SdpTransport` for
    /// where it is read); candidates go into the first accepted m-section.
    /// With `maxMessageSize`, the offer's first data-channel section (`SdpData`) is accepted
    /// too, with Minato's `a=sctp-port` and that `a=max-message-size`.
    public static func answer(toSenderOffer offer: SessionDescription, local: SdpLocalTransport, sessionId: UInt64,
                              version: Int, maxMessageSize: Int? = nil) throws(SdpNegotiationError) -> SessionDescription {
        let setup = (offer.transportAttribute(named: "setup").flatMap(DtlsSetup.init(rawValue:)) ?? .actpass).answer
        var media: [MediaDescription] = []
        var bundle: [String] = []
        var dataAccepted = false
        for m in offer.media {
            if let mid = m.mid, !isValidMid(mid) { throw .missingMid }
            if let maxMessageSize, !dataAccepted, SdpData.isDataChannelSection(m), let mid = m.mid {
                dataAccepted = true
                media.append(SdpData.section(mid: mid, transport: local, setup: setup, maxMessageSize: maxMessageSize,
                                             includesCandidates: bundle.isEmpty))
                bundle.append(mid)
                continue
            }
            let codec = (m.kind == "audio" || m.kind == "video") && m.port != 0 ? chosenCodec(m) : nil
            guard var codec else {
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
            let rtx = acceptedRtx(m, for: codec), red = acceptedRed(m, for: codec)
            if codec.codec == .opus { codec.parameters.set("useinbandfec", to: "1") }
            media.append(RtpMediaSection(
                kind: m.kind, mid: mid, transport: local, setup: setup, extensions: extensions,
                direction: sending ? .recvonly : .inactive, codec: codec,
                // An answer may only keep feedback the offer has (RFC 4585 4.2).
                feedback: feedback(for: codec.codec).filter { codec.feedback.contains($0) },
                rtxPayloadType: rtx, redPayloadType: red, includesCandidates: bundle.isEmpty,
                receivedRids: receivedRids(m, sending: sending)).media)
            bundle.append(mid)
        }
        return SessionDescription(username: username, sessionName: username, sessionId: sessionId, version: version,
                                  bundle: bundle, iceLite: local.iceLite, media: media)
    }

    /// The simulcast layers an answer receives: the sender's valid `simulcastRids` of a
    /// sending video m-section that also offers the RID header extension (without it the
    /// layers' SSRCs could not be learned); none otherwise.
    static func receivedRids(_ m: MediaDescription, sending: Bool) -> [String] {
        guard sending, m.kind == "video", case .layers(let rids)? = simulcastRids(m),
              m.extMaps.contains(where: { $0.uri == RtpHeaderExtension.rtpStreamId.uri }) else { return [] }
        return rids
    }

    /// One m-section of the SFU's offer to a receiver.
    public struct ReceiverStream: Sendable, Equatable {
        public var mid: String
        /// "audio" or "video".
        public var kind: String
        public var codec: ForwardableCodec
        /// false: the m-section is kept (its mid never changes; a later stream may take it) but
        /// `inactive`, without msid or ssrc.
        public var active: Bool
        public var ssrc: UInt32
        public var streamId: String
        public var trackId: String
        public var cname: String
        /// Video: the RTX payload type offered beside the codec (`apt=<codec>`), nil for none.
        public var rtxPayloadType: UInt8?
        /// Video: the SSRC of the RTX stream (`a=ssrc-group:FID <ssrc> <rtxSsrc>`), written
        /// with `rtxPayloadType` on an active stream.
        public var rtxSsrc: UInt32?
        /// Audio: the RED payload type offered first, around opus; nil for none.
        public var redPayloadType: UInt8?

        public init(mid: String, kind: String, codec: ForwardableCodec, active: Bool, ssrc: UInt32, streamId: String,
                    trackId: String, cname: String, rtxPayloadType: UInt8? = nil, rtxSsrc: UInt32? = nil,
                    redPayloadType: UInt8? = nil) {
            self.mid = mid
            self.kind = kind
            self.codec = codec
            self.active = active
            self.ssrc = ssrc
            self.streamId = streamId
            self.trackId = trackId
            self.cname = cname
            self.rtxPayloadType = rtxPayloadType
            self.rtxSsrc = rtxSsrc
            self.redPayloadType = redPayloadType
        }

        /// The RTX SSRC written for this stream: set, nonzero, not the media SSRC, with an RTX
        /// payload type beside a video codec; nil otherwise.
        var writtenRtxSsrc: UInt32? {
            guard codec.codec.kind == "video", let pt = rtxPayloadType, pt & 0x7F != codec.payloadType,
                  let rtx = rtxSsrc, rtx != 0, rtx != ssrc else { return nil }
            return rtx
        }
    }

    /// The RTX payload type the SFU offers receivers of video `codec`: the sender's
    /// (`senderRtx`) when it had one, else `codec + 1` when that is in 96...127 (the layout
    /// browsers use), else 96 (the codec's is then outside 95...126); nil for audio.
    public static func receiverRtxPayloadType(for codec: ForwardableCodec, senderRtx: UInt8?) -> UInt8? {
        guard codec.codec.kind == "video" else { return nil }
        let pt = codec.payloadType
        if let senderRtx, senderRtx <= 127, senderRtx != pt { return senderRtx }
        return (95...126).contains(pt) ? pt + 1 : 96
    }

    /// The offer to a receiver: every stream BUNDLEd in order, `a=setup:actpass`, `sendonly`
    /// with `a=msid` and `a=ssrc` cname/msid lines for an active stream (`inactive` without
    /// them otherwise), Minato's header extension ids for the kind, rtcp-rsize, the codec with
    /// its SFU feedback, its RED format first / RTX format after it when the stream has one
    /// (an active video stream with RTX also gets `a=ssrc-group:FID <ssrc> <rtxSsrc>` and
    /// cname/msid lines for the RTX SSRC, as Chromium writes them); candidates in the first
    /// m-section.
    /// `data`: the data-channel section (`SdpData.section`) and its place among the streams.
    public static func receiveOffer(streams: [ReceiverStream], local: SdpLocalTransport, sessionId: UInt64,
                                    version: Int, data: (mid: String, position: Int, maxMessageSize: Int)? = nil) -> SessionDescription {
        var media: [MediaDescription] = []
        for (i, s) in streams.enumerated() {
            let extensions = RtpHeaderExtension.allCases.compactMap { e -> ExtMap? in
                guard e.applies(to: s.kind), let id = e.receiverId else { return nil }
                return ExtMap(id: id, uri: e.uri)
            }
            let msid = s.streamId + " " + s.trackId
            var groups: [SsrcGroup] = []
            var ssrcs: [SsrcLine] = []
            if s.active {
                var all = [s.ssrc]
                if let rtx = s.writtenRtxSsrc {
                    all.append(rtx)
                    groups.append(SsrcGroup(semantics: "FID", ssrcs: all))
                }
                for ssrc in all {
                    ssrcs += [SsrcLine(ssrc: ssrc, attribute: "cname", value: s.cname),
                              SsrcLine(ssrc: ssrc, attribute: "msid", value: msid)]
                }
            }
            media.append(RtpMediaSection(
                kind: s.kind, mid: s.mid, transport: local, setup: .actpass, extensions: extensions,
                direction: s.active ? .sendonly : .inactive, msid: s.active ? msid : nil, reducedSizeRtcp: true,
                codec: s.codec, feedback: feedback(for: s.codec.codec), rtxPayloadType: s.rtxPayloadType,
                redPayloadType: s.redPayloadType, ssrcGroups: groups, ssrcs: ssrcs, includesCandidates: i == 0).media)
        }
        var mids = streams.map(\.mid)
        if let data {
            let at = min(max(0, data.position), media.count)
            media.insert(SdpData.section(mid: data.mid, transport: local, setup: .actpass, maxMessageSize: data.maxMessageSize,
                                         includesCandidates: at == 0), at: at)
            mids.insert(data.mid, at: at)
        }
        return SessionDescription(username: username, sessionName: username, sessionId: sessionId, version: version,
                                  bundle: mids, iceLite: local.iceLite, media: media)
    }

    /// Which extra formats of an offered stream a receiver's answer accepted.
    public struct ReceiverAcceptance: Sendable, Equatable {
        /// The answer's m-section takes the stream at all: present, of the stream's kind, not
        /// rejected, and listing the codec's payload type. False means the subscriber cannot (or
        /// will not) receive it, whatever else the section says.
        public var codec: Bool
        /// The stream's RTX format is on the answer's m= line, described as RTX for the codec.
        public var rtx: Bool
        /// The stream's RED format is on the answer's m= line, described as RED of opus.
        public var red: Bool

        public init(codec: Bool = true, rtx: Bool, red: Bool) {
            self.codec = codec
            self.rtx = rtx
            self.red = red
        }

        public static let nothing = ReceiverAcceptance(codec: false, rtx: false, red: false)
    }

    /// What `answer` accepted of `stream`: its m-section is the first with the stream's mid;
    /// that m-section must be an RTP one of the stream's kind with a port (or port 0 with
    /// `bundle-only`, RFC 8843) and list the codec's payload type; then each extra format counts
    /// when it is listed with an rtpmap and fmtp of its shape (`MediaDescription.isRtxFormat` /
    /// `isRedFormat`). A missing, rejected or malformed m-section accepts nothing (`.nothing`,
    /// whose `codec` is false); nothing here throws.
    public static func acceptance(of stream: ReceiverStream, in answer: SessionDescription) -> ReceiverAcceptance {
        acceptance(of: stream, section: answer.media.first { $0.mid == stream.mid })
    }

    /// `acceptance(of:in:)` given the answer's m-section for the stream's mid (nil: none), for
    /// a caller that looks many streams up in one answer (`SessionDescription.mediaIndicesByMid`).
    public static func acceptance(of stream: ReceiverStream, section: MediaDescription?) -> ReceiverAcceptance {
        guard let m = section, m.mid == stream.mid, m.port != 0 || m.bundleOnly, m.kind == stream.kind,
              m.proto.contains("RTP") else { return .nothing }
        let index = m.payloadTypeIndex
        let pt = stream.codec.payloadType
        guard index.lists(pt) else { return .nothing }
        let rtx = stream.codec.codec.kind == "video" && stream.rtxPayloadType.map { m.isRtxFormat($0, associatedWith: pt, index) } == true
        let red = stream.codec.codec == .opus && stream.redPayloadType.map { m.isRedFormat($0, wrapping: pt, index) } == true
        return ReceiverAcceptance(rtx: rtx, red: red)
    }
}
