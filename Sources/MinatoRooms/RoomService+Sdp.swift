internal import MinatoWire

/// Clients' SDP is read off the room actor: the actor owns every room, so a large or hostile
/// description must not hold up other rooms' requests while it is parsed. Parsing is a pure
/// function of the text and the configuration (`SdpNegotiation.parse`, bounded by
/// `server.maxSdpBytes` and `media.sdp.*`, linear in the text's length).
extension RoomService {
    /// Parses a client's offer (or, with `answer`, a subscriber's answer) on a task of its own
    /// while the actor serves other requests, and returns the description to the caller. The
    /// calling request goes on after the `await` like after any other: whatever it read before
    /// may have changed (callers check membership again before they commit, as they do after
    /// every worker call).
    func parseClientSdp(_ text: String, answer: Bool = false) async throws(RoomError) -> SessionDescription {
        let limits = configuration
        // A detached task, not a nonisolated function: it leaves the actor whatever the
        // module's default for nonisolated async functions is.
        let parsed = await Task.detached {
            Result { () throws(RoomError) -> SessionDescription in try SdpNegotiation.parse(text, limits: limits, answer: answer) }
        }.value
        return try parsed.get()
    }
}

extension RoomConfiguration {
    /// The most m= sections a subscriber's answer may have: it mirrors the server's offer, which
    /// holds at most `maxSubscriptionsPerMember` m-sections of each kind (`ReceiveSlots`), so
    /// twice that, or `maxSdpMediaSections` when that is more.
    var maxAnswerMediaSections: Int { max(maxSdpMediaSections, 2 * maxSubscriptionsPerMember) }
}
