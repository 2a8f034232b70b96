internal import COpenSSL
internal import CSRTP
internal import CMinatoShims
internal import Foundation

/// Process-wide crypto state: libsrtp initialisation, the server's DTLS certificate and key,
/// the shared `SSL_CTX`, and the custom BIO method DTLS writes through.
/// Made once in `main` and passed down (no singletons). Immutable after init, so `Sendable`;
/// OpenSSL's `SSL_CTX` is safe to share for creating `SSL` objects from several threads.
public final class CryptoRuntime: @unchecked Sendable {
    let context: OpaquePointer        // SSL_CTX*, allocated by this
    let certificate: OpaquePointer    // X509*, allocated by this
    let privateKey: OpaquePointer     // EVP_PKEY*, allocated by this
    let bioMethod: OpaquePointer      // BIO_METHOD*, allocated by this
    /// "sha-256 AB:CD:…" as it goes into SDP.
    public let fingerprint: String

    public enum Failure: Error, CustomStringConvertible {
        case openssl(String)
        case srtp(Int32)
        public var description: String {
            switch self {
            case .openssl(let what): return "OpenSSL failed: \(what)"
            case .srtp(let code): return "libsrtp2 init failed (status \(code))"
            }
        }
    }

    /// Makes the DTLS identity: the certificate and key in the given PEM files, or (both nil)
    /// a fresh ECDSA P-256 self-signed certificate valid for a year.
    public init(certificateFile: String? = nil, privateKeyFile: String? = nil) throws {
        let status = Self.srtpInitStatus
        guard status == srtp_err_status_ok else { throw Failure.srtp(Int32(status.rawValue)) }
        let cert: OpaquePointer, key: OpaquePointer
        if let certificateFile, let privateKeyFile {
            (cert, key) = try Self.load(certificateFile: certificateFile, privateKeyFile: privateKeyFile)
        } else {
            (cert, key) = try Self.generate()
        }
        guard let ctx = SSL_CTX_new(DTLS_method()) else { throw Failure.openssl("SSL_CTX_new") }
        guard minato_ssl_ctx_dtls12(ctx) == 1,
              SSL_CTX_use_certificate(ctx, cert) == 1,
              SSL_CTX_use_PrivateKey(ctx, key) == 1,
              SSL_CTX_check_private_key(ctx) == 1
        else { throw Failure.openssl("configuring the DTLS context") }
        // Server preference order (docs/architecture.md): GCM first, NSS's CM path is 4x slower.
        guard SSL_CTX_set_tlsext_use_srtp(ctx, "SRTP_AEAD_AES_128_GCM:SRTP_AEAD_AES_256_GCM:SRTP_AES128_CM_SHA1_80") == 0
        else { throw Failure.openssl("SSL_CTX_set_tlsext_use_srtp") }
        // The peer's certificate is self-signed; it is checked against the SDP fingerprint
        // after the handshake, so the chain check accepts everything here.
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT) { _, _ in 1 }
        minato_ssl_ctx_server_preference_read_ahead(ctx)
        guard let method = BIO_meth_new(BIO_TYPE_SOURCE_SINK | BIO_get_new_index(), "minato-dtls-out")
        else { throw Failure.openssl("BIO_meth_new") }
        BIO_meth_set_write(method, dtlsBioWrite)
        BIO_meth_set_ctrl(method, dtlsBioCtrl)
        BIO_meth_set_create(method) { bio in BIO_set_init(bio, 1); return 1 }
        BIO_meth_set_destroy(method) { _ in 1 }

        self.context = ctx
        self.certificate = cert
        self.privateKey = key
        self.bioMethod = method
        self.fingerprint = "sha-256 " + (Self.digest(of: cert, algorithm: "sha-256") ?? "")
    }

    /// The crypto backend of the linked libsrtp2, from the names of its crypto modules:
    /// "OpenSSL" (what scripts/build-libsrtp.sh builds), "NSS" (Debian's binary package), or
    /// "unknown". Initialises libsrtp first if no runtime did.
    public static var srtpBackend: String {
        let names = srtpCryptoModules
        if names.contains(where: { $0.split(separator: " ").contains { $0 == "openssl" || $0 == "ossl" } }) { return "OpenSSL" }
        if names.contains(where: { $0.split(separator: " ").contains("nss") }) { return "NSS" }
        return "unknown"
    }

    /// libsrtp2's debug module names ("aes icm ossl", "hmac sha-1 openssl", …).
    static var srtpCryptoModules: [String] {
        _ = srtpInitStatus
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = minato_srtp_debug_modules(&buffer, buffer.count)
        let text = String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // One name per message, each followed by its state ("(off)"/"(on)") as another.
        return text.split(separator: "\n").compactMap { line in
            let name = line.trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty, !name.hasSuffix(":"), !name.hasPrefix("(") else { return nil }
            return name
        }
    }

    /// The description of the cipher libsrtp uses for new sessions of `profile` ("AES-128 GCM
    /// using libgcrypt", …). Initialises libsrtp first if no runtime did.
    public static func srtpCipher(for profile: SrtpProfile) -> String {
        _ = srtpInitStatus
        let id: Int32
        switch profile {
        case .aeadAes128Gcm: id = SRTP_AES_GCM_128
        case .aeadAes256Gcm: id = SRTP_AES_GCM_256
        case .aes128CmSha1_80: id = SRTP_AES_ICM_128
        }
        return cText { minato_srtp_cipher_description(id, $0, $1) }
    }

    /// The description of libsrtp's HMAC-SHA1 (AES_CM_128_HMAC_SHA1_80's authentication).
    public static var srtpHmac: String {
        _ = srtpInitStatus
        return cText { minato_srtp_hmac_description($0, $1) }
    }

    /// What a C call writes into a buffer (buffer, capacity) -> length, as a String.
    private static func cText(_ fill: (UnsafeMutablePointer<CChar>, Int) -> Int) -> String {
        var buffer = [CChar](repeating: 0, count: 128)
        let n = buffer.withUnsafeMutableBufferPointer { b in b.baseAddress.map { fill($0, b.count) } ?? 0 }
        return String(decoding: buffer.prefix(max(0, min(n, buffer.count))).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// libsrtp2 is initialised once per process (a second `srtp_init` fails); a process may
    /// hold several runtimes (a client with several contexts, tests). Then AES-GCM and AES-CM
    /// move to libgcrypt and HMAC-SHA1 to nettle (scripts/libsrtp/minato_gcrypt.c: about 40%
    /// fewer instructions per GCM packet than libsrtp's OpenSSL cipher, docs/architecture.md); a
    /// replacement that fails libsrtp's known answers fails the initialisation, so no session
    /// is made with it.
    static let srtpInitStatus: srtp_err_status_t = {
        let status = srtp_init()
        guard status == srtp_err_status_ok else { return status }
        return minato_srtp_use_gcrypt()
    }()

    static func generate() throws -> (OpaquePointer, OpaquePointer) {
        guard let key = minato_ec_p256_key() else { throw Failure.openssl("EC P-256 key generation") }
        guard let cert = X509_new() else { throw Failure.openssl("X509_new") }
        X509_set_version(cert, 2)
        var serial: UInt64 = 0
        withUnsafeMutableBytes(of: &serial) { _ = RAND_bytes($0.baseAddress!.assumingMemoryBound(to: UInt8.self), 8) }
        ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert), serial >> 1)
        X509_gmtime_adj(X509_getm_notBefore(cert), -86_400)
        X509_gmtime_adj(X509_getm_notAfter(cert), 86_400 * 365)
        X509_set_pubkey(cert, key)
        let name = X509_get_subject_name(cert)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, "minato", -1, -1, 0)
        X509_set_issuer_name(cert, name)
        guard X509_sign(cert, key, EVP_sha256()) > 0 else { throw Failure.openssl("X509_sign") }
        return (cert, key)
    }

    static func load(certificateFile: String, privateKeyFile: String) throws -> (OpaquePointer, OpaquePointer) {
        guard let certBio = BIO_new_file(certificateFile, "r") else {
            throw Failure.openssl("cannot open the DTLS certificate file '\(certificateFile)'")
        }
        defer { BIO_free(certBio) }
        guard let cert = PEM_read_bio_X509(certBio, nil, nil, nil) else {
            throw Failure.openssl("'\(certificateFile)' holds no PEM certificate")
        }
        guard let keyBio = BIO_new_file(privateKeyFile, "r") else {
            X509_free(cert)
            throw Failure.openssl("cannot open the DTLS private key file '\(privateKeyFile)'")
        }
        defer { BIO_free(keyBio) }
        guard let key = PEM_read_bio_PrivateKey(keyBio, nil, nil, nil) else {
            X509_free(cert)
            throw Failure.openssl("'\(privateKeyFile)' holds no (unencrypted) PEM private key")
        }
        guard X509_check_private_key(cert, key) == 1 else {
            X509_free(cert); EVP_PKEY_free(key)
            throw Failure.openssl("the DTLS private key does not match the certificate")
        }
        return (cert, key)
    }

    deinit {
        SSL_CTX_free(context)
        X509_free(certificate)
        EVP_PKEY_free(privateKey)
        BIO_meth_free(bioMethod)
    }

    /// Colon-separated upper-case hex digest of a certificate, or nil for an unknown algorithm.
    static func digest(of cert: OpaquePointer, algorithm: String) -> String? {
        let md: OpaquePointer?
        switch algorithm.lowercased() {
        case "sha-1": md = EVP_sha1()
        case "sha-224": md = EVP_sha224()
        case "sha-256": md = EVP_sha256()
        case "sha-384": md = EVP_sha384()
        case "sha-512": md = EVP_sha512()
        default: return nil
        }
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var len: UInt32 = 0
        guard X509_digest(cert, md, &out, &len) == 1 else { return nil }
        return out.prefix(Int(len)).map { byte in
            let hex = String(byte, radix: 16, uppercase: true)
            return byte < 16 ? "0" + hex : hex
        }.joined(separator: ":")
    }
}

/// The DTLS write BIO hands each record flight straight to the transport, one datagram each.
private func dtlsBioWrite(_ bio: OpaquePointer?, _ data: UnsafePointer<CChar>?, _ len: Int32) -> Int32 {
    guard let bio, let data, len > 0, let owner = BIO_get_data(bio) else { return -1 }
    let transport = Unmanaged<DtlsTransport>.fromOpaque(owner).takeUnretainedValue()
    transport.emit(UnsafeRawBufferPointer(start: data, count: Int(len)))
    return len
}

private func dtlsBioCtrl(_ bio: OpaquePointer?, _ cmd: Int32, _ larg: Int, _ parg: UnsafeMutableRawPointer?) -> Int {
    switch cmd {
    case BIO_CTRL_FLUSH: return 1
    case BIO_CTRL_DGRAM_QUERY_MTU: return 1200
    case BIO_CTRL_WPENDING, BIO_CTRL_PENDING: return 0
    default: return 0
    }
}
