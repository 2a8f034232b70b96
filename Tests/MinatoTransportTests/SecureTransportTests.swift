import Testing
import Foundation
@testable import MinatoTransport
import MinatoMedia
import MinatoWire

/// Two `SecureTransport`s (the server's and the client SDK's one implementation) wired back to
/// back through memory: real OpenSSL DTLS and real libsrtp, no socket, a simulated clock for
/// the connect and media timeouts.
final class MemoryLink {
    let server: SecureTransport
    let client: SecureTransport
    /// Updates each side reported while pumping, in order.
    var serverUpdates: [TransportUpdate] = []
    var clientUpdates: [TransportUpdate] = []
    /// Datagrams each side sent (before any drop), for counting flights.
    var serverSent = 0
    var clientSent = 0
    /// Drops the next `n` datagrams the client sends (a lossy network).
    var dropFromClient = 0
    var dropFromServer = 0
    static let serverRuntime = try! CryptoRuntime()
    static let clientRuntime = try! CryptoRuntime()

    init(now: Nanoseconds = 0, timeouts: TransportTimeouts = TransportTimeouts(connect: 20_000_000_000, media: 30_000_000_000),
         clientProfiles: String? = nil, clientRetransmitMicroseconds: UInt32? = nil) throws {
        server = try SecureTransport(runtime: Self.serverRuntime, now: now, timeouts: timeouts)
        client = try SecureTransport(runtime: Self.clientRuntime, now: now, timeouts: timeouts,
                                     srtpProfiles: clientProfiles, dtlsRetransmitMicroseconds: clientRetransmitMicroseconds)
    }

    static func fingerprint(_ runtime: CryptoRuntime) -> (algorithm: String, value: String) {
        let parts = runtime.fingerprint.split(separator: " ")
        return (String(parts[0]), String(parts[1]))
    }

    /// The SDP exchange (server answers actpass with passive... here: client active) and ICE up on both.
    func signalAndConnectIce(serverFingerprint: (algorithm: String, value: String)? = nil) {
        serverUpdates.append(server.setRemote(fingerprint: serverFingerprint ?? Self.fingerprint(Self.clientRuntime), role: .server))
        clientUpdates.append(client.setRemote(fingerprint: Self.fingerprint(Self.serverRuntime), role: .client))
        serverUpdates.append(server.iceChanged(.connected))
        clientUpdates.append(client.iceChanged(.connected))
    }

    /// Moves DTLS datagrams both ways until neither side has anything to send.
    func pump(now: Nanoseconds = 0) {
        var moved = true
        while moved {
            moved = false
            while let d = client.pollDatagram() {
                moved = true
                clientSent += 1
                if dropFromClient > 0 { dropFromClient -= 1; continue }
                deliver(d, to: server, now: now) { self.serverUpdates.append($0) }
            }
            while let d = server.pollDatagram() {
                moved = true
                serverSent += 1
                if dropFromServer > 0 { dropFromServer -= 1; continue }
                deliver(d, to: client, now: now) { self.clientUpdates.append($0) }
            }
        }
    }

    private func deliver(_ d: [UInt8], to t: SecureTransport, now: Nanoseconds, _ report: (TransportUpdate) -> Void) {
        var copy = d
        copy.withUnsafeMutableBytes { b in
            if case .handshake(let u) = t.received(b, now: now, expects: { _, _ in true }) { report(u) }
        }
    }

    var failures: [TransportCloseReason] {
        (serverUpdates + clientUpdates).compactMap { if case .failed(let r) = $0 { return r } else { return nil } }
    }
}

/// An RTP packet of `payloadBytes` bytes with room for the SRTP trailer.
func rtpPacket(ssrc: UInt32, sequence: UInt16, payloadBytes: Int = 100) -> [UInt8] {
    var p = [UInt8](repeating: 0, count: 12 + payloadBytes + SrtpSession.maxTrailer)
    p.withUnsafeMutableBytes { b in
        _ = RtpPacketView.writeHeader(into: b, payloadType: 96, sequenceNumber: sequence, timestamp: 1000, ssrc: ssrc)
        for i in 0..<payloadBytes { b[12 + i] = UInt8(truncatingIfNeeded: i &+ Int(sequence)) }
    }
    return p
}

/// Protects `clear` (its first `length` bytes) with `from` and has `to` receive it; the outcome's
/// clear bytes, or the outcome itself when it is not media.
enum Delivered: Equatable { case rtp([UInt8]), rtcp([UInt8]), dropped(DropReason), handshake }

func send(_ clear: [UInt8], length: Int, rtcp: Bool = false, from: SecureTransport, to: SecureTransport, now: Nanoseconds,
          expects: (UInt32, UnsafeMutableRawBufferPointer) -> Bool = { _, _ in true }) -> Delivered {
    var buffer = clear
    return buffer.withUnsafeMutableBytes { b -> Delivered in
        guard let srtp = from.srtp, let base = b.baseAddress,
              let n = rtcp ? srtp.protectRtcp(base, length: length) : srtp.protectRtp(base, length: length)
        else { return .dropped(.srtpProtectFailed) }
        switch to.received(UnsafeMutableRawBufferPointer(rebasing: b[0..<n]), now: now, expects: expects) {
        case .rtp(let p): return .rtp(Array(p))
        case .rtcp(let p): return .rtcp(Array(p))
        case .dropped(let r): return .dropped(r)
        case .handshake: return .handshake
        }
    }
}

@Suite("SecureTransport: DTLS and SRTP over memory")
struct SecureTransportTests {
    @Test("a real DTLS handshake over memory keys SRTP, and media flows both ways", arguments: [
        ("SRTP_AEAD_AES_128_GCM", SrtpProfile.aeadAes128Gcm),
        ("SRTP_AEAD_AES_256_GCM", SrtpProfile.aeadAes256Gcm),
        ("SRTP_AES128_CM_SHA1_80", SrtpProfile.aes128CmSha1_80),
    ])
    func handshakeAndMedia(offered: String, profile: SrtpProfile) throws {
        let link = try MemoryLink(clientProfiles: offered)
        link.signalAndConnectIce()
        link.pump()
        #expect(link.serverUpdates.contains(.connected))
        #expect(link.clientUpdates.contains(.connected))
        #expect(link.failures.isEmpty)
        #expect(link.server.state == .connected && link.client.state == .connected)
        #expect(link.server.srtpProfile == profile && link.client.srtpProfile == profile)

        // Client -> server RTP, decrypted in place to the same bytes.
        for seq: UInt16 in 1...20 {
            let clear = rtpPacket(ssrc: 0x1234, sequence: seq)
            let got = send(clear, length: 112, from: link.client, to: link.server, now: 1_000_000_000)
            #expect(got == .rtp(Array(clear[0..<112])))
        }
        // Server -> client RTCP (a receiver report header) the other way.
        var rr = [UInt8](repeating: 0, count: 8 + SrtpSession.maxTrailer + 4)
        rr[0] = 0x80; rr[1] = 201; rr[3] = 1
        rr[4] = 0xAB; rr[5] = 0xCD; rr[6] = 0xEF; rr[7] = 0x01
        #expect(send(rr, length: 8, rtcp: true, from: link.server, to: link.client, now: 1) == .rtcp(Array(rr[0..<8])))
        // A replayed packet and a forged one fail authentication.
        var replay = rtpPacket(ssrc: 0x1234, sequence: 21)
        let n = replay.withUnsafeMutableBytes { link.client.srtp?.protectRtp($0.baseAddress!, length: 112) } ?? 0
        var first = replay, second = replay
        let a = first.withUnsafeMutableBytes { link.server.received(UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), now: 2) { _, _ in true } }
        let b = second.withUnsafeMutableBytes { link.server.received(UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), now: 2) { _, _ in true } }
        if case .rtp = a {} else { Issue.record("the first copy should decrypt: \(a)") }
        if case .dropped(.srtpUnprotectFailed) = b {} else { Issue.record("a replay must be refused: \(b)") }
        replay[n - 1] ^= 0xFF
        let forged = replay.withUnsafeMutableBytes { link.server.received(UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), now: 2) { _, _ in true } }
        if case .dropped(.srtpUnprotectFailed) = forged {} else { Issue.record("a forged tag must be refused: \(forged)") }
    }

    @Test("receive checks run in order: no SRTP yet, unknown SSRC before libsrtp, short RTP, non-media")
    func receiveDrops() throws {
        let link = try MemoryLink()
        var early = rtpPacket(ssrc: 7, sequence: 1)
        let before = early.withUnsafeMutableBytes { link.server.received($0, now: 0) { _, _ in true } }
        if case .dropped(.noSrtpSession) = before {} else { Issue.record("\(before)") }
        link.signalAndConnectIce()
        link.pump()
        let unknown = send(rtpPacket(ssrc: 99, sequence: 1), length: 112, from: link.client, to: link.server, now: 1) { ssrc, _ in ssrc != 99 }
        #expect(unknown == .dropped(.unknownSsrc))
        var short: [UInt8] = [0x80, 96, 0, 1, 0, 0]
        let s = short.withUnsafeMutableBytes { link.server.received($0, now: 1) { _, _ in true } }
        if case .dropped(.malformedRtp) = s {} else { Issue.record("\(s)") }
        var junk: [UInt8] = [0xFF, 1, 2, 3]
        let j = junk.withUnsafeMutableBytes { link.server.received($0, now: 1) { _, _ in true } }
        if case .dropped(.unknownPacket) = j {} else { Issue.record("\(j)") }
    }

    @Test("a lost ClientHello is retransmitted by the DTLS timer and the handshake completes")
    func dtlsRetransmission() throws {
        // OpenSSL times retransmissions on the real clock: a 20 ms constant timeout keeps this
        // short (OpenSSL counts less than 15 ms left as expired).
        let link = try MemoryLink(timeouts: TransportTimeouts(connect: 0, media: 0), clientRetransmitMicroseconds: 20_000)
        link.dropFromClient = 1
        link.signalAndConnectIce()
        link.pump()
        #expect(link.clientSent == 1)
        #expect(link.server.state == .connecting && link.client.state == .connecting)
        #expect(link.client.deadline(now: 0) < .max, "a DTLS client with a flight out has a retransmission deadline")
        var rounds = 0
        while link.client.state != .connected && rounds < 1000 {
            rounds += 1
            usleep(2000)
            link.clientUpdates.append(link.client.handleTimeout(now: 0))
            link.pump()
        }
        #expect(link.client.state == .connected && link.server.state == .connected)
        #expect(link.clientSent >= 3, "the ClientHello again, then the client's second flight")
        #expect(link.failures.isEmpty)
    }

    @Test("DTLS gives up after its retransmissions when the peer never answers (handshakeTimedOut)")
    func dtlsHandshakeTimesOut() throws {
        let link = try MemoryLink(timeouts: TransportTimeouts(connect: 0, media: 0), clientRetransmitMicroseconds: 20_000)
        link.dropFromClient = .max
        link.signalAndConnectIce()
        var rounds = 0
        while link.failures.isEmpty && rounds < 2000 {
            rounds += 1
            usleep(2000)
            link.clientUpdates.append(link.client.handleTimeout(now: 0))
            link.pump()
        }
        #expect(link.failures == [.dtlsFailed(.handshakeTimedOut)])
        #expect(link.clientSent > 10, "OpenSSL retransmits its flight a dozen times before it gives up")
        #expect(link.client.state == .closed)
        #expect(link.client.handleTimeout(now: 0) == .none, "a failure is reported once")
    }

    @Test("the connect timeout fires at createdAt + connect on the simulated clock, once")
    func connectTimeout() throws {
        let t0: Nanoseconds = 5_000_000_000
        let link = try MemoryLink(now: t0, timeouts: TransportTimeouts(connect: 20_000_000_000, media: 30_000_000_000))
        // Signalled, ICE never connects: only the connect timeout is pending.
        _ = link.server.setRemote(fingerprint: MemoryLink.fingerprint(MemoryLink.clientRuntime), role: .server)
        #expect(link.server.deadline(now: t0) == t0 + 20_000_000_000)
        #expect(link.server.handleTimeout(now: t0 + 19_999_999_999) == .none)
        #expect(link.server.handleTimeout(now: t0 + 20_000_000_000) == .failed(.connectTimeout(.seconds(20))))
        #expect(link.server.handleTimeout(now: t0 + 40_000_000_000) == .none)
        #expect(link.server.deadline(now: t0) == .max)
        // Disabled (0): no deadline at all.
        let never = try MemoryLink(timeouts: TransportTimeouts(connect: 0, media: 0))
        #expect(never.server.deadline(now: 0) == .max)
        #expect(never.server.handleTimeout(now: .max) == .none)
    }

    @Test("the media timeout counts from the last decrypted packet and moves with traffic")
    func mediaTimeout() throws {
        let media: Nanoseconds = 30_000_000_000
        let link = try MemoryLink(timeouts: TransportTimeouts(connect: 20_000_000_000, media: media))
        link.signalAndConnectIce()
        link.pump()
        #expect(link.server.state == .connected)
        // Connected but nothing received yet: the media timeout starts with the first packet.
        #expect(link.server.deadline(now: 1) == .max)
        #expect(send(rtpPacket(ssrc: 1, sequence: 1), length: 112, from: link.client, to: link.server, now: 1_000_000_000) != .handshake)
        #expect(link.server.deadline(now: 1_000_000_000) == 1_000_000_000 + media)
        _ = send(rtpPacket(ssrc: 1, sequence: 2), length: 112, from: link.client, to: link.server, now: 10_000_000_000)
        #expect(link.server.deadline(now: 10_000_000_000) == 10_000_000_000 + media)
        #expect(link.server.handleTimeout(now: 1_000_000_000 + media) == .none, "traffic moved the deadline")
        #expect(link.server.handleTimeout(now: 10_000_000_000 + media) == .failed(.mediaTimeout(.seconds(30))))
        #expect(link.server.state == .closed)
        // Closed: close_notify was queued for the peer, which reports the DTLS close.
        link.pump()
        #expect(link.clientUpdates.last == .failed(.dtlsFailed(.peerClosed)))
    }

    @Test("consent heard (an ICE check) keeps a transport whose media stopped; silence closes it")
    func consentKeepsAMutedTransport() throws {
        let media: Nanoseconds = 10_000_000_000
        let link = try MemoryLink(timeouts: TransportTimeouts(connect: 20_000_000_000, media: media, consent: 30_000_000_000))
        link.signalAndConnectIce()
        link.pump()
        _ = send(rtpPacket(ssrc: 1, sequence: 1), length: 112, from: link.client, to: link.server, now: 1_000_000_000)
        #expect(link.server.deadline(now: 1_000_000_000) == 1_000_000_000 + media)
        // Media stops; the client's consent checks go on every 5 s (its driver reports them).
        for t: Nanoseconds in [6_000_000_000, 11_000_000_000, 16_000_000_000] {
            #expect(link.server.handleTimeout(now: t - 1) == .none)
            link.server.heard(at: t)
        }
        #expect(link.server.deadline(now: 16_000_000_000) == 16_000_000_000 + media)
        link.server.heard(at: 2_000_000_000)   // an older time changes nothing
        #expect(link.server.deadline(now: 16_000_000_000) == 16_000_000_000 + media)
        #expect(link.server.handleTimeout(now: 26_000_000_000 - 1) == .none)
        // Then nothing at all: closed media.transportTimeout after the last check.
        #expect(link.server.handleTimeout(now: 26_000_000_000) == .failed(.mediaTimeout(.seconds(10))))
    }

    @Test("a connected transport that never carried media closes after the consent timeout of silence")
    func consentTimeoutWithoutMedia() throws {
        let consent: Nanoseconds = 30_000_000_000
        let t0: Nanoseconds = 2_000_000_000
        let link = try MemoryLink(now: t0, timeouts: TransportTimeouts(connect: 20_000_000_000, media: 10_000_000_000, consent: consent))
        link.signalAndConnectIce()
        link.pump(now: t0)
        #expect(link.server.state == .connected)
        // No media and nothing reported heard: from the transport's creation.
        #expect(link.server.deadline(now: t0) == t0 + consent)
        link.server.heard(at: t0 + 25_000_000_000)
        #expect(link.server.deadline(now: t0) == t0 + 25_000_000_000 + consent)
        #expect(link.server.handleTimeout(now: t0 + 25_000_000_000 + consent - 1) == .none)
        #expect(link.server.handleTimeout(now: t0 + 25_000_000_000 + consent) == .failed(.consentTimeout(.seconds(30))))
        // Disabled (0): never.
        let never = try MemoryLink(timeouts: TransportTimeouts(connect: 20_000_000_000, media: 10_000_000_000, consent: 0))
        never.signalAndConnectIce()
        never.pump()
        #expect(never.server.deadline(now: 0) == .max)
    }

    @Test("ICE failure closes the transport with iceFailed, reported once")
    func iceFailed() throws {
        let link = try MemoryLink()
        link.signalAndConnectIce()
        link.pump()
        #expect(link.server.iceChanged(.failed) == .failed(.iceFailed))
        #expect(link.server.iceChanged(.failed) == .none)
        #expect(link.server.srtp == nil)
    }

    @Test("a certificate that does not match the SDP fingerprint fails DTLS (fingerprintMismatch)")
    func fingerprintMismatch() throws {
        let link = try MemoryLink()
        let wrong = MemoryLink.fingerprint(MemoryLink.serverRuntime)   // the server's own, not the client's
        link.signalAndConnectIce(serverFingerprint: wrong)
        link.pump()
        #expect(link.serverUpdates.contains(.failed(.dtlsFailed(.fingerprintMismatch))))
        #expect(link.server.srtp == nil)
    }

    @Test("a ClientHello before the SDP gave a fingerprint ends in noRemoteFingerprint")
    func noRemoteFingerprint() throws {
        let link = try MemoryLink()
        _ = link.client.setRemote(fingerprint: MemoryLink.fingerprint(MemoryLink.serverRuntime), role: .client)
        _ = link.server.iceChanged(.connected)
        _ = link.client.iceChanged(.connected)
        link.pump()
        #expect(link.serverUpdates.contains(.failed(.dtlsFailed(.noRemoteFingerprint))))
    }

    @Test("a client offering only a profile the server does not support gets no SRTP (noSrtpProfile)")
    func noSrtpProfile() throws {
        let link = try MemoryLink(clientProfiles: "SRTP_AES128_CM_SHA1_32")
        link.signalAndConnectIce()
        link.pump()
        #expect(link.failures.contains(.dtlsFailed(.noSrtpProfile)))
        #expect(!link.serverUpdates.contains(.connected) && !link.clientUpdates.contains(.connected))
    }

    @Test("a malformed ClientHello fails the server's handshake with OpenSSL's reason")
    func handshakeFailed() throws {
        let link = try MemoryLink()
        _ = link.server.setRemote(fingerprint: MemoryLink.fingerprint(MemoryLink.clientRuntime), role: .server)
        // A DTLS 1.2 handshake record holding a ClientHello whose body is 40 zero bytes
        // (protocol version 0.0, no cipher suites).
        let body = [UInt8](repeating: 0, count: 40)
        let handshake: [UInt8] = [1, 0, 0, UInt8(body.count), 0, 0, 0, 0, 0, 0, 0, UInt8(body.count)] + body
        var record: [UInt8] = [22, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(handshake.count)] + handshake
        let outcome = record.withUnsafeMutableBytes { link.server.received($0, now: 0) { _, _ in true } }
        guard case .handshake(.failed(.dtlsFailed(.handshakeFailed(let text)))) = outcome else {
            Issue.record("expected handshakeFailed, got \(outcome)"); return
        }
        #expect(!text.isEmpty && text != "unknown error")
    }

    @Test("closing one side sends close_notify; the other reports peerClosed")
    func peerClosed() throws {
        let link = try MemoryLink()
        link.signalAndConnectIce()
        link.pump()
        link.client.close()
        link.pump()
        #expect(link.serverUpdates.last == .failed(.dtlsFailed(.peerClosed)))
        #expect(link.server.state == .closed)
    }

    @Test("SRTP keys of the wrong length are refused (srtpSetupFailed), not read past")
    func srtpSetupFailed() throws {
        let link = try MemoryLink()
        #expect(link.server.connect(profile: .aeadAes128Gcm, local: [1, 2, 3], remote: [UInt8](repeating: 0, count: 28))
                == .failed(.srtpSetupFailed))
        #expect(link.server.srtp == nil)
        let ok = try MemoryLink()
        #expect(ok.server.connect(profile: .aeadAes128Gcm, local: [UInt8](repeating: 1, count: 28),
                                  remote: [UInt8](repeating: 2, count: 28)) == .connected)
    }

    @Test("every TransportCloseReason has a stable metric name")
    func reasonNames() {
        let all: [TransportCloseReason] = [.iceFailed, .dtlsFailed(.peerClosed), .srtpSetupFailed,
                                           .connectTimeout(.seconds(20)), .mediaTimeout(.seconds(30))]
        #expect(all.map(\.metricName) == ["ice", "dtls", "srtp", "connect_timeout", "timeout"])
        #expect(TransportCloseReason.connectTimeout(.milliseconds(500)).description.contains("0.5 s"))
    }
}
