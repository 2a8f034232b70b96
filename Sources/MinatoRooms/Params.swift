/// Typed, validated access to a request's params; every failure is an exact protocol error.
struct Params {
    let raw: [String: JSONValue]
    init(_ raw: [String: JSONValue]) { self.raw = raw }

    func string(_ key: String) throws(RoomError) -> String {
        guard let v = raw[key] else { throw .invalidParams("\"\(key)\" is required.") }
        guard let s = v.stringValue else { throw .invalidParams("\"\(key)\" must be a string.") }
        return s
    }
    func optionalString(_ key: String) throws(RoomError) -> String? {
        guard let v = raw[key], v != .null else { return nil }
        guard let s = v.stringValue else { throw .invalidParams("\"\(key)\" must be a string.") }
        return s
    }
    func optionalInt(_ key: String) throws(RoomError) -> Int? {
        guard let v = raw[key], v != .null else { return nil }
        guard let i = v.intValue else { throw .invalidParams("\"\(key)\" must be an integer.") }
        return i
    }
    func optionalBool(_ key: String) throws(RoomError) -> Bool? {
        guard let v = raw[key], v != .null else { return nil }
        guard let b = v.boolValue else { throw .invalidParams("\"\(key)\" must be true or false.") }
        return b
    }
    func optionalArray(_ key: String) throws(RoomError) -> [JSONValue]? {
        guard let v = raw[key], v != .null else { return nil }
        guard case .array(let a) = v else { throw .invalidParams("\"\(key)\" must be an array.") }
        return a
    }
    /// A SkyWay name: `^[A-Za-z0-9._%*-]{1,128}$`.
    func name(_ key: String) throws(RoomError) -> String? {
        guard let s = try optionalString(key) else { return nil }
        try Self.checkName(s, key: key)
        return s
    }
    static func checkName(_ s: String, key: String) throws(RoomError) {
        let ok = !s.isEmpty && s.utf8.count <= 128 && s.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || c == 0x2E || c == 0x5F || c == 0x25 || c == 0x2A || c == 0x2D
        }
        guard ok else {
            throw .invalidParameter("\"\(key)\" must be 1-128 characters of A-Z a-z 0-9 . _ % * -.")
        }
    }
    /// Metadata: a string of at most 4096 bytes.
    func metadata(_ key: String, required: Bool = false) throws(RoomError) -> String? {
        guard let s = try optionalString(key) else {
            if required { throw .invalidParams("\"\(key)\" is required.") }
            return nil
        }
        try Self.checkMetadata(s, key: key)
        return s
    }
    static func checkMetadata(_ s: String, key: String) throws(RoomError) {
        guard s.utf8.count <= 4096 else { throw .invalidParameter("\"\(key)\" is \(s.utf8.count) bytes; metadata may be at most 4096.") }
    }
    /// `{type, sdp}` with the expected type.
    func sessionDescription(_ key: String, type: String) throws(RoomError) -> String {
        guard case .object(let o)? = raw[key] else { throw .invalidParams("\"\(key)\" must be {type:\"\(type)\", sdp}.") }
        guard o["type"]?.stringValue == type else { throw .invalidParams("\"\(key)\".type must be \"\(type)\".") }
        guard let sdp = o["sdp"]?.stringValue else { throw .invalidParams("\"\(key)\".sdp must be a string.") }
        return sdp
    }
}
