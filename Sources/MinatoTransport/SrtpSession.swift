internal import CSRTP

/// The SRTP protection profiles Minato negotiates, in server preference order.
public enum SrtpProfile: Sendable, Equatable {
    case aeadAes128Gcm, aeadAes256Gcm, aes128CmSha1_80

    /// The OpenSSL `SRTP_PROTECTION_PROFILE` id (RFC 5764 / RFC 7714 numbers).
    init?(opensslId: UInt) {
        switch opensslId {
        case 0x0007: self = .aeadAes128Gcm
        case 0x0008: self = .aeadAes256Gcm
        case 0x0001: self = .aes128CmSha1_80
        default: return nil
        }
    }
    var keyLength: Int { self == .aeadAes256Gcm ? 32 : 16 }
    var saltLength: Int { self == .aes128CmSha1_80 ? 14 : 12 }
}

/// One direction pair of libsrtp2 contexts for a transport: `inbound` keyed with the remote
/// master key, `outbound` with ours. Owns both `srtp_t` handles; lives on the media worker.
/// Every call protects or unprotects in place in the caller's buffer. Nothing allocates: not
/// Swift, and not libsrtp2 with its ciphers on libgcrypt and nettle (scripts/build-libsrtp.sh; checked by
/// `make bench-micro`, bench/malloc-allowances.txt).
/// Public for the micro benchmarks (header rewrite + protect); the first session initialises
/// libsrtp (once per process) if no `CryptoRuntime` did.
public final class SrtpSession {
    private let inbound: srtp_t
    private let outbound: srtp_t
    public let profile: SrtpProfile
    /// Bytes `protect` may append (auth tag); callers leave this much room after a packet.
    public static let maxTrailer = 16 + 4

    public enum Failure: Error {
        case create(Int32)
        /// A master key and salt of the wrong length for the profile (libsrtp would read past it).
        case keyLength(Int)
    }

    public init(profile: SrtpProfile, localKeyAndSalt: [UInt8], remoteKeyAndSalt: [UInt8]) throws {
        self.profile = profile
        guard CryptoRuntime.srtpInitStatus == srtp_err_status_ok else {
            throw Failure.create(Int32(CryptoRuntime.srtpInitStatus.rawValue))
        }
        let expected = profile.keyLength + profile.saltLength
        for k in [localKeyAndSalt, remoteKeyAndSalt] where k.count != expected { throw Failure.keyLength(k.count) }
        func make(_ keyAndSalt: [UInt8], _ type: srtp_ssrc_type_t) throws -> srtp_t {
            var policy = srtp_policy_t()
            switch profile {
            case .aeadAes128Gcm:
                srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp)
                srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp)
            case .aeadAes256Gcm:
                srtp_crypto_policy_set_aes_gcm_256_16_auth(&policy.rtp)
                srtp_crypto_policy_set_aes_gcm_256_16_auth(&policy.rtcp)
            case .aes128CmSha1_80:
                srtp_crypto_policy_set_rtp_default(&policy.rtp)
                srtp_crypto_policy_set_rtcp_default(&policy.rtcp)
            }
            policy.ssrc.type = type
            policy.window_size = 1024
            policy.allow_repeat_tx = 1
            var session: srtp_t?
            var key = keyAndSalt
            let status = key.withUnsafeMutableBufferPointer { buf -> srtp_err_status_t in
                policy.key = buf.baseAddress
                return srtp_create(&session, &policy)
            }
            guard status == srtp_err_status_ok, let session else {
                throw Failure.create(Int32(status.rawValue))
            }
            return session
        }
        inbound = try make(remoteKeyAndSalt, ssrc_any_inbound)
        do { outbound = try make(localKeyAndSalt, ssrc_any_outbound) } catch {
            srtp_dealloc(inbound)
            throw error
        }
    }

    deinit {
        srtp_dealloc(inbound)
        srtp_dealloc(outbound)
    }

    /// Decrypts an SRTP packet in place; returns the clear length, or nil if it fails auth/replay.
    @inline(__always)
    public func unprotectRtp(_ base: UnsafeMutableRawPointer, length: Int) -> Int? {
        guard var len = Int32(exactly: length) else { return nil }
        return srtp_unprotect(inbound, base, &len) == srtp_err_status_ok ? Int(len) : nil
    }

    @inline(__always)
    public func unprotectRtcp(_ base: UnsafeMutableRawPointer, length: Int) -> Int? {
        guard var len = Int32(exactly: length) else { return nil }
        return srtp_unprotect_rtcp(inbound, base, &len) == srtp_err_status_ok ? Int(len) : nil
    }

    /// Encrypts in place; the buffer must have `maxTrailer` bytes of room after `length`.
    @inline(__always)
    public func protectRtp(_ base: UnsafeMutableRawPointer, length: Int) -> Int? {
        guard var len = Int32(exactly: length) else { return nil }
        return srtp_protect(outbound, base, &len) == srtp_err_status_ok ? Int(len) : nil
    }

    @inline(__always)
    public func protectRtcp(_ base: UnsafeMutableRawPointer, length: Int) -> Int? {
        guard var len = Int32(exactly: length) else { return nil }
        return srtp_protect_rtcp(outbound, base, &len) == srtp_err_status_ok ? Int(len) : nil
    }
}
