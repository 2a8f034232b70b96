internal import MinatoTransport

extension LocalSFURoomMember {
    /// Load generators only (`minato-bench capacity`): the kernel drops the RTP arriving on this
    /// member's receiving connection from now on (STUN, DTLS and RTCP still arrive, so the
    /// connection stays up and the server keeps sending). False when the member has no
    /// receiving connection with a selected UDP pair yet.
    @_spi(Benchmark) public func dropIncomingRtpInKernel() async throws -> Bool {
        let media = self.media
        return try await worker.perform { _ in media.value.recv?.dropIncomingRtpInKernel() ?? false }
    }
}
