import Testing
import Foundation
@testable import MinatoTransport

/// The consent-check answers of direct-read sockets (`IceCheckResponder`), checked against
/// RFC 5769's sample request and against requests built here, and each answer verified here
/// byte by byte: its MESSAGE-INTEGRITY recomputed with the HMAC-SHA1 and its FINGERPRINT with the
/// CRC-32 written below (the test shares no code with libnice's STUN library or OpenSSL; the
/// sample's own MESSAGE-INTEGRITY checks the HMAC), its XOR-MAPPED-ADDRESS decoded.
@Suite struct IceCheckResponderTests {
    // RFC 5769 2.1: a binding request with USERNAME "evtj:h6vY", PRIORITY, ICE-CONTROLLED,
    // MESSAGE-INTEGRITY (key "VOkJxbRl1RmTxUk/WvJxBt") and FINGERPRINT.
    static let sampleRequest: [UInt8] = [
        0x00, 0x01, 0x00, 0x58, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae,
        0x80, 0x22, 0x00, 0x10, 0x53, 0x54, 0x55, 0x4e, 0x20, 0x74, 0x65, 0x73, 0x74, 0x20, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74,
        0x00, 0x24, 0x00, 0x04, 0x6e, 0x00, 0x01, 0xff,
        0x80, 0x29, 0x00, 0x08, 0x93, 0x2f, 0xf9, 0xb1, 0x51, 0x26, 0x3b, 0x36,
        0x00, 0x06, 0x00, 0x09, 0x65, 0x76, 0x74, 0x6a, 0x3a, 0x68, 0x36, 0x76, 0x59, 0x20, 0x20, 0x20,
        0x00, 0x08, 0x00, 0x14, 0x9a, 0xea, 0xa7, 0x0c, 0xbf, 0xd8, 0xcb, 0x56, 0x78, 0x1e, 0xf2, 0xb5, 0xb2, 0xd3, 0xf2, 0x49,
        0xc1, 0xb5, 0x71, 0xa2,
        0x80, 0x28, 0x00, 0x04, 0xe5, 0x7a, 0x3b, 0xcf,
    ]
    static let password = "VOkJxbRl1RmTxUk/WvJxBt"

    /// 192.0.2.1:32853 (RFC 5769 2.2's mapped address).
    static func source() -> sockaddr_storage {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { raw in
            let sin = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
            sin.pointee.sin_family = sa_family_t(AF_INET)
            sin.pointee.sin_port = in_port_t(32853).bigEndian
            sin.pointee.sin_addr.s_addr = UInt32(0xC000_0201).bigEndian
        }
        return storage
    }

    func answer(_ request: [UInt8], ufrag: String = "evtj", pwd: String = password) -> (IceCheckResponder.Outcome, [UInt8]) {
        var reply = [UInt8](repeating: 0, count: 512)
        var from = Self.source()
        let outcome = request.withUnsafeBytes { req in
            reply.withUnsafeMutableBufferPointer { out in
                ufrag.withCString { u in pwd.withCString { p in
                    IceCheckResponder.answer(req, from: &from, ufrag: u, pwd: p, into: out.baseAddress!, capacity: out.count)
                } }
            }
        }
        if case .answer(let length, _) = outcome { return (outcome, Array(reply[0..<length])) }
        return (outcome, [])
    }

    // MARK: Independent STUN reading and writing

    /// SHA-1 (FIPS 180-4), for HMAC-SHA1 (RFC 2104).
    static func sha1(_ message: [UInt8]) -> [UInt8] {
        var h: [UInt32] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476, 0xc3d2_e1f0]
        var m = message + [0x80]
        while m.count % 64 != 56 { m.append(0) }
        let bits = UInt64(message.count) * 8
        for i in (0..<8).reversed() { m.append(UInt8(truncatingIfNeeded: bits >> (UInt64(i) * 8))) }
        for chunk in stride(from: 0, to: m.count, by: 64) {
            var w = [UInt32](repeating: 0, count: 80)
            for i in 0..<16 {
                w[i] = (0..<4).reduce(UInt32(0)) { $0 << 8 | UInt32(m[chunk + i * 4 + $1]) }
            }
            for i in 16..<80 {
                let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
                w[i] = x << 1 | x >> 31
            }
            var (a, b, c, d, e) = (h[0], h[1], h[2], h[3], h[4])
            for i in 0..<80 {
                let (f, k): (UInt32, UInt32)
                switch i {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5a82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ed9_eba1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc)
                default: (f, k) = (b ^ c ^ d, 0xca62_c1d6)
                }
                let t = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[i]
                (e, d, c, b, a) = (d, c, b << 30 | b >> 2, a, t)
            }
            h[0] &+= a; h[1] &+= b; h[2] &+= c; h[3] &+= d; h[4] &+= e
        }
        return h.flatMap { v in (0..<4).map { UInt8(truncatingIfNeeded: v >> (24 - UInt32($0) * 8)) } }
    }

    static func hmacSha1(key: [UInt8], _ data: [UInt8]) -> [UInt8] {
        var k = key.count > 64 ? sha1(key) : key
        k += [UInt8](repeating: 0, count: 64 - k.count)
        return sha1(k.map { $0 ^ 0x5c } + sha1(k.map { $0 ^ 0x36 } + data))
    }

    static func crc32(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xffff_ffff
        for b in bytes {
            crc ^= UInt32(b)
            for _ in 0..<8 { crc = (crc >> 1) ^ (crc & 1 == 1 ? 0xedb8_8320 : 0) }
        }
        return ~crc
    }

    /// Attributes of a STUN message (type, value), in order.
    static func attributes(_ m: [UInt8]) -> [(UInt16, [UInt8], offset: Int)] {
        var out: [(UInt16, [UInt8], offset: Int)] = []
        var i = 20
        while i + 4 <= m.count {
            let type = UInt16(m[i]) << 8 | UInt16(m[i + 1])
            let length = Int(m[i + 2]) << 8 | Int(m[i + 3])
            guard i + 4 + length <= m.count else { break }
            out.append((type, Array(m[(i + 4)..<(i + 4 + length)]), i))
            i += 4 + (length + 3) / 4 * 4
        }
        return out
    }

    /// The value of the first attribute of `type` (empty when absent).
    static func attribute(_ m: [UInt8], _ type: UInt16) -> [UInt8] {
        for a in attributes(m) where a.0 == type { return a.1 }
        return []
    }

    /// MESSAGE-INTEGRITY (RFC 5389 15.4): HMAC-SHA1 over the message up to the attribute, with
    /// the header's length covering it.
    static func integrity(_ m: [UInt8], upTo offset: Int, key: String) -> [UInt8] {
        var covered = Array(m[0..<offset])
        let length = offset - 20 + 24
        covered[2] = UInt8(length >> 8); covered[3] = UInt8(length & 0xff)
        return hmacSha1(key: Array(key.utf8), covered)
    }

    /// Checks MESSAGE-INTEGRITY and FINGERPRINT of `m` (both present, FINGERPRINT last).
    static func verify(_ m: [UInt8], key: String) {
        let attrs = attributes(m)
        guard let mi = attrs.first(where: { $0.0 == 0x0008 }), let fp = attrs.last, fp.0 == 0x8028 else {
            Issue.record("no MESSAGE-INTEGRITY or FINGERPRINT last: \(attrs.map(\.0))"); return
        }
        #expect(mi.1 == integrity(m, upTo: mi.offset, key: key))
        var covered = Array(m[0..<fp.offset])
        let length = fp.offset - 20 + 8
        covered[2] = UInt8(length >> 8); covered[3] = UInt8(length & 0xff)
        let expected = crc32(covered[...]) ^ 0x5354_554e
        #expect(fp.1 == [UInt8(expected >> 24), UInt8(expected >> 16 & 0xff), UInt8(expected >> 8 & 0xff), UInt8(expected & 0xff)])
    }

    /// A binding request from the controlling side, as a browser sends its consent checks.
    static func request(username: String, key: String, nominate: Bool, transaction: [UInt8]) -> [UInt8] {
        var m: [UInt8] = [0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42] + transaction
        func attribute(_ type: UInt16, _ value: [UInt8]) {
            m += [UInt8(type >> 8), UInt8(type & 0xff), UInt8(value.count >> 8), UInt8(value.count & 0xff)] + value
            m += [UInt8](repeating: 0, count: (4 - value.count % 4) % 4)
        }
        attribute(0x0006, Array(username.utf8))
        attribute(0x0024, [0x6e, 0x00, 0x01, 0xff])                   // PRIORITY
        attribute(0x802a, [1, 2, 3, 4, 5, 6, 7, 8])                   // ICE-CONTROLLING
        if nominate { attribute(0x0025, []) }                         // USE-CANDIDATE
        let miOffset = m.count
        attribute(0x0008, integrity(m, upTo: miOffset, key: key))
        let fpOffset = m.count
        var covered = m
        covered[2] = UInt8((fpOffset - 20 + 8) >> 8); covered[3] = UInt8((fpOffset - 20 + 8) & 0xff)
        let crc = crc32(covered[...]) ^ 0x5354_554e
        attribute(0x8028, [UInt8(crc >> 24), UInt8(crc >> 16 & 0xff), UInt8(crc >> 8 & 0xff), UInt8(crc & 0xff)])
        let length = m.count - 20
        m[2] = UInt8(length >> 8); m[3] = UInt8(length & 0xff)
        return m
    }

    // MARK: Tests

    @Test func theTestsOwnHmacReproducesTheSampleRequestsIntegrity() {
        // RFC 5769 2.1's MESSAGE-INTEGRITY, from its key: the check below is itself checked.
        let mi = Self.attributes(Self.sampleRequest).first { $0.0 == 0x0008 }
        #expect(mi.map { Self.integrity(Self.sampleRequest, upTo: $0.offset, key: Self.password) == $0.1 } == true)
        #expect(Self.sha1(Array("abc".utf8)).prefix(4) == [0xa9, 0x99, 0x3e, 0x36])
    }

    @Test func aConsentCheckGetsAnAuthenticSuccessResponse() {
        let transaction: [UInt8] = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12]
        let req = Self.request(username: "srv1:brws", key: "server-password-22chars", nominate: false, transaction: transaction)
        let (outcome, reply) = answer(req, ufrag: "srv1", pwd: "server-password-22chars")
        #expect(outcome == .answer(length: reply.count, nominates: false))
        #expect(Array(reply[0..<2]) == [0x01, 0x01], "a binding success response")
        #expect(Array(reply[4..<8]) == [0x21, 0x12, 0xa4, 0x42])
        #expect(Array(reply[8..<20]) == transaction)
        // XOR-MAPPED-ADDRESS: family 1, port ^ 0x2112, address ^ 0x2112A442 (RFC 5389 15.2).
        let expected: [UInt8] = [0x00, 0x01, 0x80 ^ 0x21, 0x55 ^ 0x12, 0xc0 ^ 0x21, 0x00 ^ 0x12, 0x02 ^ 0xa4, 0x01 ^ 0x42]
        #expect(Self.attribute(reply, 0x0020) == expected)
        Self.verify(reply, key: "server-password-22chars")
    }

    @Test func aNominationIsReported() {
        let req = Self.request(username: "srv1:brws", key: "pw", nominate: true, transaction: [UInt8](repeating: 7, count: 12))
        let (outcome, reply) = answer(req, ufrag: "srv1", pwd: "pw")
        #expect(outcome == .answer(length: reply.count, nominates: true))
    }

    @Test func rfc5769SampleRequestFromAPeerThatAlsoClaimsControlledGetsARoleConflict() {
        // The sample carries ICE-CONTROLLED: a peer that is not controlling toward an ICE-lite
        // agent, which cannot switch roles, is told 487 (RFC 8445 7.3.1.1), authenticated.
        let (outcome, reply) = answer(Self.sampleRequest)
        guard case .answer = outcome else { Issue.record("\(outcome)"); return }
        #expect(Array(reply[0..<2]) == [0x01, 0x11], "a binding error response")
        #expect(Array(reply[8..<20]) == Array(Self.sampleRequest[8..<20]))
        let code = Self.attribute(reply, 0x0009)
        #expect(code.count >= 4 && code[2] == 4 && code[3] == 87, "ERROR-CODE 487: \(code)")
        Self.verify(reply, key: Self.password)
    }

    @Test func anythingNotAuthenticIsRefused() {
        let req = Self.request(username: "srv1:brws", key: "pw", nominate: false, transaction: [UInt8](repeating: 1, count: 12))
        #expect(answer(req, ufrag: "srv1", pwd: "other").0 == .invalid, "wrong password")
        #expect(answer(req, ufrag: "srv2", pwd: "pw").0 == .invalid, "another transport's ufrag")
        #expect(answer(req, ufrag: "srv", pwd: "pw").0 == .invalid, "a prefix of the ufrag")
        var flipped = req
        flipped[30] ^= 1
        #expect(answer(flipped, ufrag: "srv1", pwd: "pw").0 == .invalid, "a changed byte")
        #expect(answer(Array(req[0..<(req.count - 8)]), ufrag: "srv1", pwd: "pw").0 == .invalid, "truncated")
        #expect(answer(Array(req[0..<19]), ufrag: "srv1", pwd: "pw").0 == .invalid, "shorter than a header")
        #expect(answer([0x80, 0x60] + [UInt8](repeating: 0, count: 30)).0 == .invalid, "RTP")
        #expect(answer([]).0 == .invalid)
    }

    @Test func anIndicationNeedsNoAnswer() {
        // A binding indication (class 01) with only a FINGERPRINT, as keepalives are sent.
        var m: [UInt8] = [0x00, 0x11, 0x00, 0x08, 0x21, 0x12, 0xa4, 0x42] + [UInt8](repeating: 3, count: 12)
        let crc = Self.crc32(m[...]) ^ 0x5354_554e
        m += [0x80, 0x28, 0x00, 0x04, UInt8(crc >> 24), UInt8(crc >> 16 & 0xff), UInt8(crc >> 8 & 0xff), UInt8(crc & 0xff)]
        #expect(answer(m).0 == .ignore)
    }

    @Test func aBatchReadGivesEachDatagramItsLengthAndLosesAnOversizedOne() throws {
        let pair = try DatagramPair()
        for size in [100, 1200, DirectReceiver.capacity + 1, 20] {
            let payload = [UInt8](repeating: UInt8(size & 0xff), count: size)
            #expect(payload.withUnsafeBytes { send(pair.sender, $0.baseAddress, size, 0) } == size)
        }
        let receiver = try #require(DirectReceiver())
        #expect(receiver.read(fd: pair.receiver) == 4)
        #expect(Array(UnsafeBufferPointer(start: receiver.lengths, count: 4)) == [100, 1200, 0, 20])
        #expect(receiver.buffers[1]!.load(fromByteOffset: 1199, as: UInt8.self) == UInt8(1200 & 0xff))
        #expect(receiver.read(fd: pair.receiver) == 0, "nothing left: no wait")
    }
}
