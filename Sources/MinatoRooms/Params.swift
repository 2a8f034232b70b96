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
    func requiredMetadata(_ key: String) throws(RoomError) -> String {
        guard let s = try metadata(key) else { throw .invalidParams("\"\(key)\" is required.") }
        return s
    }
    static func checkMetadata(_ s: String, key: String) throws(RoomError) {
        guard s.utf8.count <= 4096 else { throw .invalidParameter("\"\(key)\" is \(s.utf8.count) bytes; metadata may be at most 4096.") }
    }
    /// A room password: at most `RoomConfiguration.maxPasswordBytes` bytes.
    func password(_ key: String) throws(RoomError) -> String? {
        guard let s = try optionalString(key) else { return nil }
        try Self.checkPassword(s, key: key)
        return s
    }
    static func checkPassword(_ s: String, key: String) throws(RoomError) {
        guard s.utf8.count <= RoomConfiguration.maxPasswordBytes else {
            throw .invalidParameter("\"\(key)\" is \(s.utf8.count) bytes; a password may be at most \(RoomConfiguration.maxPasswordBytes).")
        }
    }

    /// `encodings` of a publish (SkyWay's `{id, maxBitrate?, scaleResolutionDownBy?, maxFramerate?}`),
    /// validated and rebuilt from the known keys only.
    func encodings(_ key: String, max: Int) throws(RoomError) -> [JSONValue] {
        guard let list = try optionalArray(key) else { return [] }
        guard list.count <= max else {
            throw .limitExceeded("\"\(key)\" has \(list.count) entries; at most \(max) are allowed (rooms.maxEncodings).")
        }
        var ids: Set<String> = []
        var out: [JSONValue] = []
        for (i, entry) in list.enumerated() {
            guard case .object(let o) = entry else { throw .invalidParameter("\"\(key)[\(i)]\" must be an object {id, maxBitrate?, scaleResolutionDownBy?, maxFramerate?}.") }
            for k in o.keys where !["id", "maxBitrate", "scaleResolutionDownBy", "maxFramerate"].contains(k) {
                throw .invalidParameter("\"\(key)[\(i)]\" has an unknown key (allowed: id, maxBitrate, scaleResolutionDownBy, maxFramerate).")
            }
            guard let id = o["id"]?.stringValue else { throw .invalidParameter("\"\(key)[\(i)].id\" must be a string.") }
            try Self.checkEncodingId(id, key: "\(key)[\(i)].id")
            guard ids.insert(id).inserted else { throw .invalidParameter("\"\(key)\" names the id '\(id)' twice.") }
            var rebuilt: [String: JSONValue] = ["id": .string(id)]
            if let v = o["maxBitrate"], v != .null {
                guard let b = v.intValue, (1...1_000_000_000).contains(b) else {
                    throw .invalidParameter("\"\(key)[\(i)].maxBitrate\" must be an integer in 1...1000000000 (bits per second).")
                }
                rebuilt["maxBitrate"] = .int(b)
            }
            for (field, range) in [("scaleResolutionDownBy", 1.0...64.0), ("maxFramerate", 1.0...240.0)] {
                guard let v = o[field], v != .null else { continue }
                let number: Double?
                switch v { case .int(let n): number = Double(n); case .double(let d): number = d; default: number = nil }
                guard let number, range.contains(number) else {
                    throw .invalidParameter("\"\(key)[\(i)].\(field)\" must be a number in \(Int(range.lowerBound))...\(Int(range.upperBound)).")
                }
                rebuilt[field] = v
            }
            out.append(.object(rebuilt))
        }
        return out
    }
    /// An encoding id: a name of at most 64 bytes.
    static func checkEncodingId(_ s: String, key: String) throws(RoomError) {
        guard s.utf8.count <= 64 else { throw .invalidParameter("\"\(key)\" must be at most 64 characters.") }
        try checkName(s, key: key)
    }
    /// `preferredEncodingId`: an encoding id, and one of the publication's when it has encodings.
    static func checkPreferredEncoding(_ id: String?, of publication: RoomPublication?) throws(RoomError) {
        guard let id else { return }
        try checkEncodingId(id, key: "preferredEncodingId")
        guard let publication, !publication.encodings.isEmpty else { return }
        let known = publication.encodings.compactMap { $0["id"]?.stringValue }
        guard known.contains(id) else {
            throw .invalidParameter("preferredEncodingId '\(id)' is not one of the publication's encodings (\(known.joined(separator: ", "))).")
        }
    }

    /// `{type, sdp}` with the expected type.
    func sessionDescription(_ key: String, type: String) throws(RoomError) -> String {
        guard case .object(let o)? = raw[key] else { throw .invalidParams("\"\(key)\" must be {type:\"\(type)\", sdp}.") }
        guard o["type"]?.stringValue == type else { throw .invalidParams("\"\(key)\".type must be \"\(type)\".") }
        guard let sdp = o["sdp"]?.stringValue else { throw .invalidParams("\"\(key)\".sdp must be a string.") }
        return sdp
    }
}
