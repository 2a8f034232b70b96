public import MinatoWire
public import MinatoTransport

/// A codec a client sends, as it appears in its SDP.
public struct RtpCodec: Sendable, Equatable {
    public var mimeType: String        // "video/VP8", "audio/opus"
    public var payloadType: UInt8
    public var clockRate: Int
    public var channels: Int?
    public var fmtp: String?

    public init(mimeType: String, payloadType: UInt8, clockRate: Int, channels: Int? = nil, fmtp: String? = nil) {
        self.mimeType = mimeType; self.payloadType = payloadType; self.clockRate = clockRate
        self.channels = channels; self.fmtp = fmtp
    }

    public static let vp8 = RtpCodec(mimeType: "video/VP8", payloadType: 96, clockRate: 90_000)
    public static let opus = RtpCodec(mimeType: "audio/opus", payloadType: 111, clockRate: 48_000, channels: 2,
                                      fmtp: "minptime=10;useinbandfec=1")

    public var kind: ContentType { mimeType.lowercased().hasPrefix("audio/") ? .audio : .video }
    var encodingName: String { String(mimeType.split(separator: "/").last ?? "") }
}

/// "audio" or "video", as in SkyWay's `contentType`.
public enum ContentType: String, Sendable, Codable {
    case audio, video
}

/// One sending m-line of a client's offer.
public struct OfferedTrack: Sendable {
    public var mid: String
    public var codec: RtpCodec
    public var ssrc: UInt32
    public var cname: String
    public var active: Bool
    public init(mid: String, codec: RtpCodec, ssrc: UInt32, cname: String, active: Bool = true) {
        self.mid = mid; self.codec = codec; self.ssrc = ssrc; self.cname = cname; self.active = active
    }
}

/// A clear error for SDP a client cannot use.
public struct ClientSdpError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}

/// The SDP a client writes and reads (RFC 8829 shapes: BUNDLE, rtcp-mux, one transport).
public enum ClientSdp {
    static func sessionHeader(sessionId: UInt64, version: Int, mids: [String]) -> [String] {
        var lines = ["v=0", "o=- \(sessionId) \(version) IN IP4 127.0.0.1", "s=-", "t=0 0"]
        if !mids.isEmpty { lines.append("a=group:BUNDLE " + mids.joined(separator: " ")) }
        lines.append("a=msid-semantic: WMS *")
        return lines
    }

    static func transportLines(_ local: LocalTransportParameters, setup: String, candidates: Bool) -> [String] {
        var lines = ["a=ice-ufrag:\(local.iceUfrag)", "a=ice-pwd:\(local.icePwd)",
                     "a=fingerprint:\(local.fingerprint)", "a=setup:\(setup)"]
        if candidates {
            lines += local.candidates.map { "a=\($0)" }
            lines.append("a=end-of-candidates")
        }
        return lines
    }

    /// Port and address of our first candidate, for the m= and c= lines.
    static func defaultAddress(_ local: LocalTransportParameters) -> (port: Int, ip: String) {
        // "candidate:<foundation> <component> <transport> <priority> <ip> <port> typ host"
        for c in local.candidates {
            let f = c.split(separator: " ")
            if f.count >= 6, let port = Int(f[5]) { return (port, String(f[4])) }
        }
        return (9, "127.0.0.1")
    }

    /// An offer whose every m-line sends one track (DTLS `actpass`, candidates included).
    public static func offer(local: LocalTransportParameters, tracks: [OfferedTrack], sessionId: UInt64, version: Int) -> String {
        let (port, ip) = defaultAddress(local)
        var lines = sessionHeader(sessionId: sessionId, version: version, mids: tracks.map(\.mid))
        for (i, t) in tracks.enumerated() {
            let c = t.codec
            lines.append("m=\(c.kind.rawValue) \(port) UDP/TLS/RTP/SAVPF \(c.payloadType)")
            lines.append("c=IN IP4 \(ip)")
            lines += transportLines(local, setup: "actpass", candidates: i == 0)
            lines.append("a=mid:\(t.mid)")
            lines.append(t.active ? "a=sendonly" : "a=inactive")
            lines.append("a=rtcp-mux")
            lines.append("a=rtpmap:\(c.payloadType) \(c.encodingName)/\(c.clockRate)" + (c.channels.map { "/\($0)" } ?? ""))
            if let fmtp = c.fmtp { lines.append("a=fmtp:\(c.payloadType) \(fmtp)") }
            if c.kind == .video {
                lines.append("a=rtcp-fb:\(c.payloadType) nack pli")
                lines.append("a=rtcp-fb:\(c.payloadType) ccm fir")
            }
            lines.append("a=msid:\(t.cname) \(t.mid)")
            lines.append("a=ssrc:\(t.ssrc) cname:\(t.cname)")
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// What a receiving client learns from one m-line of a server's offer.
    public struct OfferedStream: Sendable, Equatable {
        public var mid: String
        public var kind: String
        /// The codec the sender will use (the first payload type offered), nil on a rejected m-line.
        public var codec: RtpMap?
        /// SSRCs the sender announced (`a=ssrc`), empty if none.
        public var ssrcs: [UInt32]
        /// The sender's direction: `.sendonly` for a live stream, `.inactive` for a removed one.
        public var direction: MediaDirection
        public var rejected: Bool
    }

    /// A receive-only answer to a server's offer: every sending m-line is received with its
    /// first codec, inactive lines stay inactive, m-lines we cannot take (data channels) are
    /// rejected. `dtlsRole` picks our `a=setup`: `.client` answers `active` (what browsers do),
    /// `.server` answers `passive` (the peer sends the ClientHello once ICE is up; Janus needs it
    /// to avoid dropping an early hello, see bench/JANUS-NOTES.md).
    public static func answer(to offer: SessionDescription, local: LocalTransportParameters, sessionId: UInt64,
                              version: Int, dtlsRole: DtlsRole = .client) -> (sdp: String, streams: [OfferedStream]) {
        let setup = dtlsRole == .client ? "active" : "passive"
        let (port, ip) = defaultAddress(local)
        var streams: [OfferedStream] = []
        var body: [String] = []
        var bundled: [String] = []
        var first = true
        for m in offer.media {
            let mid = m.mid ?? String(streams.count)
            let rtp = m.proto.contains("RTP") && (m.kind == "audio" || m.kind == "video")
            guard rtp, m.port != 0, let pt = m.payloadTypes.first else {
                body.append("m=\(m.kind) 0 \(m.proto) \(m.formats.first ?? "0")")
                body.append("c=IN IP4 \(ip)")
                body.append("a=mid:\(mid)")
                streams.append(OfferedStream(mid: mid, kind: m.kind, codec: nil, ssrcs: [], direction: .inactive, rejected: true))
                continue
            }
            let theirs = m.direction
            let ours: MediaDirection
            switch theirs {
            case .sendonly, .sendrecv: ours = .recvonly
            default: ours = .inactive
            }
            bundled.append(mid)
            body.append("m=\(m.kind) \(port) \(m.proto) \(pt)")
            body.append("c=IN IP4 \(ip)")
            body += transportLines(local, setup: setup, candidates: first)
            first = false
            body.append("a=mid:\(mid)")
            body.append("a=\(ours.rawValue)")
            body.append("a=rtcp-mux")
            let map = m.rtpMap(for: pt)
            if let map { body.append("a=rtpmap:\(map.attributeValue)") }
            if let fmtp = m.fmtp(for: pt) { body.append("a=fmtp:\(pt) \(fmtp)") }
            for fb in m.rtcpFeedback(for: pt) where fb == "nack pli" || fb == "ccm fir" {
                body.append("a=rtcp-fb:\(pt) \(fb)")
            }
            streams.append(OfferedStream(mid: mid, kind: m.kind, codec: map, ssrcs: m.ssrcIds,
                                         direction: theirs == .sendrecv ? .sendonly : theirs, rejected: false))
        }
        let lines = sessionHeader(sessionId: sessionId, version: version, mids: bundled) + body
        return (lines.joined(separator: "\r\n") + "\r\n", streams)
    }

    /// The remote transport (ICE credentials, fingerprint, setup, candidates) of a BUNDLEd SDP:
    /// session-level values, else those of the first non-rejected m-line.
    public static func remoteTransport(of sdp: SessionDescription) throws(ClientSdpError) -> RemoteTransportParameters {
        let m = sdp.media.first { $0.port != 0 } ?? sdp.media.first
        guard let ufrag = sdp.iceUfrag ?? m?.iceUfrag, let pwd = sdp.icePwd ?? m?.icePwd else {
            throw ClientSdpError("the remote SDP has no a=ice-ufrag / a=ice-pwd")
        }
        guard let fp = sdp.fingerprint ?? m?.fingerprint else {
            throw ClientSdpError("the remote SDP has no a=fingerprint")
        }
        let setup = sdp.setup ?? m?.setup ?? "actpass"
        var candidates: [String] = []
        var end = false
        for media in sdp.media {
            candidates += media.candidates
            end = end || media.endOfCandidates
        }
        return RemoteTransportParameters(iceUfrag: ufrag, icePwd: pwd, fingerprintAlgorithm: fp.algorithm,
                                         fingerprint: fp.value, setup: setup, candidates: candidates,
                                         endOfCandidates: end || !candidates.isEmpty)
    }

    /// Our DTLS role given the remote's `a=setup` in an answer to our `actpass` offer.
    public static func dtlsRole(answeringOurOffer remoteSetup: String) -> DtlsRole {
        remoteSetup == "active" ? .server : .client
    }
}
