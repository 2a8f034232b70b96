// What one m-section says about each payload type (its rtpmap, fmtp and rtcp-fb lines, whether
// the m= line lists it), read in one pass so that every lookup by payload type afterwards is
// O(1): reading a description stays linear in its length however its lines are arranged.
// Control path; a plain value.

/// The payload-type attributes of one m-section, by payload type 0...127: whether the m= line
/// lists it (and the distinct listed ones in m= line order), its first `a=rtpmap` (as
/// `MediaDescription.rtpMap(for:)` reads it), its first `a=fmtp` and its `a=rtcp-fb` values,
/// wildcard (`*`) lines included, in line order (as `fmtp(for:)` / `rtcpFeedback(for:)` match:
/// the payload type written exactly as `String(pt)`).
public struct PayloadTypeIndex: Sendable {
    /// Distinct payload types 0...127 of the m= line, in its order.
    public private(set) var listed: [UInt8] = []
    private var isListed = [Bool](repeating: false, count: 128)
    private var maps = [RtpMap?](repeating: nil, count: 128)
    private var fmtps = [String?](repeating: nil, count: 128)
    /// rtcp-fb lines of each payload type, and wildcard ones: (line order, value).
    private var feedback = [[(Int, String)]](repeating: [], count: 128)
    private var wildcardFeedback: [(Int, String)] = []

    public init(_ m: MediaDescription) {
        for f in m.formats {
            guard let pt = UInt8(decimal: f), pt <= 127, !isListed[Int(pt)] else { continue }
            isListed[Int(pt)] = true
            listed.append(pt)
        }
        for (order, a) in m.attributes.enumerated() {
            switch a.name {
            case "rtpmap":
                if let map = RtpMap(attributeValue: a.value ?? ""), maps[Int(map.payloadType)] == nil { maps[Int(map.payloadType)] = map }
            case "fmtp":
                if let (pt, rest) = Self.payloadType(of: a.value), fmtps[Int(pt)] == nil { fmtps[Int(pt)] = rest }
            case "rtcp-fb":
                guard let v = a.value, let (ptText, rest) = v.splitPayloadType() else { continue }
                if ptText == "*" {
                    wildcardFeedback.append((order, rest))
                } else if let pt = Self.canonical(ptText) {
                    feedback[Int(pt)].append((order, rest))
                }
            default:
                continue
            }
        }
    }

    /// Whether the m= line lists `pt`.
    public func lists(_ pt: UInt8) -> Bool { pt <= 127 && isListed[Int(pt)] }

    /// The first `a=rtpmap` of `pt`.
    public func rtpMap(for pt: UInt8) -> RtpMap? { pt <= 127 ? maps[Int(pt)] : nil }

    /// The parameters of the first `a=fmtp` of `pt`.
    public func fmtp(for pt: UInt8) -> String? { pt <= 127 ? fmtps[Int(pt)] : nil }

    /// `a=rtcp-fb` values of `pt` and of `*`, in line order.
    public func rtcpFeedback(for pt: UInt8) -> [String] {
        guard pt <= 127 else { return [] }
        let own = feedback[Int(pt)], any = wildcardFeedback
        if any.isEmpty { return own.map(\.1) }
        if own.isEmpty { return any.map(\.1) }
        var out: [String] = []
        out.reserveCapacity(own.count + any.count)
        var i = 0, k = 0
        while i < own.count || k < any.count {
            if k == any.count || (i < own.count && own[i].0 < any[k].0) {
                out.append(own[i].1); i += 1
            } else {
                out.append(any[k].1); k += 1
            }
        }
        return out
    }

    /// "<pt> <rest>" with `pt` written as `String(pt)` for a pt in 0...127.
    private static func payloadType(of value: String?) -> (UInt8, String)? {
        guard let value, let (ptText, rest) = value.splitPayloadType(), let pt = canonical(ptText) else { return nil }
        return (pt, rest)
    }

    /// `text` as a payload type 0...127 when it is written as `String(pt)` (no sign, no leading zero).
    private static func canonical(_ text: String) -> UInt8? {
        guard let pt = UInt8(decimal: text), pt <= 127, String(pt) == text else { return nil }
        return pt
    }
}

extension MediaDescription {
    /// This m-section's payload-type attributes, read in one pass (see `PayloadTypeIndex`).
    public var payloadTypeIndex: PayloadTypeIndex { PayloadTypeIndex(self) }
}
