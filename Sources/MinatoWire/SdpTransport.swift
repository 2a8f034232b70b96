// The transport half of a WebRTC description (ICE credentials, DTLS fingerprint and role,
// candidates): read from a peer's SDP and written into ours. One implementation for the
// server and the client SDK. Control path; plain Sendable values.

/// `a=setup` (RFC 4145 §4, RFC 8842 §5): which side opens the DTLS association.
public enum DtlsSetup: String, Sendable, CaseIterable, Equatable {
    case actpass, active, passive

    /// What an answerer writes for an offer with this value (RFC 8842 §5.3: an answer to
    /// `actpass` or `active` is `passive` here, since Minato waits for the peer's
    /// ClientHello; an answer to `passive` must be `active`).
    public var answer: DtlsSetup { self == .passive ? .active : .passive }
}

/// Why a peer's description cannot be negotiated (its transport, or an m-section Minato would
/// accept). Stable cases; `description` is a sentence a person can act on (the server puts it
/// in its `invalidSdp` error).
public enum SdpNegotiationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No m= section at all.
    case noMediaSection
    /// Neither the transport's m-section nor the session level has `a=ice-ufrag` and `a=ice-pwd`.
    case missingIceCredentials
    /// Neither the transport's m-section nor the session level has a well-formed `a=fingerprint`.
    case missingFingerprint
    /// `a=setup` is not actpass, active or passive (the value as sent).
    case badSetup(String)
    /// An m-section Minato would accept has no `a=mid`, or one outside 1-32 characters of
    /// `A-Z a-z 0-9 _ -` (a BUNDLEd m-section must have one; its value is written into other
    /// peers' SDP).
    case missingMid

    public var description: String {
        switch self {
        case .noMediaSection: return "The description has no m= section."
        case .missingIceCredentials:
            return "a=ice-ufrag and a=ice-pwd are required (in the first bundled m= section or at session level)."
        case .missingFingerprint: return "a=fingerprint is required: DTLS-SRTP needs the peer's certificate fingerprint."
        case .badSetup(let value): return "Line 'a=setup:\(value)': expected actpass, active or passive."
        case .missingMid: return "Every accepted m= section needs an a=mid of 1-32 characters A-Z a-z 0-9 _ -."
        }
    }
}

/// The transport a peer describes for a BUNDLEd connection (RFC 8843): one ICE ufrag/pwd, one
/// certificate fingerprint, one DTLS role, and its candidates.
///
/// Where each value comes from (`SessionDescription.transport()`):
/// - The transport m-section is the BUNDLE-tagged one: the m-section whose mid is the first
///   of `a=group:BUNDLE` (RFC 8843 §7.2.1 / §7.3.1: the offerer- or answerer-tagged
///   m-section carries the transport attributes for the whole group). Without a BUNDLE group
///   (or when its first mid names no m-section) it is the first m-section with a port other
///   than 0, else the first m-section.
/// - `a=ice-ufrag`, `a=ice-pwd`, `a=fingerprint` and `a=setup`: the transport m-section's own
///   value, else the session-level one. Media level wins because it is the more specific
///   (RFC 8839 §5.4 for ICE credentials, RFC 8122 §5 for fingerprints, RFC 8829 §5.2.1 writes
///   them per m-section). With several fingerprints the first (well-formed) one is used.
///   A missing `a=setup` is read as `actpass`.
/// - Candidates: every `a=candidate` of the m-sections that share the transport (those in the
///   BUNDLE group; without a group, those with a port other than 0), in order, duplicates
///   dropped; end-of-candidates if any of them has `a=end-of-candidates`.
public struct SdpTransport: Sendable, Equatable {
    public var iceUfrag: String
    public var icePwd: String
    public var fingerprint: Fingerprint
    public var setup: DtlsSetup
    /// `a=candidate` values without the "candidate:" prefix ("1 1 udp 2130706431 127.0.0.1 5000 typ host").
    public var candidates: [String]
    public var endOfCandidates: Bool
    /// The peer's agent is ICE-lite (session-level `a=ice-lite`).
    public var iceLite: Bool

    public init(iceUfrag: String, icePwd: String, fingerprint: Fingerprint, setup: DtlsSetup = .actpass,
                candidates: [String] = [], endOfCandidates: Bool = false, iceLite: Bool = false) {
        self.iceUfrag = iceUfrag
        self.icePwd = icePwd
        self.fingerprint = fingerprint
        self.setup = setup
        self.candidates = candidates
        self.endOfCandidates = endOfCandidates
        self.iceLite = iceLite
    }
}

extension SessionDescription {
    /// Index of the m-section that carries the transport (see `SdpTransport`), or nil without
    /// any m-section.
    public var transportMediaIndex: Int? {
        if let first = bundleGroup?.first, let i = media.firstIndex(where: { $0.mid == first }) { return i }
        return media.firstIndex { $0.port != 0 } ?? (media.isEmpty ? nil : 0)
    }

    /// The m-sections that share the transport: those named in the BUNDLE group, else those
    /// with a port other than 0.
    public var transportSharingMedia: [MediaDescription] {
        if let group = bundleGroup, transportMediaIndex.map({ media[$0].mid == group.first }) == true {
            let members = Set(group)
            return media.filter { m in m.mid.map(members.contains) ?? false }
        }
        return media.filter { $0.port != 0 }
    }

    /// The first `name` attribute of the transport m-section, else of the session level.
    public func transportAttribute(named name: String) -> String? {
        if let i = transportMediaIndex, let v = media[i].attributes.firstValue(named: name) { return v }
        return attributes.firstValue(named: name)
    }

    /// The peer's transport, by the precedence documented on `SdpTransport`.
    public func transport() throws(SdpNegotiationError) -> SdpTransport {
        guard let index = transportMediaIndex else { throw .noMediaSection }
        let m = media[index]
        guard let ufrag = m.iceUfrag ?? iceUfrag, let pwd = m.icePwd ?? icePwd else { throw .missingIceCredentials }
        guard let fingerprint = m.fingerprint ?? self.fingerprint else { throw .missingFingerprint }
        let setupText = m.setup ?? setup ?? DtlsSetup.actpass.rawValue
        guard let setup = DtlsSetup(rawValue: setupText) else { throw .badSetup(setupText) }
        var candidates: [String] = []
        var seen = Set<String>()
        var end = false
        for shared in transportSharingMedia {
            for c in shared.candidates where seen.insert(c).inserted { candidates.append(c) }
            end = end || shared.endOfCandidates
        }
        return SdpTransport(iceUfrag: ufrag, icePwd: pwd, fingerprint: fingerprint, setup: setup,
                            candidates: candidates, endOfCandidates: end, iceLite: iceLite)
    }
}

/// Our own side of a connection, as written into our SDP: ICE credentials, the certificate
/// fingerprint, the local candidates, and whether our agent is ICE-lite.
public struct SdpLocalTransport: Sendable, Equatable {
    public var iceUfrag: String
    public var icePwd: String
    /// The `a=fingerprint` value, "sha-256 AB:CD:...".
    public var fingerprint: String
    /// Whole candidate attributes as the ICE agent gives them, "candidate:1 1 UDP ... typ host".
    public var candidates: [String]
    public var iceLite: Bool

    public init(iceUfrag: String, icePwd: String, fingerprint: String, candidates: [String], iceLite: Bool = false) {
        self.iceUfrag = iceUfrag
        self.icePwd = icePwd
        self.fingerprint = fingerprint
        self.candidates = candidates
        self.iceLite = iceLite
    }

    /// `a=ice-ufrag`, `a=ice-pwd`, `a=fingerprint`, `a=setup`.
    public func attributes(setup: DtlsSetup) -> [SdpAttribute] {
        [SdpAttribute(name: "ice-ufrag", value: iceUfrag), SdpAttribute(name: "ice-pwd", value: icePwd),
         SdpAttribute(name: "fingerprint", value: fingerprint), SdpAttribute(name: "setup", value: setup.rawValue)]
    }

    /// One `a=candidate` per local candidate, then `a=end-of-candidates` (Minato gathers
    /// before it writes SDP, so its candidate list is always complete).
    public var candidateAttributes: [SdpAttribute] {
        candidates.map { SdpAttribute(line: Substring($0)) } + [SdpAttribute(name: "end-of-candidates")]
    }

    /// Address and port of the first candidate that has them, for a client's m= and c= lines
    /// (candidate fields: foundation, component, transport, priority, address, port, "typ", type).
    public var defaultAddress: (address: String, port: Int)? {
        for c in candidates {
            let f = c.sdpFields
            if f.count >= 6, let port = Int(decimal: f[5]), port <= 65535 { return (String(f[4]), port) }
        }
        return nil
    }
}
