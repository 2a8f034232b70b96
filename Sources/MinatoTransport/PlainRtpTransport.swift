internal import CNice
internal import CUsrsctp
internal import CMinatoShims
#if canImport(Glibc)
internal import Glibc
#endif
internal import MinatoMedia
internal import MinatoWire

/// Where a plain RTP egress transport sends: RTP to `rtpPort`, RTCP to `rtcpPort` of
/// `address` (a numeric IPv4 or IPv6 address), as a receiver without RTCP multiplexing
/// (GStreamer's `rtpbin`, FFmpeg with an SDP file) expects.
public struct PlainRemote: Sendable, Equatable {
    public var address: String
    public var rtpPort: UInt16
    public var rtcpPort: UInt16
    public init(address: String, rtpPort: UInt16, rtcpPort: UInt16) {
        self.address = address; self.rtpPort = rtpPort; self.rtcpPort = rtcpPort
    }
}

/// SRTP on a plain transport with keys given over the admin API (SDES-style, RFC 4568's
/// `a=crypto` key material): our master key and salt protects what we send, the remote's
/// unprotects what it sends. No DTLS: whoever knows the keys can read or inject.
public struct PlainSrtp: Sendable {
    public let profile: SrtpProfile
    public let localKeyAndSalt: [UInt8]
    public let remoteKeyAndSalt: [UInt8]

    public init(profile: SrtpProfile, localKeyAndSalt: [UInt8], remoteKeyAndSalt: [UInt8]) {
        self.profile = profile; self.localKeyAndSalt = localKeyAndSalt; self.remoteKeyAndSalt = remoteKeyAndSalt
    }

    /// The crypto suites a plain transport takes, by their SDES names (RFC 4568, RFC 7714).
    public static func profile(suite: String) -> SrtpProfile? {
        switch suite {
        case "AES_CM_128_HMAC_SHA1_80": return .aes128CmSha1_80
        case "AEAD_AES_128_GCM": return .aeadAes128Gcm
        default: return nil
        }
    }

    public static func suite(of profile: SrtpProfile) -> String {
        profile == .aeadAes128Gcm ? "AEAD_AES_128_GCM" : profile == .aeadAes256Gcm ? "AEAD_AES_256_GCM" : "AES_CM_128_HMAC_SHA1_80"
    }

    /// The length of a master key and salt of `profile` (30 bytes for AES-CM, 28 for AES-128-GCM).
    public static func keyAndSaltLength(_ profile: SrtpProfile) -> Int { profile.keyLength + profile.saltLength }
}

/// A plain transport as made: its id and the local port the remote's RTCP must be sent to.
public struct PlainTransportDescription: Sendable {
    public let id: TransportId
    public let address: String
    public let port: UInt16
}

/// An RTP egress transport without ICE or DTLS, and SRTP only with given keys (mediasoup's `PlainTransport` with
/// `comedia` off and `rtcpMux` off): one UDP socket, bound to an ephemeral port of the local
/// address of the remote's kind, sends the engine's RTP to the remote's RTP port and its RTCP
/// to the remote's RTCP port. What comes back on the socket is read as RTCP (receiver
/// reports, NACK, PLI) from the remote, for the engine like any subscriber's feedback; a
/// datagram from another address, or one that is not RTCP, is dropped (`plainUnexpected`).
/// Owned by its `WorkerCore`, on the worker's thread; the packet path allocates nothing.
///
/// An ingress transport (`ingress`) receives instead: RTP and RTCP on its one port (RTCP
/// multiplexed, as FFmpeg sends with `?rtcpport=` the same port and GStreamer with one
/// `udpsink`) from the remote's address, any port. The first datagram from that address names
/// the port the engine's feedback (receiver reports, PLI) goes back to (comedia).
final class PlainRtpTransport {
    let id: TransportId
    let index: TransportIndex
    let remote: PlainRemote
    let ingress: Bool
    /// Ingress: the sender's port is known (from its first datagram).
    private(set) var learnedPeer = false
    private(set) var fd: Int32 = -1
    private(set) var localPort: UInt16 = 0
    private var rtpPeer = sockaddr_storage()
    private var rtcpPeer = sockaddr_storage()
    private var peerLength: socklen_t = 0
    private var source: UnsafeMutablePointer<GSource>?
    /// One datagram read at a time into this (allocated once).
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 8)
    /// SRTP with the admin API's keys (`PlainSrtp`); nil: in the clear.
    let srtp: SrtpSession?

    enum Failure: Error, Equatable { case badAddress, socket(Int32) }

    init(id: TransportId, index: TransportIndex, remote: PlainRemote, ingress: Bool = false, srtp: SrtpSession? = nil) {
        self.id = id; self.index = index; self.remote = remote; self.ingress = ingress; self.srtp = srtp
    }

    deinit { buffer.deallocate() }

    /// Makes the socket (bound to the loopback or wildcard address of the remote's family) and
    /// watches it on `context`; `onReadable` runs on the worker's thread when datagrams wait.
    func open(context: OpaquePointer, worker: WorkerCore) throws(Failure) -> PlainTransportDescription {
        guard let (family, rtp, length) = Self.address(remote.address, port: remote.rtpPort),
              let (_, rtcp, _) = Self.address(remote.address, port: remote.rtcpPort) else { throw .badAddress }
        rtpPeer = rtp; rtcpPeer = rtcp; peerLength = length
        let s = socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw .socket(errno) }
        let loopback = remote.address == "127.0.0.1" || remote.address == "::1" || remote.address.hasPrefix("127.")
        var local = sockaddr_storage()
        let localText = family == AF_INET6 ? (loopback ? "::1" : "::") : (loopback ? "127.0.0.1" : "0.0.0.0")
        guard let (_, l, _) = Self.address(localText, port: 0) else { Glibc.close(s); throw .badAddress }
        local = l
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, length) }
        }
        guard bound == 0 else { let e = errno; Glibc.close(s); throw .socket(e) }
        var got = sockaddr_storage(), gotLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &got) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &gotLength) }
        }
        localPort = Self.port(of: got)
        fd = s
        // A GIOChannel watch (glib.h, which libnice's header includes already): CNice's header
        // stays libnice's alone.
        guard let channel = g_io_channel_unix_new(s), let src = g_io_create_watch(channel, GIOCondition(G_IO_IN.rawValue)) else {
            Glibc.close(s); fd = -1; throw .socket(0)
        }
        g_io_channel_unref(channel)   // the watch holds its own reference
        let callback: GIOFunc = { _, _, data in
            guard let data else { return 0 }
            let t = Unmanaged<PlainRtpTransport>.fromOpaque(data).takeUnretainedValue()
            t.worker?.plainReadable(t)
            return 1
        }
        self.worker = worker
        g_source_set_callback(src, unsafeBitCast(callback, to: GSourceFunc.self), Unmanaged.passUnretained(self).toOpaque(), nil)
        g_source_attach(src, context)
        source = src
        return PlainTransportDescription(id: id, address: localText, port: localPort)
    }

    /// For the C callback only (the transport never calls the worker otherwise).
    private(set) weak var worker: WorkerCore?

    func close() {
        if let source { g_source_destroy(source); g_source_unref(source) }
        source = nil
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        worker = nil
    }

    /// Reads one waiting datagram: its bytes (borrowed until the next read) and whether it came
    /// from the remote's address; nil when none waits.
    @inline(__always)
    func read() -> (UnsafeMutableRawBufferPointer, fromRemote: Bool)? {
        var from = sockaddr_storage(), fromLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let n = withUnsafeMutablePointer(to: &from) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                recvfrom(fd, buffer.baseAddress, buffer.count, 0, $0, &fromLength)
            }
        }
        guard n >= 0 else { return nil }
        let fromRemote = sameHost(from)
        if ingress, fromRemote, !learnedPeer {
            rtpPeer = from
            rtcpPeer = from
            learnedPeer = true
        }
        return (UnsafeMutableRawBufferPointer(rebasing: buffer[0..<n]), fromRemote)
    }

    /// Sends one datagram to the remote's RTP or RTCP port; false when the kernel refused it.
    @inline(__always)
    func send(_ bytes: UnsafeMutableRawPointer, length: Int, rtcp: Bool) -> Bool {
        guard fd >= 0, !ingress || learnedPeer else { return false }
        let n: Int = rtcp
            ? withUnsafePointer(to: &rtcpPeer) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, bytes, length, Int32(MSG_DONTWAIT), $0, peerLength) } }
            : withUnsafePointer(to: &rtpPeer) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, bytes, length, Int32(MSG_DONTWAIT), $0, peerLength) } }
        return n == length
    }

    private func sameHost(_ from: sockaddr_storage) -> Bool {
        var a = from, b = rtpPeer
        guard a.ss_family == b.ss_family else { return false }
        if Int32(a.ss_family) == AF_INET {
            let x = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr } }
            let y = withUnsafePointer(to: &b) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr } }
            return x == y
        }
        let x = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr } }
        let y = withUnsafePointer(to: &b) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr } }
        return withUnsafeBytes(of: x) { p in withUnsafeBytes(of: y) { q in p.elementsEqual(q) } }
    }

    /// A numeric address and port as a socket address (nil: not a numeric IPv4/IPv6 address).
    static func address(_ text: String, port: UInt16) -> (Int32, sockaddr_storage, socklen_t)? {
        var storage = sockaddr_storage()
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    $0.pointee.sin_family = sa_family_t(AF_INET)
                    $0.pointee.sin_port = port.bigEndian
                    $0.pointee.sin_addr = v4
                }
            }
            return (AF_INET, storage, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    $0.pointee.sin6_family = sa_family_t(AF_INET6)
                    $0.pointee.sin6_port = port.bigEndian
                    $0.pointee.sin6_addr = v6
                }
            }
            return (AF_INET6, storage, socklen_t(MemoryLayout<sockaddr_in6>.size))
        }
        return nil
    }

    static func port(of s: sockaddr_storage) -> UInt16 {
        var s = s
        if Int32(s.ss_family) == AF_INET {
            return withUnsafePointer(to: &s) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) } }
        }
        return withUnsafePointer(to: &s) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) } }
    }
}
