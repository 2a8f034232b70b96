internal import Hummingbird
internal import NIOCore

/// The request context of the HTTP routes (`/v1`, WHIP/WHEP, `/healthz`, …): Hummingbird's,
/// plus the client's address (WHIP/WHEP limit new sessions per address). A value per request.
struct MinatoRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// The client's IP address as text ("" when unknown).
    var clientAddress: String { remoteAddress?.ipAddress ?? "" }
}
