// Building the descriptions Minato writes (server and client SDK) as values, to be turned into
// text by `SessionDescription.serialize()`. Every text field written here is Minato's own
// (credentials, ids, codec-map names) or a value the parser already checked (mids, rebuilt
// fmtp tokens). Control path; plain Sendable values.

extension SessionDescription {
    /// The session part of a description Minato writes: `v=0`, `o=<username> <sessionId>
    /// <version> IN IP4 127.0.0.1`, `s=<sessionName>`, `t=0 0`, `a=group:BUNDLE <mids>` (when
    /// there are any), `a=ice-lite` (for an ICE-lite agent), `a=msid-semantic: WMS *`.
    public init(username: String, sessionName: String, sessionId: UInt64, version: Int, bundle mids: [String],
                iceLite: Bool, media: [MediaDescription] = []) {
        var attributes: [SdpAttribute] = []
        if !mids.isEmpty { attributes.append(SdpAttribute(name: "group", value: (["BUNDLE"] + mids).joined(separator: " "))) }
        if iceLite { attributes.append(SdpAttribute(name: "ice-lite")) }
        attributes.append(SdpAttribute(name: "msid-semantic", value: " WMS *"))
        self.init(origin: SdpOrigin(username: username, sessionId: String(sessionId), sessionVersion: String(version),
                                    address: "127.0.0.1"),
                  sessionName: sessionName, timing: "0 0", attributes: attributes, media: media)
    }
}

extension MediaDescription {
    /// An answer's rejection of `offered` (RFC 3264 §6, RFC 8829 §5.3.1): port 0, the offered
    /// protocol and first format, `c=IN IP4 <address>`, the offered mid (if any), `a=inactive`.
    public static func rejecting(_ offered: MediaDescription, address: String = "127.0.0.1") -> MediaDescription {
        var m = MediaDescription(kind: offered.kind, port: 0, proto: offered.proto, formats: [offered.formats.first ?? "0"],
                                 connection: "IN IP4 " + address)
        if let mid = offered.mid { m.attributes.append(SdpAttribute(name: "mid", value: mid)) }
        m.attributes.append(SdpAttribute(name: MediaDirection.inactive.rawValue))
        return m
    }
}

/// One RTP m-section of a BUNDLEd, rtcp-muxed WebRTC connection with one codec, as Minato
/// writes it (server answers and offers, client offers and answers). `media` lays the lines
/// out in the order browsers use:
///
///     m=<kind> <port> UDP/TLS/RTP/SAVPF <pt>
///     c=IN IP4 <address>
///     a=ice-ufrag / a=ice-pwd / a=fingerprint / a=setup
///     a=mid
///     a=extmap ...
///     a=<direction>
///     a=msid (when set)
///     a=rtcp-mux, a=rtcp-rsize (when set)
///     a=rtpmap, a=fmtp (RED, when set), a=rtpmap, a=fmtp, a=rtcp-fb ... (the codec),
///     a=rtpmap, a=fmtp (RTX, when set)
///     a=ssrc-group ..., a=ssrc ...
///     a=candidate ..., a=end-of-candidates (when `includesCandidates`)
public struct RtpMediaSection: Sendable {
    /// "audio" or "video".
    public var kind: String
    public var port: Int
    /// The IPv4 address of the `c=` line.
    public var address: String
    public var mid: String
    public var transport: SdpLocalTransport
    public var setup: DtlsSetup
    public var extensions: [ExtMap]
    public var direction: MediaDirection
    /// `a=msid` value, "<stream id> <track id>".
    public var msid: String?
    public var reducedSizeRtcp: Bool
    public var codec: ForwardableCodec
    /// The `a=rtcp-fb` values written for the codec (not `codec.feedback`, which is what a
    /// peer offered).
    public var feedback: [String]
    /// RTX (RFC 4588) beside a video codec: this payload type with `apt=<codec>`, listed after
    /// the codec on the m= line. Ignored for audio or when equal to the codec's payload type.
    public var rtxPayloadType: UInt8?
    /// RED (RFC 2198) around opus: this payload type with fmtp `<opus>/<opus>`, listed FIRST
    /// on the m= line (Chromium sends RED only when it is the first negotiated codec).
    /// Ignored for other codecs or when equal to the codec's payload type.
    public var redPayloadType: UInt8?
    /// `a=ssrc-group` lines (e.g. `FID <media> <rtx>`), written before the `a=ssrc` lines.
    public var ssrcGroups: [SsrcGroup]
    public var ssrcs: [SsrcLine]
    /// Candidates and end-of-candidates go into the first m-section of a BUNDLE group only.
    public var includesCandidates: Bool
    /// Simulcast layers received (an answer to a simulcast sender): `a=rid:<id> recv` for each
    /// and `a=simulcast:recv <id>;<id>…` in this order. Empty: no simulcast.
    public var receivedRids: [String]

    public init(kind: String, port: Int = 9, address: String = "127.0.0.1", mid: String, transport: SdpLocalTransport,
                setup: DtlsSetup, extensions: [ExtMap] = [], direction: MediaDirection, msid: String? = nil,
                reducedSizeRtcp: Bool = false, codec: ForwardableCodec, feedback: [String], rtxPayloadType: UInt8? = nil,
                redPayloadType: UInt8? = nil, ssrcGroups: [SsrcGroup] = [], ssrcs: [SsrcLine] = [], includesCandidates: Bool,
                receivedRids: [String] = []) {
        self.receivedRids = receivedRids
        self.kind = kind
        self.port = port
        self.address = address
        self.mid = mid
        self.transport = transport
        self.setup = setup
        self.extensions = extensions
        self.direction = direction
        self.msid = msid
        self.reducedSizeRtcp = reducedSizeRtcp
        self.codec = codec
        self.feedback = feedback
        self.rtxPayloadType = rtxPayloadType
        self.redPayloadType = redPayloadType
        self.ssrcGroups = ssrcGroups
        self.ssrcs = ssrcs
        self.includesCandidates = includesCandidates
    }

    public var media: MediaDescription {
        var a = transport.attributes(setup: setup)
        a.append(SdpAttribute(name: "mid", value: mid))
        for e in extensions { a.append(SdpAttribute(name: "extmap", value: e.attributeValue)) }
        a.append(SdpAttribute(name: direction.rawValue))
        if !receivedRids.isEmpty {
            for rid in receivedRids { a.append(SdpAttribute(name: "rid", value: rid + " recv")) }
            a.append(SdpAttribute(name: "simulcast", value: "recv " + receivedRids.joined(separator: ";")))
        }
        if let msid { a.append(SdpAttribute(name: "msid", value: msid)) }
        a.append(SdpAttribute(name: "rtcp-mux"))
        if reducedSizeRtcp { a.append(SdpAttribute(name: "rtcp-rsize")) }
        let pt = codec.payloadType
        let red = codec.codec == .opus ? Self.other(redPayloadType, than: pt) : nil
        let rtx = codec.codec.kind == "video" ? Self.other(rtxPayloadType, than: pt) : nil
        if let red { a += RtxRedAttributes.red(red, wrapping: pt) }
        a += codec.attributes(feedback: feedback)
        if let rtx { a += RtxRedAttributes.rtx(rtx, associatedWith: pt) }
        for g in ssrcGroups { a.append(SdpAttribute(name: "ssrc-group", value: g.attributeValue)) }
        for s in ssrcs { a.append(SdpAttribute(name: "ssrc", value: s.attributeValue)) }
        if includesCandidates { a += transport.candidateAttributes }
        let formats = (red.map { [$0] } ?? []) + [pt] + (rtx.map { [$0] } ?? [])
        return MediaDescription(kind: kind, port: port, formats: formats.map { String($0) },
                                connection: "IN IP4 " + address, attributes: a)
    }

    /// `pt` kept to 0...127, or nil when absent or the same as `codec`.
    private static func other(_ pt: UInt8?, than codec: UInt8) -> UInt8? {
        guard let pt, pt & 0x7F != codec else { return nil }
        return pt & 0x7F
    }
}
