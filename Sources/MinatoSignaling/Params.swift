public import MinatoRooms

/// Typed access to a JSON-RPC request's params; a missing or mistyped value is an exact
/// protocol error (`invalidParams`). Values are checked further by the room core.
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
    /// `dataChannel`: `{label, ordered?, maxRetransmits?}` of the right types, or nil when absent.
    func dataChannel(_ key: String) throws(RoomError) -> DataChannelOptions? {
        guard let v = raw[key], v != .null else { return nil }
        guard case .object(let o) = v else { throw .invalidParams("\"\(key)\" must be an object.") }
        let inner = Params(o)
        for k in o.keys where !["label", "ordered", "maxRetransmits"].contains(k) {
            throw .invalidParams("\"\(key)\" has an unknown key \"\(k.prefix(64))\" (label, ordered, maxRetransmits).")
        }
        return DataChannelOptions(label: try inner.string("label"), ordered: try inner.optionalBool("ordered"),
                                  maxRetransmits: try inner.optionalInt("maxRetransmits"))
    }
    /// `encodings`: SkyWay's `[{id, maxBitrate?, scaleResolutionDownBy?, maxFramerate?}]`, of
    /// the right types and no other keys (ranges and the count limit are the core's checks).
    func encodings(_ key: String) throws(RoomError) -> [Encoding] {
        guard let list = try optionalArray(key) else { return [] }
        var out: [Encoding] = []
        out.reserveCapacity(min(list.count, 64))
        for (i, entry) in list.enumerated() {
            guard case .object(let o) = entry else {
                throw .invalidParameter("\"\(key)[\(i)]\" must be an object {id, maxBitrate?, scaleResolutionDownBy?, maxFramerate?}.")
            }
            for k in o.keys where !["id", "maxBitrate", "scaleResolutionDownBy", "maxFramerate"].contains(k) {
                throw .invalidParameter("\"\(key)[\(i)]\" has an unknown key (allowed: id, maxBitrate, scaleResolutionDownBy, maxFramerate).")
            }
            guard let id = o["id"]?.stringValue else { throw .invalidParameter("\"\(key)[\(i)].id\" must be a string.") }
            var e = Encoding(id: id)
            if let v = o["maxBitrate"], v != .null {
                guard let b = v.intValue else { throw .invalidParameter("\"\(key)[\(i)].maxBitrate\" must be an integer (bits per second).") }
                e.maxBitrate = b
            }
            e.scaleResolutionDownBy = try Self.number(o["scaleResolutionDownBy"], "\(key)[\(i)].scaleResolutionDownBy")
            e.maxFramerate = try Self.number(o["maxFramerate"], "\(key)[\(i)].maxFramerate")
            out.append(e)
        }
        return out
    }

    /// `codecCapabilities`: `[{mimeType}]` as in a publication (SkyWay's shape), no other keys;
    /// nil when absent. The count and the MIME types' form are the core's checks.
    func codecCapabilities(_ key: String) throws(RoomError) -> [String]? {
        guard let list = try optionalArray(key) else { return nil }
        var out: [String] = []
        for (i, entry) in list.enumerated() {
            guard case .object(let o) = entry, o.count == 1, let m = o["mimeType"]?.stringValue else {
                throw .invalidParameter("\"\(key)[\(i)]\" must be an object {mimeType}.")
            }
            out.append(m)
        }
        return out
    }

    private static func number(_ v: JSONValue?, _ key: String) throws(RoomError) -> Double? {
        switch v {
        case nil, .null?: return nil
        case .int(let n)?: return Double(n)
        case .double(let d)?: return d
        default: throw .invalidParameter("\"\(key)\" must be a number.")
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
