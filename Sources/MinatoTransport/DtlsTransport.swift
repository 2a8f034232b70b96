internal import COpenSSL
internal import CMinatoShims

/// DTLS 1.2 (OpenSSL) over memory: received datagrams are written into a memory read BIO,
/// and every flight OpenSSL writes is queued as one datagram for the owner to take with
/// `pollDatagram` and send however it sends (ICE, or memory in tests). Sans-IO; owns its
/// `SSL*`. Handshake, alerts and application records (SCTP for data channels), never media. The retransmission timer is OpenSSL's
/// (on the real clock): `timeoutMilliseconds` says when it is due, `handleTimeout` runs it.
final class DtlsTransport {
    enum Role: Sendable { case client, server }
    enum State: Equatable { case new, connecting, connected, failed(DtlsFailure), closed }
    enum Outcome { case none, connected(SrtpProfile, local: [UInt8], remote: [UInt8]), failed(DtlsFailure) }

    private let ssl: OpaquePointer
    private let readBio: OpaquePointer
    private(set) var state: State = .new
    private(set) var role: Role = .server
    /// Remote fingerprint from SDP: algorithm and colon hex.
    var remoteFingerprint: (algorithm: String, value: String)?
    /// Datagrams written by OpenSSL and not yet taken by `pollDatagram`, oldest first.
    private var outgoing: [[UInt8]] = []
    private var outgoingHead = 0

    /// `srtpProfiles` (OpenSSL names, colon separated) narrows the context's SRTP profile list
    /// for this connection (a client that must offer one profile only).
    /// `retransmitMicroseconds` replaces OpenSSL's retransmission schedule (1 s doubling to 60 s)
    /// by a constant one (tests, which wait for it on the real clock).
    init(runtime: CryptoRuntime, srtpProfiles: String? = nil, retransmitMicroseconds: UInt32? = nil) throws {
        guard let ssl = SSL_new(runtime.context) else { throw CryptoRuntime.Failure.openssl("SSL_new") }
        if let srtpProfiles, SSL_set_tlsext_use_srtp(ssl, srtpProfiles) != 0 {
            SSL_free(ssl)
            throw CryptoRuntime.Failure.openssl("unknown SRTP profile list '\(srtpProfiles)'")
        }
        guard let rbio = BIO_new(BIO_s_mem()), let wbio = BIO_new(runtime.bioMethod) else {
            SSL_free(ssl)
            throw CryptoRuntime.Failure.openssl("BIO_new")
        }
        minato_bio_mem_retry_when_empty(rbio)
        self.ssl = ssl
        self.readBio = rbio
        BIO_set_data(wbio, Unmanaged.passUnretained(self).toOpaque())
        SSL_set_bio(ssl, rbio, wbio)  // ssl owns both BIOs now
        minato_ssl_set_mtu(ssl, 1200)
        if let retransmitMicroseconds { minato_dtls_fixed_timeout(ssl, retransmitMicroseconds) }
    }

    deinit { SSL_free(ssl) }

    /// Called by the write BIO with each flight OpenSSL writes.
    func emit(_ datagram: UnsafeRawBufferPointer) { outgoing.append(Array(datagram)) }

    /// The next datagram to send to the peer, oldest first; nil when none is waiting.
    func pollDatagram() -> [UInt8]? {
        guard outgoingHead < outgoing.count else { return nil }
        let d = outgoing[outgoingHead]
        outgoingHead += 1
        if outgoingHead == outgoing.count { outgoing.removeAll(keepingCapacity: true); outgoingHead = 0 }
        return d
    }

    /// Starts the handshake in the given role (a client sends its ClientHello now).
    func start(role: Role) -> Outcome {
        guard state == .new else { return .none }
        self.role = role
        state = .connecting
        if role == .client { SSL_set_connect_state(ssl) } else { SSL_set_accept_state(ssl) }
        return advance()
    }

    /// Feeds one received DTLS datagram.
    func receive(_ datagram: UnsafeRawBufferPointer) -> Outcome {
        guard let base = datagram.baseAddress, datagram.count > 0 else { return .none }
        switch state {
        case .new:
            // A client's hello arrived before we were told our role: we are the server.
            state = .connecting
            role = .server
            SSL_set_accept_state(ssl)
        case .failed, .closed: return .none
        case .connecting, .connected: break
        }
        BIO_write(readBio, base, Int32(clamping: datagram.count))
        if state == .connected { return readApplicationData() }
        return advance()
    }

    /// Where DTLS application records go once connected (SCTP, RFC 8261): each record's bytes,
    /// borrowed for the call. Nil: they are read and dropped (`applicationRecordsDropped`).
    var applicationData: ((UnsafeRawBufferPointer) -> Void)?
    private(set) var applicationRecordsDropped: UInt64 = 0
    private(set) var applicationRecordsRead: UInt64 = 0
    /// One record's worth of plaintext (DTLS records are at most 2^14 bytes plus expansion).
    private var readBuffer: [UInt8] = []

    /// Reads every application record waiting after a datagram (alerts and retransmitted
    /// handshake messages are consumed by OpenSSL on the way).
    private func readApplicationData() -> Outcome {
        if readBuffer.isEmpty { readBuffer = [UInt8](repeating: 0, count: 18 * 1024) }
        while true {
            let n = readBuffer.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            if n > 0 {
                applicationRecordsRead &+= 1
                if let sink = applicationData {
                    readBuffer.withUnsafeBytes { sink(UnsafeRawBufferPointer(rebasing: $0[0..<Int(n)])) }
                } else {
                    applicationRecordsDropped &+= 1
                }
                continue
            }
            let err = SSL_get_error(ssl, n)
            if err == SSL_ERROR_ZERO_RETURN { state = .closed; return .failed(.peerClosed) }
            ERR_clear_error()
            return .none
        }
    }

    /// Sends `bytes` as one DTLS application record (an SCTP packet); false when not connected
    /// or OpenSSL refused it. The datagram waits in `pollDatagram`.
    func writeApplicationData(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard state == .connected, let base = bytes.baseAddress, bytes.count > 0 else { return false }
        let n = SSL_write(ssl, base, Int32(clamping: bytes.count))
        if n <= 0 { ERR_clear_error(); return false }
        return true
    }

    /// Milliseconds until the handshake retransmission timer fires, or nil.
    var timeoutMilliseconds: Int? {
        guard state == .connecting else { return nil }
        let ms = minato_dtls_timeout_ms(ssl)
        return ms < 0 ? nil : ms
    }

    /// Drives the retransmission timer; call when `timeoutMilliseconds` reached 0.
    func handleTimeout() -> Outcome {
        guard state == .connecting else { return .none }
        if minato_dtls_handle_timeout(ssl) < 0 {
            ERR_clear_error()
            return fail(.handshakeTimedOut)
        }
        return .none
    }

    func close() {
        if state == .connected { SSL_shutdown(ssl) }
        state = .closed
    }

    private func fail(_ failure: DtlsFailure) -> Outcome {
        state = .failed(failure)
        return .failed(failure)
    }

    private func advance() -> Outcome {
        let rc = SSL_do_handshake(ssl)
        if rc == 1 { return finish() }
        let err = SSL_get_error(ssl, rc)
        if err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE { return .none }
        // Reading an empty BIO after the retransmission timer expired retransmits too, and
        // can give up there: the same failure as in `handleTimeout`.
        if minato_ssl_error_is_read_timeout() != 0 { ERR_clear_error(); return fail(.handshakeTimedOut) }
        return fail(.handshakeFailed(Self.errorQueueText()))
    }

    private func finish() -> Outcome {
        guard let peer = SSL_get1_peer_certificate(ssl) else {
            return fail(.noPeerCertificate)
        }
        defer { X509_free(peer) }
        guard let expected = remoteFingerprint else {
            return fail(.noRemoteFingerprint)
        }
        guard let actual = CryptoRuntime.digest(of: peer, algorithm: expected.algorithm),
              actual.caseInsensitiveCompare(expected.value) else {
            return fail(.fingerprintMismatch)
        }
        guard let profilePtr = SSL_get_selected_srtp_profile(ssl),
              let profile = SrtpProfile(opensslId: UInt(profilePtr.pointee.id)) else {
            return fail(.noSrtpProfile)
        }
        let keyLen = profile.keyLength, saltLen = profile.saltLength
        var material = [UInt8](repeating: 0, count: 2 * (keyLen + saltLen))
        let label = "EXTRACTOR-dtls_srtp"
        let ok = SSL_export_keying_material(ssl, &material, material.count, label, label.utf8.count, nil, 0, 0)
        guard ok == 1 else {
            return fail(.keyExportFailed)
        }
        let clientKey = material[0..<keyLen]
        let serverKey = material[keyLen..<2 * keyLen]
        let clientSalt = material[2 * keyLen..<2 * keyLen + saltLen]
        let serverSalt = material[2 * keyLen + saltLen..<2 * (keyLen + saltLen)]
        let client = Array(clientKey + clientSalt), server = Array(serverKey + serverSalt)
        state = .connected
        return role == .server
            ? .connected(profile, local: server, remote: client)
            : .connected(profile, local: client, remote: server)
    }

    static func errorQueueText() -> String {
        var parts: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buf = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buf, buf.count)
            parts.append(String(cString: buf))
        }
        return parts.isEmpty ? "unknown error" : parts.joined(separator: "; ")
    }
}

private extension String {
    func caseInsensitiveCompare(_ other: String) -> Bool { lowercased() == other.lowercased() }
}
