// The two formats that may travel beside a forwarded codec in one m-section: RTX (RFC 4588,
// `a=rtpmap:<pt> rtx/90000` with `a=fmtp:<pt> apt=<codec pt>`) for video retransmissions,
// and RED (RFC 2198, `a=rtpmap:<pt> red/48000/2` with `a=fmtp:<pt> <opus pt>/<opus pt>`)
// for redundant opus. Read from a peer's m-section only when the payload type is on the m=
// line (0...127) with an rtpmap and fmtp of exactly that shape; written by `RtpMediaSection`
// from numbers alone, never from the peer's text. Control path; plain values.

extension MediaDescription {
    /// The first payload type on the m= line that is an RTX format (RFC 4588) for
    /// `payloadType`: video only, `rtx/90000` (name ASCII case-insensitive, no channel count),
    /// fmtp with exactly one `apt`, `apt=<payloadType>`; nil when there is none.
    public func rtxPayloadType(associatedWith payloadType: UInt8) -> UInt8? {
        let index = payloadTypeIndex
        return index.listed.first { $0 != payloadType && isRtxFormat($0, associatedWith: payloadType, index) }
    }

    /// The first payload type on the m= line that is a RED format (RFC 2198) of opus
    /// `payloadType` alone: audio only, `red/48000` (channel count absent or 2), fmtp
    /// `<payloadType>/<payloadType>`; nil when there is none.
    public func redPayloadType(wrapping payloadType: UInt8) -> UInt8? {
        let index = payloadTypeIndex
        return index.listed.first { $0 != payloadType && isRedFormat($0, wrapping: payloadType, index) }
    }

    /// Whether `pt` is on the m= line and described as RTX for `apt` (see `rtxPayloadType`).
    public func isRtxFormat(_ pt: UInt8, associatedWith apt: UInt8) -> Bool { isRtxFormat(pt, associatedWith: apt, payloadTypeIndex) }

    /// Whether `pt` is on the m= line and described as RED of `primary` (see `redPayloadType`).
    public func isRedFormat(_ pt: UInt8, wrapping primary: UInt8) -> Bool { isRedFormat(pt, wrapping: primary, payloadTypeIndex) }

    /// `isRtxFormat` read from this m-section's `index`.
    func isRtxFormat(_ pt: UInt8, associatedWith apt: UInt8, _ index: PayloadTypeIndex) -> Bool {
        guard kind == "video", pt <= 127, pt != apt, index.lists(pt), let map = index.rtpMap(for: pt),
              map.encodingName.asciiLowercased == "rtx", map.clockRate == 90_000, map.channels == nil,
              let fmtp = index.fmtp(for: pt) else { return false }
        let apts = FmtpParameters(parsing: fmtp).parameters.filter { $0.key.asciiLowercased == "apt" }
        return apts.count == 1 && apts[0].value == String(apt)
    }

    /// `isRedFormat` read from this m-section's `index`.
    func isRedFormat(_ pt: UInt8, wrapping primary: UInt8, _ index: PayloadTypeIndex) -> Bool {
        guard kind == "audio", pt <= 127, pt != primary, index.lists(pt), let map = index.rtpMap(for: pt),
              map.encodingName.asciiLowercased == "red", map.clockRate == 48_000, map.channels == nil || map.channels == 2,
              let fmtp = index.fmtp(for: pt) else { return false }
        let blocks = fmtp.split(separator: " ", omittingEmptySubsequences: true)
        guard blocks.count == 1 else { return false }
        let pts = blocks[0].split(separator: "/", omittingEmptySubsequences: false)
        return pts.count == 2 && pts.allSatisfy { $0 == String(primary) }
    }

}

/// The RTX and RED lines Minato writes for one codec (numbers only).
enum RtxRedAttributes {
    /// `a=rtpmap:<rtx> rtx/90000`, `a=fmtp:<rtx> apt=<pt>`.
    static func rtx(_ rtx: UInt8, associatedWith pt: UInt8) -> [SdpAttribute] {
        [SdpAttribute(name: "rtpmap", value: "\(rtx) rtx/90000"), SdpAttribute(name: "fmtp", value: "\(rtx) apt=\(pt)")]
    }

    /// `a=rtpmap:<red> red/48000/2`, `a=fmtp:<red> <pt>/<pt>`.
    static func red(_ red: UInt8, wrapping pt: UInt8) -> [SdpAttribute] {
        [SdpAttribute(name: "rtpmap", value: "\(red) red/48000/2"), SdpAttribute(name: "fmtp", value: "\(red) \(pt)/\(pt)")]
    }
}
