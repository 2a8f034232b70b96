internal import Foundation
internal import MinatoTransport

/// The admin API's `srtp` object of a plain transport or plain publication (SDES-style keys):
/// `{cryptoSuite, keyBase64?}` in the request, where `keyBase64` is the master key and salt the
/// remote protects what it sends with (omitted: the remote uses the server's key, one key both
/// ways); the answer gives the server's own, made at random, as `{cryptoSuite, keyBase64}`.
struct PlainSrtpParameters {
    let keys: PlainSrtp

    /// Checks a request's `srtp` value; nil when there is none (plain RTP in the clear).
    static func parse(_ value: JSONValue?) throws(RoomError) -> PlainSrtpParameters? {
        guard let value else { return nil }
        guard case .object(let o) = value, let suite = o["cryptoSuite"]?.stringValue else {
            throw RoomError.invalidParameter("\"srtp\" must be an object with \"cryptoSuite\" (AES_CM_128_HMAC_SHA1_80 or AEAD_AES_128_GCM).")
        }
        guard let profile = PlainSrtp.profile(suite: suite) else {
            throw RoomError.invalidParameter("srtp.cryptoSuite must be AES_CM_128_HMAC_SHA1_80 or AEAD_AES_128_GCM.")
        }
        let length = PlainSrtp.keyAndSaltLength(profile)
        var local = [UInt8](repeating: 0, count: length)
        var rng = SystemRandomNumberGenerator()
        for i in local.indices { local[i] = UInt8.random(in: 0...255, using: &rng) }
        var remote = local
        if let v = o["keyBase64"] {
            guard let text = v.stringValue, text.utf8.count <= 64, let bytes = Data(base64Encoded: text), bytes.count == length else {
                throw RoomError.invalidParameter("srtp.keyBase64 must be the base64 of \(length) bytes (master key and salt of \(suite)).")
            }
            remote = [UInt8](bytes)
        }
        return PlainSrtpParameters(keys: PlainSrtp(profile: profile, localKeyAndSalt: local, remoteKeyAndSalt: remote))
    }

    /// The server's side for the answer: what the remote decrypts our packets with.
    var json: JSONValue {
        ["cryptoSuite": .string(PlainSrtp.suite(of: keys.profile)), "keyBase64": .string(Data(keys.localKeyAndSalt).base64EncodedString())]
    }

    /// An SDP `a=crypto` line with the server's key (RFC 4568).
    var cryptoLine: String {
        "a=crypto:1 \(PlainSrtp.suite(of: keys.profile)) inline:\(Data(keys.localKeyAndSalt).base64EncodedString())"
    }
}
