internal import COpenSSL

/// A room password kept only as a salted PBKDF2-HMAC-SHA256 digest (never stored or logged
/// in clear). Verification compares in constant time.
public struct PasswordHash: Sendable {
    private let salt: [UInt8]
    private let digest: [UInt8]
    public static let iterations: Int32 = 20_000

    public init(password: String) {
        var salt = [UInt8](repeating: 0, count: 16)
        _ = RAND_bytes(&salt, 16)
        self.salt = salt
        self.digest = Self.derive(password, salt: salt)
    }

    public func matches(_ password: String) -> Bool {
        let other = Self.derive(password, salt: salt)
        var diff: UInt8 = 0
        for (a, b) in zip(digest, other) { diff |= a ^ b }
        return diff == 0 && other.count == digest.count
    }

    private static func derive(_ password: String, salt: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let bytes = Array(password.utf8)
        bytes.withUnsafeBufferPointer { p in
            p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: max(1, bytes.count)) { pass in
                _ = PKCS5_PBKDF2_HMAC(pass, Int32(bytes.count), salt, Int32(salt.count), iterations, EVP_sha256(), 32, &out)
            }
        }
        return out
    }
}
