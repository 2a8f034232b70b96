internal import MinatoWire
internal import MinatoMedia
internal import MinatoTransport

/// The codec a publication carries, as negotiated with its publisher; subscribers are offered
/// exactly this codec (docs/protocol.md "Codecs"). Every field is validated (`ForwardableCodec`):
/// the name is the codec map's spelling, the clock rate the codec's, and the fmtp parameters
/// rebuilt from safe `key=value` tokens, so it can be written into other members' SDP as is.
struct NegotiatedCodec: Sendable, Equatable {
    /// The publisher's codec, from the codec map (`ForwardableCodec.feedback` is what the
    /// publisher offered; subscribers get `SfuSdp.feedback(for:)`).
    var codec: ForwardableCodec
    var keyFrameRequest: KeyFrameRequestMethod

    var payloadType: UInt8 { codec.payloadType }
    /// "opus", "VP8", "VP9", "H264", "AV1".
    var name: String { codec.codec.encodingName }
    /// 48000 (opus) or 90000 (video); goes to the engine without conversion.
    var clockRate: UInt32 { codec.clockRate }
    var channels: Int? { codec.channels.map(Int.init) }
    var fmtp: String? { codec.parameters.text }
    var mimeType: String { codec.codec.mimeType }
    var videoCodec: VideoCodecKind { codec.codec.videoCodec }
}

/// What a publisher's m-line says about the stream it sends.
struct PublishedStream: Sendable {
    var mid: String
    var kind: String
    var codec: NegotiatedCodec
    var ssrc: UInt32
    var rtxSsrc: UInt32?
    /// The publisher's RTX payload type (`apt=<codec>`) the answer accepted; nil: none.
    var rtxPayloadType: UInt8?
    /// The publisher's RED payload type around opus the answer accepted; nil: none.
    var redPayloadType: UInt8?
    /// Video whose publisher offered plain `nack` for the codec: lost packets are NACKed to it.
    var nack: Bool
    /// Publisher extension id -> Minato's subscriber id (for the engine's remap table).
    var extensionIds: [(publisher: UInt8, subscriber: UInt8)]
    /// Simulcast: the layers' RIDs in the offer's `a=simulcast` order (then `ssrc` and
    /// `rtxSsrc` are 0/nil: learned from the RID header extension), and the publisher's ids
    /// of the RID and repaired-RID extensions (0: not offered). Empty: one stream.
    var rids: [String] = []
    var ridExtensionId: UInt8 = 0
    var repairedRidExtensionId: UInt8 = 0
    /// The publisher's id of the transport-wide sequence number extension (0: not offered).
    var transportSequenceExtensionId: UInt8 = 0
    /// Audio: the publisher's id of the RFC 6464 audio-level extension (0: not offered).
    var audioLevelExtensionId: UInt8 = 0
}

/// The room layer's SDP entry points: parse, read the peer's transport, answer a publisher,
/// offer to a subscriber. The SDP itself is built as `MinatoWire` values (`SfuSdp`,
/// `RtpMediaSection`) and serialized; this only adapts the room and transport types to them
/// and Wire errors to `RoomError.invalidSdp`.
enum SdpNegotiation {
    /// Parses a client's SDP. An m-section with port 0 and `a=bundle-only` whose mid is in the
    /// BUNDLE group is part of the bundle, not rejected (RFC 8843 7.2): it is given port 9 here,
    /// so publish checks and the answer treat it like any other bundled m-section. Firefox with
    /// `bundlePolicy: 'max-bundle'` offers every m-section after the first this way.
    ///
    /// Bounded by `limits` (docs/protocol.md "Limits"): the text's size is checked before
    /// anything is read (`server.maxSdpBytes`), m= sections (`media.sdp.maxMediaSections`, for
    /// an `answer` `maxAnswerMediaSections`), payload types per m-section
    /// (`media.sdp.maxCodecsPerSection`) and candidates per m-section
    /// (`media.maxRemoteCandidates`) while it is read: the parse stops at the first line over
    /// one, with `limitExceeded` (code 413) naming the key. Linear in the text's length; a
    /// pure function, so callers run it off the room actor.
    static func parse(_ sdp: String, limits: RoomConfiguration = RoomConfiguration(), answer: Bool = false) throws(RoomError) -> SessionDescription {
        let size = sdp.utf8.count
        guard size <= limits.maxSdpBytes else {
            throw .sdpLimitExceeded("The SDP is \(size) bytes; at most \(limits.maxSdpBytes) are accepted (server.maxSdpBytes).")
        }
        let sections = answer ? limits.maxAnswerMediaSections : limits.maxSdpMediaSections
        let wire = SdpLimits(maxMediaSections: sections, maxFormatsPerSection: limits.maxSdpCodecsPerSection,
                             maxCandidatesPerSection: limits.maxRemoteCandidates)
        var sd: SessionDescription
        do { sd = try SessionDescription.parse(sdp, limits: wire) } catch {
            switch error.limit {
            case .mediaSections?:
                throw .sdpLimitExceeded(answer
                    ? "The answer has more m= sections than the server can offer (\(sections): media.sdp.maxMediaSections, or twice rooms.maxSubscriptionsPerMember)."
                    : "The SDP has more than \(sections) m= sections (media.sdp.maxMediaSections).")
            case .formatsPerSection?:
                throw .sdpLimitExceeded("Line \(error.line): an m= section may have at most \(limits.maxSdpCodecsPerSection) payload types, a=rtpmap and a=fmtp lines (media.sdp.maxCodecsPerSection).")
            case .candidatesPerSection?:
                throw .sdpLimitExceeded("Line \(error.line): an m= section may carry at most \(limits.maxRemoteCandidates) candidates (media.maxRemoteCandidates).")
            case nil:
                throw .invalidSdp("Line \(error.line) '\(error.text.prefix(256))': \(error.reason).")
            }
        }
        if let group = sd.bundleGroup {
            let bundled = Set(group)
            for i in sd.media.indices where sd.media[i].port == 0 && sd.media[i].bundleOnly
                && sd.media[i].mid.map(bundled.contains) == true {
                sd.media[i].port = 9
            }
        }
        return sd
    }

    /// ICE credentials, fingerprint, setup and candidates of a BUNDLEd description, read by
    /// `SessionDescription.transport()` (media level of the BUNDLE-tagged m-section over
    /// session level; see `SdpTransport`).
    /// At most `maxCandidates` distinct candidates (`media.maxRemoteCandidates`; they count
    /// with the ones trickled for the connection, `PeerTransport.applyRemote`).
    static func remoteTransport(of sd: SessionDescription, maxCandidates: Int = .max) throws(RoomError) -> RemoteTransportParameters {
        let t: SdpTransport
        do { t = try sd.transport() } catch { throw .invalidSdp(error.description) }
        guard t.candidates.count <= maxCandidates else {
            throw .sdpLimitExceeded("The SDP carries \(t.candidates.count) candidates; at most \(maxCandidates) are accepted per connection (media.maxRemoteCandidates).")
        }
        return RemoteTransportParameters(iceUfrag: t.iceUfrag, icePwd: t.icePwd, fingerprintAlgorithm: t.fingerprint.algorithm,
                                         fingerprint: t.fingerprint.value, setup: t.setup.rawValue,
                                         candidates: t.candidates, endOfCandidates: t.endOfCandidates)
    }

    /// The first codec of the m-line (in the offer's preference order) that Minato forwards
    /// (`SfuSdp.chosenCodec`), with the key frame request the publisher's feedback allows.
    static func chooseCodec(_ m: MediaDescription) -> NegotiatedCodec? {
        guard let c = SfuSdp.chosenCodec(m) else { return nil }
        let fb = c.feedback
        let method: KeyFrameRequestMethod = c.codec == .opus ? .none
            : (fb.contains("nack pli") || !fb.contains("ccm fir")) ? .pli : .fir
        return NegotiatedCodec(codec: c, keyFrameRequest: method)
    }

    /// The stream a publisher's m-line announces (its primary SSRC and RTX SSRC), with the RTX
    /// and RED formats and NACK the answer (`SfuSdp.answer(toSenderOffer:)`) accepts for it.
    static func publishedStream(_ m: MediaDescription) throws(RoomError) -> PublishedStream {
        // Mid syntax is checked by the parser already; checked again because the value is
        // written into other members' SDP.
        guard let mid = m.mid, isValidMid(mid) else { throw .invalidSdp(SdpNegotiationError.missingMid.description) }
        guard let codec = chooseCodec(m) else {
            throw .invalidParameter("m-line '\(mid)' offers no codec Minato forwards (audio: opus; video: VP8, VP9, H264 packetization-mode=1, AV1).")
        }
        var ids: [(UInt8, UInt8)] = []
        for e in m.extMaps {
            if let sub = RtpHeaderExtension(uri: e.uri)?.receiverId { ids.append((e.id, sub)) }
        }
        let rtx = SfuSdp.acceptedRtx(m, for: codec.codec), red = SfuSdp.acceptedRed(m, for: codec.codec)
        let nack = SfuSdp.sendsNack(for: codec.codec)
        let twcc = m.extMaps.first { $0.uri == RtpHeaderExtension.transportWideCC.uri }?.id ?? 0
        switch SfuSdp.simulcastRids(m) {
        case .invalid(let why)?:
            throw .invalidParameter("m-line '\(mid)' has a simulcast line Minato cannot take: \(why).")
        case .layers(let rids)?:
            guard m.kind == "video" else { throw .invalidParameter("m-line '\(mid)': simulcast is for video only.") }
            func extId(_ e: RtpHeaderExtension) -> UInt8 { m.extMaps.first { $0.uri == e.uri }?.id ?? 0 }
            let ridId = extId(.rtpStreamId)
            guard ridId != 0 else {
                throw .invalidParameter("m-line '\(mid)' sends simulcast without the \(RtpHeaderExtension.rtpStreamId.uri) header extension, which names each layer's SSRC.")
            }
            var stream = PublishedStream(mid: mid, kind: m.kind, codec: codec, ssrc: 0, rtxSsrc: nil, rtxPayloadType: rtx,
                                         redPayloadType: red, nack: nack, extensionIds: ids)
            stream.rids = rids
            stream.ridExtensionId = ridId
            stream.repairedRidExtensionId = extId(.repairedRtpStreamId)
            stream.transportSequenceExtensionId = twcc
            return stream
        case nil:
            break
        }
        let fid = m.ssrcGroups.first { $0.semantics == "FID" }
        let all = m.ssrcs.map(\.ssrc)
        guard let primary = fid?.ssrcs.first ?? all.first else {
            throw .invalidParameter("m-line '\(mid)' has no a=ssrc line (nor a=simulcast with RIDs); Minato needs the publisher's SSRC in its offer.")
        }
        var stream = PublishedStream(mid: mid, kind: m.kind, codec: codec, ssrc: primary,
                                     rtxSsrc: fid.flatMap { $0.ssrcs.count > 1 ? $0.ssrcs[1] : nil },
                                     rtxPayloadType: rtx, redPayloadType: red, nack: nack, extensionIds: ids)
        stream.transportSequenceExtensionId = twcc
        if m.kind == "audio" {
            stream.audioLevelExtensionId = m.extMaps.first { $0.uri == RtpHeaderExtension.audioLevel.uri }?.id ?? 0
        }
        return stream
    }

    static func localTransport(_ local: TransportDescription) -> SdpLocalTransport {
        SdpLocalTransport(iceUfrag: local.iceUfrag, icePwd: local.icePwd, fingerprint: local.fingerprint,
                          candidates: local.candidates, iceLite: local.iceLite)
    }

    /// The server's offer for a member's receive connection (`SfuSdp.receiveOffer`): a session
    /// header BUNDLEing every slot's mid (ice-lite when the local agent is lite), then each
    /// slot's m-section in order, with the local candidates and end-of-candidates in the first.
    /// `data`: the data-channel section's mid and place, with `a=max-message-size`.
    static func receiveOffer(slots: [ReceiveSlot], local: TransportDescription, version: Int, sessionId: UInt64,
                             data: (mid: String, position: Int, maxMessageSize: Int)? = nil) -> String {
        SfuSdp.receiveOffer(streams: slots.map(\.stream), local: localTransport(local), sessionId: sessionId,
                            version: version, data: data).serialize()
    }

    /// Answers a client's send-connection offer (`SfuSdp.answer(toSenderOffer:)`): every
    /// audio/video m-line the client sends is accepted recvonly with its first forwardable
    /// codec; anything else is rejected (port 0).
    static func answerPublisherOffer(_ offer: SessionDescription, local: TransportDescription,
                                     version: Int, sessionId: UInt64, maxMessageSize: Int? = nil) throws(RoomError) -> String {
        do {
            return try SfuSdp.answer(toSenderOffer: offer, local: localTransport(local), sessionId: sessionId,
                                     version: version, maxMessageSize: maxMessageSize).serialize()
        } catch {
            throw .invalidSdp(error.description)
        }
    }
}

/// One m-line of a member's receive connection (server-offered). Its mid and kind are fixed
/// for the connection's life; the subscription it carries changes: when one ends the m-line
/// stays, `inactive`, until a later subscription of its kind takes it with SSRCs of its own
/// (`ReceiveSlots`).
struct ReceiveSlot: Sendable {
    var mid: String
    var kind: String
    var codec: NegotiatedCodec
    var subscriptionId: String?
    /// The version of the first offer that carried this m-line `inactive` since its last
    /// subscription ended; nil while it carries one, or before that offer.
    var inactiveSince: Int?
    var ssrc: UInt32
    var streamId: String
    var trackId: String
    var cname: String
    /// Video: the RTX format offered beside the codec and this subscription's own RTX SSRC.
    var rtxPayloadType: UInt8?
    var rtxSsrc: UInt32?
    /// Audio: the publication's RED format, offered first when it has one.
    var redPayloadType: UInt8?

    /// A slot for a subscription to `stream`: video gets an RTX format
    /// (`SfuSdp.receiverRtxPayloadType`) and a random RTX SSRC of its own (nonzero, not
    /// `ssrc`); audio the publication's RED format, if any.
    init(mid: String, subscribing stream: PublishedStream, subscriptionId: String, ssrc: UInt32, streamId: String,
         trackId: String, cname: String) {
        self.mid = mid; self.kind = stream.kind; self.codec = stream.codec; self.subscriptionId = subscriptionId
        self.ssrc = ssrc; self.streamId = streamId; self.trackId = trackId; self.cname = cname
        rtxPayloadType = SfuSdp.receiverRtxPayloadType(for: stream.codec.codec, senderRtx: stream.rtxPayloadType)
        rtxSsrc = rtxPayloadType == nil ? nil : Self.randomSsrc(besides: ssrc)
        redPayloadType = stream.codec.codec.codec == .opus ? stream.redPayloadType : nil
    }

    /// The slot carries a subscription to `stream` from now on: the codec, formats and msid
    /// are the stream's, and its SSRCs new (Chromium sets its receiver up again only for another
    /// SSRC: with the old one it would decode into a track nobody renders); the mid stays.
    mutating func carry(_ stream: PublishedStream, subscriptionId: String, streamId: String, trackId: String, cname: String) {
        codec = stream.codec; self.subscriptionId = subscriptionId; inactiveSince = nil
        self.streamId = streamId; self.trackId = trackId; self.cname = cname
        ssrc = Self.randomSsrc(besides: ssrc)
        rtxPayloadType = SfuSdp.receiverRtxPayloadType(for: stream.codec.codec, senderRtx: stream.rtxPayloadType)
        rtxSsrc = rtxPayloadType == nil ? nil : Self.randomSsrc(besides: ssrc)
        redPayloadType = stream.codec.codec.codec == .opus ? stream.redPayloadType : nil
    }

    /// Whether a subscription to `stream` would be written in this slot with the same m= line:
    /// same kind, codec and payload types (a receiver that cannot change decoders on a
    /// transceiver, such as aiortc, keeps working).
    func hasFormat(of stream: PublishedStream) -> Bool {
        kind == stream.kind && codec.codec.codec == stream.codec.codec.codec && codec.payloadType == stream.codec.payloadType
            && rtxPayloadType == SfuSdp.receiverRtxPayloadType(for: stream.codec.codec, senderRtx: stream.rtxPayloadType)
            && redPayloadType == (stream.codec.codec.codec == .opus ? stream.redPayloadType : nil)
    }

    /// A random SSRC in 1...UInt32.max other than `other`.
    static func randomSsrc(besides other: UInt32) -> UInt32 {
        var ssrc = UInt32.random(in: 1...UInt32.max)
        while ssrc == other { ssrc = UInt32.random(in: 1...UInt32.max) }
        return ssrc
    }

    /// The slot as `SfuSdp` writes it: active (sendonly, msid, ssrc lines) while subscribed.
    var stream: SfuSdp.ReceiverStream {
        SfuSdp.ReceiverStream(mid: mid, kind: kind, codec: codec.codec, active: subscriptionId != nil, ssrc: ssrc,
                              streamId: streamId, trackId: trackId, cname: cname, rtxPayloadType: rtxPayloadType,
                              rtxSsrc: rtxSsrc, redPayloadType: redPayloadType)
    }

    /// What the subscriber's answer accepted beside the codec, as the consumer takes it: the
    /// RTX SSRC and payload type when RTX was accepted, the RED payload type when RED was
    /// (`SfuSdp.acceptance`); nil otherwise (the engine then resends plainly / sends opus).
    func acceptedFormats(in answer: SessionDescription) -> (rtxSsrc: UInt32?, rtxPayloadType: UInt8?, redPayloadType: UInt8?) {
        acceptedFormats(in: answer.media(mid: mid))
    }

    /// `acceptedFormats(in:)` given the answer's m-section with this slot's mid (nil: none).
    func acceptedFormats(in section: MediaDescription?) -> (rtxSsrc: UInt32?, rtxPayloadType: UInt8?, redPayloadType: UInt8?) {
        let s = stream
        let accepted = SfuSdp.acceptance(of: s, section: section)
        let rtx = accepted.rtx ? s.rtxPayloadType.flatMap { pt in rtxSsrc.map { ($0, pt) } } : nil
        return (rtx?.0, rtx?.1, accepted.red ? redPayloadType : nil)
    }
}
