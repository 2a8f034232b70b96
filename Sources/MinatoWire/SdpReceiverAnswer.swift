// The SFU's answer to a receiver's own offer (WHEP: the player offers `recvonly` m-sections and
// the SFU answers `sendonly`), as opposed to `SfuSdp.receiveOffer`, where the SFU offers.
// Control path; plain Sendable values.

extension SfuSdp {
    /// One m-section of a receiver's offer that the SFU sends on: the receiver's own payload
    /// type and fmtp for the codec it will get, its RTX format for that codec (if it offered
    /// one), and the receiver's ids for the header extensions Minato forwards.
    public struct AnsweredReceiverStream: Sendable, Equatable {
        public var mid: String
        public var codec: ForwardableCodec
        public var rtxPayloadType: UInt8?
        public var ssrc: UInt32
        public var rtxSsrc: UInt32?
        public var streamId: String
        public var trackId: String
        public var cname: String
        public var extensions: [ExtMap]

        public init(mid: String, codec: ForwardableCodec, rtxPayloadType: UInt8?, ssrc: UInt32, rtxSsrc: UInt32?,
                    streamId: String, trackId: String, cname: String, extensions: [ExtMap]) {
            self.mid = mid
            self.codec = codec
            self.rtxPayloadType = rtxPayloadType
            self.ssrc = ssrc
            self.rtxSsrc = rtxSsrc
            self.streamId = streamId
            self.trackId = trackId
            self.cname = cname
            self.extensions = extensions
        }
    }

    /// The codec a receiver's m-section `m` takes for a stream published in `published`: of
    /// the codecs `m` offers that Minato forwards, the first of the same codec, preferring (for
    /// H264) the publisher's `profile-level-id` and `packetization-mode`; nil when `m` offers
    /// none of that codec (the receiver cannot decode the stream).
    public static func receiverCodec(in m: MediaDescription, for published: ForwardableCodec) -> ForwardableCodec? {
        let same = m.forwardableCodecs.filter { $0.codec == published.codec }
        guard published.codec == .h264 else { return same.first }
        func key(_ c: ForwardableCodec) -> [String?] {
            [c.parameters["profile-level-id"]?.lowercased(), c.parameters["packetization-mode"]]
        }
        return same.first { key($0) == key(published) } ?? same.first
    }

    /// The header extensions of receiver m-section `m` that Minato forwards for its kind, with
    /// the receiver's ids.
    public static func receiverExtensions(in m: MediaDescription) -> [ExtMap] {
        m.extMaps.compactMap { e -> ExtMap? in
            guard let known = RtpHeaderExtension(uri: e.uri), known.receiverId != nil, known.applies(to: m.kind) else { return nil }
            return ExtMap(id: e.id, uri: e.uri)
        }
    }

    /// The answer to a receiver's offer. Each offered m-section with a stream in `streams`
    /// (matched by mid) is answered `sendonly` with that stream's codec (the receiver's payload
    /// type), RTX when given, the SFU feedback the offer also lists for the codec, `a=msid`,
    /// cname/msid `a=ssrc` lines (and `a=ssrc-group:FID` with the RTX SSRC); every other
    /// m-section is rejected (`MediaDescription.rejecting`). `a=setup` answers the offer's;
    /// candidates go into the first answered m-section, which leads the BUNDLE group.
    public static func answer(toReceiverOffer offer: SessionDescription, streams: [AnsweredReceiverStream],
                              local: SdpLocalTransport, sessionId: UInt64, version: Int) -> SessionDescription {
        let setup = (offer.transportAttribute(named: "setup").flatMap(DtlsSetup.init(rawValue:)) ?? .actpass).answer
        var media: [MediaDescription] = []
        var bundle: [String] = []
        for m in offer.media {
            guard let mid = m.mid, let s = streams.first(where: { $0.mid == mid }) else {
                media.append(.rejecting(m))
                continue
            }
            let msid = s.streamId + " " + s.trackId
            let pt = s.codec.payloadType
            let rtxPt = s.codec.codec.kind == "video" ? s.rtxPayloadType.flatMap { $0 & 0x7F == pt ? nil : $0 & 0x7F } : nil
            let rtxSsrc = rtxPt == nil ? nil : s.rtxSsrc.flatMap { $0 == 0 || $0 == s.ssrc ? nil : $0 }
            var all = [s.ssrc]
            var groups: [SsrcGroup] = []
            if let rtxSsrc {
                all.append(rtxSsrc)
                groups.append(SsrcGroup(semantics: "FID", ssrcs: all))
            }
            var ssrcs: [SsrcLine] = []
            for ssrc in all {
                ssrcs += [SsrcLine(ssrc: ssrc, attribute: "cname", value: s.cname),
                          SsrcLine(ssrc: ssrc, attribute: "msid", value: msid)]
            }
            media.append(RtpMediaSection(
                kind: m.kind, mid: mid, transport: local, setup: setup, extensions: s.extensions,
                direction: .sendonly, msid: msid, reducedSizeRtcp: m.attributes.contains(named: "rtcp-rsize"),
                codec: s.codec,
                // An answer may only keep feedback the offer has (RFC 4585 4.2).
                feedback: feedback(for: s.codec.codec).filter { s.codec.feedback.contains($0) },
                rtxPayloadType: rtxSsrc == nil ? nil : rtxPt, ssrcGroups: groups, ssrcs: ssrcs,
                includesCandidates: bundle.isEmpty).media)
            bundle.append(mid)
        }
        return SessionDescription(username: username, sessionName: username, sessionId: sessionId, version: version,
                                  bundle: bundle, iceLite: local.iceLite, media: media)
    }
}
