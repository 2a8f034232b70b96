/// The `m=application` section of WebRTC data channels (RFC 8841: SCTP over DTLS, one
/// association per BUNDLEd connection): reading a peer's and writing Minato's.
public enum SdpData {
    /// SCTP's port when `a=sctp-port` is absent (RFC 8841 5: 5000).
    public static let defaultSctpPort: UInt16 = 5000

    /// Whether `m` is a live data-channel section: `application`, a port (or bundle-only), an
    /// SCTP-over-DTLS protocol and the `webrtc-datachannel` format.
    public static func isDataChannelSection(_ m: MediaDescription) -> Bool {
        m.kind == "application" && (m.port != 0 || m.bundleOnly) && m.proto.uppercased().hasSuffix("DTLS/SCTP")
            && m.formats.contains("webrtc-datachannel")
    }

    /// The peer's SCTP port (`a=sctp-port`, 1...65535; the default when absent or malformed).
    public static func sctpPort(_ m: MediaDescription) -> UInt16 {
        guard let v = m.attributes.firstValue(named: "sctp-port"), let p = UInt16(decimal: Substring(v)), p > 0 else {
            return defaultSctpPort
        }
        return p
    }

    /// The peer's `a=max-message-size` (0: no limit, RFC 8841 6); nil when absent (then 64 KiB
    /// is assumed, RFC 8841 6) or malformed.
    public static func maxMessageSize(_ m: MediaDescription) -> Int? {
        m.attributes.firstValue(named: "max-message-size").flatMap { Int(decimal: Substring($0)) }
    }

    /// Minato's data-channel section: `m=application <port> UDP/DTLS/SCTP webrtc-datachannel`,
    /// the transport's attributes, the mid, `a=sctp-port:5000` and `a=max-message-size`
    /// (what the server accepts from one message), candidates when `includesCandidates`.
    public static func section(mid: String, transport: SdpLocalTransport, setup: DtlsSetup, maxMessageSize: Int,
                               includesCandidates: Bool, port: Int = 9, address: String = "127.0.0.1") -> MediaDescription {
        var a = transport.attributes(setup: setup)
        a.append(SdpAttribute(name: "mid", value: mid))
        a.append(SdpAttribute(name: "sctp-port", value: String(defaultSctpPort)))
        a.append(SdpAttribute(name: "max-message-size", value: String(maxMessageSize)))
        if includesCandidates { a += transport.candidateAttributes }
        return MediaDescription(kind: "application", port: port, proto: "UDP/DTLS/SCTP", formats: ["webrtc-datachannel"],
                                connection: "IN IP4 " + address, attributes: a)
    }
}
