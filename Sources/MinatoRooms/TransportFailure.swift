internal import MinatoTransport

/// The `kind` label of `minato_transport_failures_total` for a transport a worker closed:
/// "ice", "dtls", "srtp", "connect_timeout" or "timeout" (`TransportCloseReason.metricName`).
func transportFailureKind(_ reason: TransportCloseReason) -> String { reason.metricName }
