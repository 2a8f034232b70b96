public import MinatoMedia

/// What a media worker tells the control plane (through `MediaWorker.events`).
public enum WorkerEvent: Sendable {
    /// ICE, DTLS and SRTP are up, `after` the transport was made.
    case transportConnected(TransportId, after: Duration)
    case transportClosed(TransportId, reason: TransportCloseReason)
    /// An ICE restart's new agent has a pair and took over the transport.
    case iceRestarted(TransportId)
    /// A room's speaker list changed (loudest first; at most every `rooms.speakerEventIntervalMs`).
    case activeSpeakers(RouterId, [SpeakerLevel])
    /// A reliable data subscription's transport had no room for a message
    /// (`rooms.data.maxBufferedBytes`): its channel is closed.
    case dataSubscriptionOverflow(subscriptionId: String)
    /// The peer of a transport sent data-channel input that was refused (`reason`).
    case dataChannelError(TransportId, label: String?, reason: String, detail: String)
}

public enum WorkerError: Error, CustomStringConvertible, Sendable {
    case unknownTransport(TransportId)
    case media(MediaError)
    case transport(String)
    /// libnice found no free UDP port in `media.ice.portMin...portMax` for a new transport.
    case noFreePort
    public var description: String {
        switch self {
        case .noFreePort: return "no free UDP port in the media port range"
        case .unknownTransport(let id): return "no such \(id) on this worker"
        case .media(let e): return e.description
        case .transport(let s): return s
        }
    }
}
