import Testing
@testable import MinatoTransport

private func bytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var i = hex.startIndex
    while i < hex.endIndex {
        let j = hex.index(i, offsetBy: 2)
        out.append(UInt8(hex[i..<j], radix: 16)!)
        i = j
    }
    return out
}

/// Protects `plain` in place with a session keyed `key` (master key || salt) and returns the
/// protected bytes; then checks that unprotecting them gives `plain` back.
private func protect(_ plain: [UInt8], profile: SrtpProfile, key: [UInt8], rtcp: Bool) throws -> [UInt8] {
    let sender = try SrtpSession(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key)
    let receiver = try SrtpSession(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key)
    var buffer = plain + [UInt8](repeating: 0, count: SrtpSession.maxTrailer)
    let n = buffer.withUnsafeMutableBytes { b in
        rtcp ? sender.protectRtcp(b.baseAddress!, length: plain.count) : sender.protectRtp(b.baseAddress!, length: plain.count)
    }
    let protected = Array(buffer.prefix(n ?? 0))
    var back = protected
    let m = back.withUnsafeMutableBytes { b in
        rtcp ? receiver.unprotectRtcp(b.baseAddress!, length: b.count) : receiver.unprotectRtp(b.baseAddress!, length: b.count)
    }
    #expect(m.map { Array(back.prefix($0)) } == plain, "unprotect gives the plaintext back")
    return protected
}

/// The packet path's SRTP against published answers: RFC 3711 (AES-CM + HMAC-SHA1, the master
/// key of its Appendix B.3) and AEAD AES-GCM (RFC 7714 framing), with the expected packets of
/// libsrtp's own validation (test/srtp_driver.c `srtp_validate`, `srtp_validate_gcm`), which an
/// independent implementation of the RFCs reproduces. Whatever crypto backend libsrtp uses must
/// produce exactly these bytes.
@Suite("SRTP known answers and backend")
struct SrtpKnownAnswerTests {
    static let rtpPlain = bytes("800f1234decafbadcafebabeabababababababababababababababab")
    static let rtcpPlain = bytes("81c8000bcafebabeabababababababababababababababab")

    @Test("AES_CM_128_HMAC_SHA1_80, RTP and RTCP (RFC 3711 B.3 master key)")
    func aesCm() throws {
        let key = bytes("e1f97a0d3e018be0d64fa32c06de4139" + "0ec675ad498afeebb6960b3aabe6")
        #expect(try protect(Self.rtpPlain, profile: .aes128CmSha1_80, key: key, rtcp: false)
                == bytes("800f1234decafbadcafebabe4e55dc4ce79978d88ca4d215949d2402b78d6acc99ea179b8dbb"))
        #expect(try protect(Self.rtcpPlain, profile: .aes128CmSha1_80, key: key, rtcp: true)
                == bytes("81c8000bcafebabe7128035be487b9bdbef89041f977a5a880000001993e08cd54d6c1230798"))
    }

    @Test("AEAD_AES_128_GCM, RTP and RTCP")
    func aesGcm() throws {
        let key = bytes("000102030405060708090a0b0c0d0e0f" + "a0a1a2a3a4a5a6a7a8a9aaab")
        #expect(try protect(Self.rtpPlain, profile: .aeadAes128Gcm, key: key, rtcp: false)
                == bytes("800f1234decafbadcafebabec5002ede04cfdd2eb91159e0880aa06ed2976826f796b201df3131a127e8a392"))
        #expect(try protect(Self.rtcpPlain, profile: .aeadAes128Gcm, key: key, rtcp: true)
                == bytes("81c8000bcafebabec98b8b5df0392a55852b6c21ac8e7025c52c6fbea2b3b446ea31123ba88ce61e80000001"))
    }

    /// The tag (GCM's, or HMAC-SHA1's with AES-CM) covers the header, the payload and the SRTCP
    /// index: one changed bit anywhere in a protected RTP or RTCP packet, or a packet cut
    /// short, is refused.
    @Test("a packet changed anywhere is refused", arguments: [SrtpProfile.aeadAes128Gcm, .aeadAes256Gcm, .aes128CmSha1_80])
    func refusesChanges(profile: SrtpProfile) throws {
        let keyAndSalt = (0..<(profile.keyLength + profile.saltLength)).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 3) }
        for rtcp in [false, true] {
            let plain = rtcp ? Self.rtcpPlain : Self.rtpPlain
            let sealed = try protect(plain, profile: profile, key: keyAndSalt, rtcp: rtcp)
            for index in [1, 5, 11, plain.count, sealed.count - 1] {
                // A fresh receiver each time: the replay window must not be what refuses it.
                let receiver = try SrtpSession(profile: profile, localKeyAndSalt: keyAndSalt, remoteKeyAndSalt: keyAndSalt)
                var changed = sealed
                changed[index] ^= 0x04
                let n = changed.withUnsafeMutableBytes { b in
                    rtcp ? receiver.unprotectRtcp(b.baseAddress!, length: b.count) : receiver.unprotectRtp(b.baseAddress!, length: b.count)
                }
                #expect(n == nil, "\(profile) \(rtcp ? "RTCP" : "RTP"): byte \(index) of \(sealed.count) changed, yet accepted")
            }
            let receiver = try SrtpSession(profile: profile, localKeyAndSalt: keyAndSalt, remoteKeyAndSalt: keyAndSalt)
            var short = Array(sealed.prefix(sealed.count - 4))
            let n = short.withUnsafeMutableBytes { b in
                rtcp ? receiver.unprotectRtcp(b.baseAddress!, length: b.count) : receiver.unprotectRtp(b.baseAddress!, length: b.count)
            }
            #expect(n == nil, "\(profile) \(rtcp ? "RTCP" : "RTP"): cut short, yet accepted")
        }
    }

    /// Sessions carry many streams (a listener's transport: one per speaker and kind); libsrtp
    /// finds each packet's stream by SSRC in Minato's own stream list
    /// (scripts/libsrtp/minato_stream_list.c). Interleaved streams must each keep their own
    /// sequence and replay window: a packet repeated is refused on its own stream only.
    @Test("many SSRCs interleaved in one session, each its own stream", arguments: [SrtpProfile.aeadAes128Gcm, .aes128CmSha1_80])
    func manyStreams(profile: SrtpProfile) throws {
        let keyAndSalt = (0..<(profile == .aeadAes128Gcm ? 16 + 12 : 16 + 14)).map { UInt8(truncatingIfNeeded: $0 &* 37) }
        let sender = try SrtpSession(profile: profile, localKeyAndSalt: keyAndSalt, remoteKeyAndSalt: keyAndSalt)
        let receiver = try SrtpSession(profile: profile, localKeyAndSalt: keyAndSalt, remoteKeyAndSalt: keyAndSalt)
        func packet(ssrc: UInt32, seq: UInt16) -> [UInt8] {
            [0x80, 0x6f, UInt8(seq >> 8), UInt8(seq & 0xff), 0, 0, 0x10, 0x00,
             UInt8(ssrc >> 24), UInt8((ssrc >> 16) & 0xff), UInt8((ssrc >> 8) & 0xff), UInt8(ssrc & 0xff)]
                + [UInt8](repeating: UInt8(truncatingIfNeeded: ssrc &+ UInt32(seq)), count: 100)
        }
        func seal(_ plain: [UInt8]) -> [UInt8]? {
            var buffer = plain + [UInt8](repeating: 0, count: SrtpSession.maxTrailer)
            let n = buffer.withUnsafeMutableBytes { sender.protectRtp($0.baseAddress!, length: plain.count) }
            return n.map { Array(buffer.prefix($0)) }
        }
        func open(_ sealed: [UInt8]) -> [UInt8]? {
            var buffer = sealed
            let n = buffer.withUnsafeMutableBytes { receiver.unprotectRtp($0.baseAddress!, length: $0.count) }
            return n.map { Array(buffer.prefix($0)) }
        }
        let ssrcs: [UInt32] = (0..<24).map { 0x1000_0000 &+ UInt32($0) &* 0x0101_0101 }
        var firstOfEach: [[UInt8]] = []
        for round in 0..<6 {
            for (i, ssrc) in ssrcs.enumerated() {
                let plain = packet(ssrc: ssrc, seq: UInt16(100 + round * 3 + i % 2))
                let sealed = try #require(seal(plain), "protect \(ssrc) round \(round)")
                #expect(open(sealed) == plain, "stream \(ssrc) round \(round) round-trips")
                if round == 0 { firstOfEach.append(sealed) }
            }
        }
        // A replayed packet is refused on its stream; the same sequence number on a stream that
        // has not seen it yet is accepted (each SSRC has its own replay window).
        #expect(open(firstOfEach[5]) == nil, "a replay is refused")
        let fresh = packet(ssrc: 0x7777_0001, seq: 100)
        let sealedFresh = try #require(seal(fresh))
        #expect(open(sealedFresh) == fresh, "a new SSRC with an old sequence number is its own stream")
    }

    @Test("the linked libsrtp2 is the OpenSSL build (scripts/build-libsrtp.sh), not Debian's NSS build")
    func backend() {
        let modules = CryptoRuntime.srtpCryptoModules
        print("libsrtp2 crypto modules: \(modules)")
        #expect(CryptoRuntime.srtpBackend == "OpenSSL")
        #expect(modules.contains("aes icm ossl"))
        #expect(!modules.contains { $0.split(separator: " ").contains("nss") })
    }

    @Test("new sessions get AES-GCM and AES-CM on libgcrypt, HMAC-SHA1 on nettle (scripts/libsrtp/minato_gcrypt.c)")
    func ciphersOnGcrypt() {
        let gcm128 = CryptoRuntime.srtpCipher(for: .aeadAes128Gcm), gcm256 = CryptoRuntime.srtpCipher(for: .aeadAes256Gcm)
        let icm = CryptoRuntime.srtpCipher(for: .aes128CmSha1_80), hmac = CryptoRuntime.srtpHmac
        print("libsrtp2 ciphers: \(gcm128); \(gcm256); \(icm); \(hmac)")
        #expect(gcm128 == "AES-128 GCM using libgcrypt")
        #expect(gcm256 == "AES-256 GCM using libgcrypt")
        #expect(icm == "AES-128 counter mode using libgcrypt")
        #expect(hmac == "hmac sha-1 using nettle")
    }
}
