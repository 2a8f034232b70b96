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
        // A trailing NUL keeps the buffer non-empty (an empty array has no base address) and is
        // not part of the passed length, so the empty password hashes like any other.
        let bytes = Array(password.utf8) + [0]
        let length = Int32(clamping: bytes.count - 1)
        bytes.withUnsafeBytes { raw in
            let pass = raw.baseAddress?.assumingMemoryBound(to: CChar.self)
            _ = PKCS5_PBKDF2_HMAC(pass, length, salt, Int32(salt.count), iterations, EVP_sha256(), 32, &out)
        }
        return out
    }
}
