/// Why a media worker closed a transport on its own (reported in `WorkerEvent.transportClosed`).
/// `metricName` is a stable label for metrics; `description` is a sentence for logs and people.
public enum TransportCloseReason: Sendable, Equatable, CustomStringConvertible {
    /// ICE found no usable candidate pair (or lost it).
    case iceFailed
    /// The DTLS handshake failed or the peer ended DTLS.
    case dtlsFailed(DtlsFailure)
    /// DTLS finished but libsrtp could not be keyed from it.
    case srtpSetupFailed
    /// ICE and DTLS did not both connect within the worker's connect timeout.
    case connectTimeout(Duration)
    /// A connected transport that carried media heard nothing (no media, RTCP or ICE check)
    /// for the worker's media timeout.
    case mediaTimeout(Duration)
    /// A connected transport that never carried media heard nothing (not even an ICE consent
    /// check) for the worker's consent timeout.
    case consentTimeout(Duration)

    /// "ice", "dtls", "srtp", "connect_timeout", "timeout" or "consent_timeout".
    public var metricName: String {
        switch self {
        case .iceFailed: return "ice"
        case .dtlsFailed: return "dtls"
        case .srtpSetupFailed: return "srtp"
        case .connectTimeout: return "connect_timeout"
        case .mediaTimeout: return "timeout"
        case .consentTimeout: return "consent_timeout"
        }
    }

    public var description: String {
        switch self {
        case .iceFailed: return "ICE failed: no usable candidate pair"
        case .dtlsFailed(let f): return "DTLS failed: \(f)"
        case .srtpSetupFailed: return "the SRTP session could not be created from the DTLS keys"
        case .connectTimeout(let d): return "connect timeout: ICE and DTLS did not connect within \(secondsText(d)) s"
        case .mediaTimeout(let d): return "nothing heard (media, RTCP or ICE check) for \(secondsText(d)) s"
        case .consentTimeout(let d): return "no media and no ICE consent check for \(secondsText(d)) s"
        }
    }
}

/// How a DTLS handshake (or connection) failed.
public enum DtlsFailure: Sendable, Equatable, CustomStringConvertible {
    /// OpenSSL refused the handshake; its error queue as text.
    case handshakeFailed(String)
    /// The handshake retransmission timer gave up.
    case handshakeTimedOut
    /// The peer sent close_notify.
    case peerClosed
    case noPeerCertificate
    case noRemoteFingerprint
    case fingerprintMismatch
    case noSrtpProfile
    case keyExportFailed

    public var description: String {
        switch self {
        case .handshakeFailed(let text): return "the handshake failed (\(text))"
        case .handshakeTimedOut: return "the handshake timed out"
        case .peerClosed: return "the peer closed DTLS"
        case .noPeerCertificate: return "the peer sent no certificate"
        case .noRemoteFingerprint: return "no remote fingerprint was signalled"
        case .fingerprintMismatch: return "the peer's certificate does not match its SDP fingerprint"
        case .noSrtpProfile: return "no SRTP profile was negotiated"
        case .keyExportFailed: return "exporting SRTP keys failed"
        }
    }
}

/// Whole seconds, or seconds with one decimal ("20", "0.5").
func secondsText(_ d: Duration) -> String {
    let tenths = nanoseconds(of: d) / 100_000_000
    return tenths % 10 == 0 ? "\(tenths / 10)" : "\(tenths / 10).\(tenths % 10)"
}
