/// The core's checks of request values (names, metadata, passwords, encodings, candidates):
/// each failure is an exact protocol error, the same whichever front door the request came by.
enum Validate {
    /// A SkyWay name: `^[A-Za-z0-9._%*-]{1,128}$`.
    static func name(_ s: String?, key: String) throws(RoomError) -> String? {
        guard let s else { return nil }
        try checkName(s, key: key)
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
    static func metadata(_ s: String?, key: String) throws(RoomError) -> String? {
        guard let s else { return nil }
        guard s.utf8.count <= 4096 else { throw .invalidParameter("\"\(key)\" is \(s.utf8.count) bytes; metadata may be at most 4096.") }
        return s
    }

    /// A room password: at most `RoomConfiguration.maxPasswordBytes` bytes.
    static func password(_ s: String?, key: String) throws(RoomError) -> String? {
        guard let s else { return nil }
        guard s.utf8.count <= RoomConfiguration.maxPasswordBytes else {
            throw .invalidParameter("\"\(key)\" is \(s.utf8.count) bytes; a password may be at most \(RoomConfiguration.maxPasswordBytes).")
        }
        return s
    }

    /// A subscriber's `codecCapabilities`: at most 64 MIME types of the form `kind/name`, each at
    /// most 64 bytes of printable ASCII.
    static func codecCapabilities(_ list: [String]?, key: String) throws(RoomError) -> [String]? {
        guard let list else { return nil }
        guard list.count <= 64 else { throw .invalidParameter("\"\(key)\" has \(list.count) entries; at most 64 are allowed.") }
        for (i, m) in list.enumerated() {
            let parts = m.split(separator: "/", omittingEmptySubsequences: false)
            guard m.utf8.count <= 64, parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty,
                  m.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw .invalidParameter("\"\(key)[\(i)].mimeType\" must be a MIME type such as video/VP8 (at most 64 characters).")
            }
        }
        return list
    }

    /// A publication's `encodings`: at most `max` (`rooms.maxEncodings`), ids unique, values in range.
    static func encodings(_ list: [Encoding], key: String, max: Int) throws(RoomError) -> [Encoding] {
        guard list.count <= max else {
            throw .limitExceeded("\"\(key)\" has \(list.count) entries; at most \(max) are allowed (rooms.maxEncodings).")
        }
        var ids: Set<String> = []
        for (i, e) in list.enumerated() {
            try encodingId(e.id, key: "\(key)[\(i)].id")
            guard ids.insert(e.id).inserted else { throw .invalidParameter("\"\(key)\" names the id '\(e.id)' twice.") }
            if let b = e.maxBitrate, !(1...1_000_000_000).contains(b) {
                throw .invalidParameter("\"\(key)[\(i)].maxBitrate\" must be an integer in 1...1000000000 (bits per second).")
            }
            if let s = e.scaleResolutionDownBy, !(1.0...64.0).contains(s) {
                throw .invalidParameter("\"\(key)[\(i)].scaleResolutionDownBy\" must be a number in 1...64.")
            }
            if let f = e.maxFramerate, !(1.0...240.0).contains(f) {
                throw .invalidParameter("\"\(key)[\(i)].maxFramerate\" must be a number in 1...240.")
            }
        }
        return list
    }

    /// An encoding id: a name of at most 64 bytes.
    static func encodingId(_ s: String, key: String) throws(RoomError) {
        guard s.utf8.count <= 64 else { throw .invalidParameter("\"\(key)\" must be at most 64 characters.") }
        try checkName(s, key: key)
    }

    /// `preferredEncodingId`: an encoding id, and one of the publication's when it has encodings.
    static func preferredEncoding(_ id: String?, of publication: RoomPublication?, key: String = "preferredEncodingId") throws(RoomError) {
        guard let id else { return }
        try encodingId(id, key: key)
        guard let publication, !publication.encodings.isEmpty else { return }
        let known = publication.encodings.compactMap { $0["id"]?.stringValue }
        guard known.contains(id) else {
            throw .invalidParameter("\(key) '\(id)' is not one of the publication's encodings (\(known.joined(separator: ", "))).")
        }
    }

    /// A trickled candidate line (nil or empty = end of candidates), at most
    /// `RoomConfiguration.maxCandidateLineBytes` bytes.
    static func candidate(_ text: String?) throws(RoomError) -> String? {
        guard let text, !text.isEmpty else { return nil }
        guard text.utf8.count <= RoomConfiguration.maxCandidateLineBytes else {
            throw .invalidParameter("The candidate is \(text.utf8.count) bytes; a candidate line may be at most \(RoomConfiguration.maxCandidateLineBytes).")
        }
        guard text.hasPrefix("candidate:") || text.hasPrefix("a=candidate:") else {
            throw .invalidParameter("'\(text.prefix(80))' is not an ICE candidate line (it must start with 'candidate:').")
        }
        return text
    }
}
