internal import MinatoWire
internal import MinatoMedia
internal import MinatoTransport

/// The codec a publication carries, as negotiated with its publisher; subscribers are offered
/// exactly this codec (PROTOCOL.md "Codecs"). Every field is validated (`ForwardableCodec`):
/// the name is Minato's own spelling, the clock rate the codec's, and `fmtp` rebuilt from safe
/// `key=value` tokens, so it can be written into other members' SDP as is.
struct NegotiatedCodec: Sendable, Equatable {
    var payloadType: UInt8
    var name: String          // "opus", "VP8", "VP9", "H264", "AV1"
    /// 48000 (opus) or 90000 (video); goes to the engine without conversion.
    var clockRate: UInt32
    var channels: Int?
    var fmtp: String?
    var keyFrameRequest: KeyFrameRequestMethod
    var mimeType: String { (name.lowercased() == "opus" ? "audio/" : "video/") + name }
    var videoCodec: VideoCodecKind {
        switch name.lowercased() {
        case "vp8": return .vp8
        case "vp9": return .vp9
        case "h264": return .h264
        case "av1", "av1x": return .av1
        default: return .other
        }
    }
}

/// Header extensions Minato understands; the id is the one Minato uses in its own offers.
enum HeaderExtension: CaseIterable {
    case audioLevel, absSendTime, videoOrientation, timeOffset, mid
    var uri: String {
        switch self {
        case .audioLevel: return "urn:ietf:params:rtp-hdrext:ssrc-audio-level"
        case .absSendTime: return "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
        case .videoOrientation: return "urn:3gpp:video-orientation"
        case .timeOffset: return "urn:ietf:params:rtp-hdrext:toffset"
        case .mid: return "urn:ietf:params:rtp-hdrext:sdes:mid"
        }
    }
    /// Id in server offers to subscribers; nil = not forwarded (MID is per connection).
    var subscriberId: UInt8? {
        switch self {
        case .audioLevel: return 1
        case .absSendTime: return 2
        case .videoOrientation: return 3
        case .timeOffset: return 4
        case .mid: return nil
        }
    }
    func applies(to kind: String) -> Bool {
        switch self {
        case .audioLevel: return kind == "audio"
        case .videoOrientation, .timeOffset: return kind == "video"
        case .absSendTime, .mid: return true
        }
    }
    init?(uri: String) {
        guard let e = HeaderExtension.allCases.first(where: { $0.uri == uri }) else { return nil }
        self = e
    }
}

/// What a publisher's m-line says about the stream it sends.
struct PublishedStream: Sendable {
    var mid: String
    var kind: String
    var codec: NegotiatedCodec
    var ssrc: UInt32
    var rtxSsrc: UInt32?
    /// Publisher extension id -> Minato's subscriber id (for the engine's remap table).
    var extensionIds: [(publisher: UInt8, subscriber: UInt8)]
}

enum SdpNegotiation {
    static func parse(_ sdp: String) throws(RoomError) -> SessionDescription {
        do { return try SessionDescription.parse(sdp) } catch {
            throw .invalidSdp("Line \(error.line) '\(error.text)': \(error.reason).")
        }
    }

    /// ICE credentials, fingerprint, setup and candidates of a BUNDLEd description.
    static func remoteTransport(of sd: SessionDescription) throws(RoomError) -> RemoteTransportParameters {
        guard let first = sd.media.first(where: { $0.port != 0 }) ?? sd.media.first else {
            throw .invalidSdp("The description has no m= section.")
        }
        func session(_ name: String) -> String? { sd.attributes.first { $0.name == name }?.value }
        guard let ufrag = first.iceUfrag ?? session("ice-ufrag"), let pwd = first.icePwd ?? session("ice-pwd") else {
            throw .invalidSdp("a=ice-ufrag and a=ice-pwd are required (first m= section or session level).")
        }
        let fp: (String, String)
        if let f = first.fingerprint { fp = (f.algorithm, f.value) }
        else if let s = session("fingerprint") {
            let parts = s.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw .invalidSdp("Line 'a=fingerprint:\(s)': expected '<hash> <hex>'.") }
            fp = (parts[0], parts[1])
        } else {
            throw .invalidSdp("a=fingerprint is required: DTLS-SRTP needs the peer's certificate fingerprint.")
        }
        let setup = first.setup ?? session("setup") ?? "actpass"
        guard ["actpass", "active", "passive"].contains(setup) else {
            throw .invalidSdp("Line 'a=setup:\(setup)': expected actpass, active or passive.")
        }
        var candidates: [String] = []
        var end = false
        for m in sd.media {
            candidates += m.candidates
            end = end || m.endOfCandidates
        }
        return RemoteTransportParameters(iceUfrag: ufrag, icePwd: pwd, fingerprintAlgorithm: fp.0, fingerprint: fp.1,
                                         setup: setup, candidates: candidates, endOfCandidates: end)
    }

    /// The first codec of the m-line (in the offer's preference order) that Minato forwards
    /// and whose rtpmap is valid for it (`MediaDescription.forwardableCodecs`).
    static func chooseCodec(_ m: MediaDescription) -> NegotiatedCodec? {
        guard let c = m.forwardableCodecs.first else { return nil }
        let fb = c.feedback
        let method: KeyFrameRequestMethod = c.codec == .opus ? .none
            : (fb.contains("nack pli") || !fb.contains("ccm fir")) ? .pli : .fir
        return NegotiatedCodec(payloadType: c.payloadType, name: c.codec.encodingName, clockRate: c.clockRate,
                               channels: c.channels.map(Int.init), fmtp: c.parameters.text, keyFrameRequest: method)
    }

    /// The m-line's mid, required on every m-line Minato accepts. Its syntax (1–32 characters
    /// of `A-Z a-z 0-9 _ -`) is checked by the parser already; checked again here because the
    /// value is written into other members' SDP.
    static func requiredMid(_ m: MediaDescription) throws(RoomError) -> String {
        guard let mid = m.mid, isValidMid(mid) else {
            throw .invalidSdp("Every accepted m= section needs an a=mid of 1-32 characters A-Z a-z 0-9 _ -.")
        }
        return mid
    }

    /// The stream a publisher's m-line announces (its primary SSRC and RTX SSRC).
    static func publishedStream(_ m: MediaDescription) throws(RoomError) -> PublishedStream {
        let mid = try requiredMid(m)
        guard let codec = chooseCodec(m) else {
            throw .invalidParameter("m-line '\(mid)' offers no codec Minato forwards (audio: opus; video: VP8, VP9, H264 packetization-mode=1, AV1).")
        }
        let fid = m.ssrcGroups.first { $0.semantics == "FID" }
        let all = m.ssrcs.map(\.ssrc)
        guard let primary = fid?.ssrcs.first ?? all.first else {
            throw .invalidParameter("m-line '\(mid)' has no a=ssrc line; Minato needs the publisher's SSRC in its offer.")
        }
        var ids: [(UInt8, UInt8)] = []
        for e in m.extMaps {
            if let known = HeaderExtension(uri: e.uri), let sub = known.subscriberId { ids.append((e.id, sub)) }
        }
        return PublishedStream(mid: mid, kind: m.kind, codec: codec, ssrc: primary,
                               rtxSsrc: fid.flatMap { $0.ssrcs.count > 1 ? $0.ssrcs[1] : nil }, extensionIds: ids)
    }

    static func sessionHeader(version: Int, sessionId: UInt64, mids: [String], iceLite: Bool) -> [String] {
        var lines = ["v=0", "o=minato \(sessionId) \(version) IN IP4 127.0.0.1", "s=minato", "t=0 0"]
        if !mids.isEmpty { lines.append("a=group:BUNDLE " + mids.joined(separator: " ")) }
        if iceLite { lines.append("a=ice-lite") }
        lines.append("a=msid-semantic: WMS *")
        return lines
    }

    static func transportLines(_ local: TransportDescription, setup: String) -> [String] {
        ["c=IN IP4 127.0.0.1", "a=ice-ufrag:\(local.iceUfrag)", "a=ice-pwd:\(local.icePwd)",
         "a=fingerprint:\(local.fingerprint)", "a=setup:\(setup)"]
    }

    static func codecLines(_ codec: NegotiatedCodec, kind: String) -> [String] {
        var lines = ["a=rtpmap:\(codec.payloadType) \(codec.name)/\(codec.clockRate)" + (codec.channels.map { "/\($0)" } ?? "")]
        if let f = codec.fmtp { lines.append("a=fmtp:\(codec.payloadType) \(f)") }
        if kind == "video" {
            lines.append("a=rtcp-fb:\(codec.payloadType) nack pli")
            lines.append("a=rtcp-fb:\(codec.payloadType) ccm fir")
        }
        return lines
    }

    /// The server's offer for a member's receive connection: a session header BUNDLEing every
    /// slot's mid (ice-lite when the local agent is lite), then each slot's m-section in order,
    /// with the local candidates and end-of-candidates in the first m-section only.
    static func receiveOffer(slots: [ReceiveSlot], local: TransportDescription, version: Int, sessionId: UInt64) -> String {
        var lines = sessionHeader(version: version, sessionId: sessionId, mids: slots.map(\.mid), iceLite: local.iceLite)
        for (i, slot) in slots.enumerated() { lines += slot.lines(local: local, candidates: i == 0) }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// Answers a client's send-connection offer: every audio/video m-line the client sends is
    /// accepted recvonly with its first forwardable codec; anything else is rejected (port 0).
    static func answerPublisherOffer(_ offer: SessionDescription, local: TransportDescription,
                                     version: Int, sessionId: UInt64) throws(RoomError) -> String {
        let remoteSetup = (offer.media.first?.setup) ?? offer.attributes.first { $0.name == "setup" }?.value ?? "actpass"
        let ourSetup = remoteSetup == "passive" ? "active" : "passive"
        var body: [String] = []
        var bundle: [String] = []
        var first = true
        for m in offer.media {
            if let mid = m.mid, !isValidMid(mid) { _ = try requiredMid(m) }
            let mid = m.mid ?? ""
            let sending = m.direction == .sendonly || m.direction == .sendrecv
            let codec = (m.kind == "audio" || m.kind == "video") && m.port != 0 ? chooseCodec(m) : nil
            guard let codec else {
                // Rejected m-line (data channels, unsupported codecs, rejected by the offerer).
                body.append("m=\(m.kind) 0 \(m.proto) \(m.formats.first ?? "0")")
                body.append("c=IN IP4 127.0.0.1")
                if !mid.isEmpty { body.append("a=mid:\(mid)") }
                body.append("a=inactive")
                continue
            }
            _ = try requiredMid(m)
            bundle.append(mid)
            body.append("m=\(m.kind) 9 UDP/TLS/RTP/SAVPF \(codec.payloadType)")
            body += transportLines(local, setup: ourSetup)
            body.append("a=mid:\(mid)")
            for e in m.extMaps where HeaderExtension(uri: e.uri).map({ $0.applies(to: m.kind) }) == true {
                body.append("a=extmap:\(e.id) \(e.uri)")
            }
            body.append(sending ? "a=recvonly" : "a=inactive")
            body.append("a=rtcp-mux")
            body += codecLines(codec, kind: m.kind)
            if first {
                body += local.candidates.map { "a=\($0)" }
                body.append("a=end-of-candidates")
                first = false
            }
        }
        let lines = sessionHeader(version: version, sessionId: sessionId, mids: bundle, iceLite: local.iceLite) + body
        return lines.joined(separator: "\r\n") + "\r\n"
    }
}

/// One m-line of a member's receive connection (server-offered, never reused).
struct ReceiveSlot: Sendable {
    var mid: String
    var kind: String
    var codec: NegotiatedCodec
    var subscriptionId: String?
    var ssrc: UInt32
    var streamId: String
    var trackId: String
    var cname: String

    func lines(local: TransportDescription, candidates: Bool) -> [String] {
        var l = ["m=\(kind) 9 UDP/TLS/RTP/SAVPF \(codec.payloadType)"]
        l += SdpNegotiation.transportLines(local, setup: "actpass")
        l.append("a=mid:\(mid)")
        for e in HeaderExtension.allCases where e.applies(to: kind) {
            if let id = e.subscriberId { l.append("a=extmap:\(id) \(e.uri)") }
        }
        l.append(subscriptionId == nil ? "a=inactive" : "a=sendonly")
        if subscriptionId != nil { l.append("a=msid:\(streamId) \(trackId)") }
        l.append("a=rtcp-mux")
        l.append("a=rtcp-rsize")
        l += SdpNegotiation.codecLines(codec, kind: kind)
        if subscriptionId != nil {
            l.append("a=ssrc:\(ssrc) cname:\(cname)")
            l.append("a=ssrc:\(ssrc) msid:\(streamId) \(trackId)")
        }
        if candidates {
            l += local.candidates.map { "a=\($0)" }
            l.append("a=end-of-candidates")
        }
        return l
    }
}
