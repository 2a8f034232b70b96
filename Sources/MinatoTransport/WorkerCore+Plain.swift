public import MinatoMedia
internal import MinatoWire

/// Plain RTP egress transports on a worker (`PlainRtpTransport`): made and closed by command,
/// read when their socket is readable, written by `flush` like any transport's packets, in the
/// clear or with SRTP keyed over the admin API (`PlainSrtp`).
extension WorkerCore {
    /// Makes a plain RTP egress transport in `router` sending to `remote`. Consumers are added
    /// to it with `addConsumer(on:)` like on a WebRTC transport; it is closed by `closeTransport`.
    /// With `ingress`, it receives a sender's RTP and RTCP on its port instead (from
    /// `remote.address`; the ports are learned); producers are added with `addProducer(on:)`.
    /// With `srtp`, what it sends is protected with our key and what it reads is unprotected
    /// with the remote's.
    public func createPlainTransport(id: TransportId, router: RouterId, remote: PlainRemote,
                                     ingress: Bool = false, srtp: PlainSrtp? = nil) throws -> PlainTransportDescription {
        assertOnThread()
        var session: SrtpSession?
        if let srtp {
            do {
                session = try SrtpSession(profile: srtp.profile, localKeyAndSalt: srtp.localKeyAndSalt,
                                          remoteKeyAndSalt: srtp.remoteKeyAndSalt)
            } catch {
                throw WorkerError.transport("plain transport SRTP: \(error)")
            }
        }
        let index = engine.addTransport(router: router, feedbackSsrc: UInt32.random(in: 1...UInt32.max))
        let t = PlainRtpTransport(id: id, index: index, remote: remote, ingress: ingress, srtp: session)
        do {
            let description = try t.open(context: context, worker: self)
            plainTransports[id] = t
            while plainByIndex.count <= Int(index.slot) { plainByIndex.append(nil) }
            plainByIndex[Int(index.slot)] = t
            return description
        } catch {
            t.close()
            engine.removeTransport(index)
            throw WorkerError.transport("plain transport to \(remote.address): \(error)")
        }
    }

    /// Closes a plain transport (and its consumers); false when `id` is not one.
    func closePlainTransport(_ id: TransportId) -> Bool {
        guard let t = plainTransports.removeValue(forKey: id) else { return false }
        t.close()
        engine.removeTransport(t.index)
        let slot = Int(t.index.slot)
        if slot < plainByIndex.count, plainByIndex[slot] === t { plainByIndex[slot] = nil }
        return true
    }

    /// The socket of `t` is readable: at most 64 datagrams are read (the rest wait for the next
    /// loop iteration). RTCP from the remote goes to the engine, and on an ingress transport its
    /// RTP too; anything else is dropped.
    func plainReadable(_ t: PlainRtpTransport) {
        var budget = 64
        while budget > 0, let (datagram, fromRemote) = t.read() {
            budget -= 1
            guard fromRemote else { drops[DropReason.plainUnexpected.rawValue] &+= 1; continue }
            let kind = classifyPacket(UnsafeRawBufferPointer(datagram))
            var packet = datagram
            if let srtp = t.srtp, let base = datagram.baseAddress, kind == .rtcp || (kind == .rtp && t.ingress) {
                guard let n = kind == .rtcp ? srtp.unprotectRtcp(base, length: datagram.count)
                                            : srtp.unprotectRtp(base, length: datagram.count) else {
                    drops[DropReason.srtpUnprotectFailed.rawValue] &+= 1
                    continue
                }
                packet = UnsafeMutableRawBufferPointer(rebasing: datagram[0..<n])
            }
            switch kind {
            case .rtcp:
                engine.handleRtcp(from: t.index, packet: UnsafeRawBufferPointer(packet), now: monotonicNow())
            case .rtp where t.ingress:
                engine.handleRtp(from: t.index, packet: packet, now: monotonicNow())
            default:
                drops[DropReason.plainUnexpected.rawValue] &+= 1
                continue
            }
            flushIfFull()
        }
    }

    /// One packet of the engine's outbox to a plain transport: in the clear, or protected in
    /// place (the outbox slot has room for the SRTP trailer).
    @inline(__always)
    func sendPlain(_ p: PlainRtpTransport, _ tx: Transmit) {
        var length = tx.length
        if let srtp = p.srtp {
            guard let n = tx.isRtcp ? srtp.protectRtcp(tx.bytes, length: tx.length) : srtp.protectRtp(tx.bytes, length: tx.length) else {
                drops[DropReason.srtpProtectFailed.rawValue] &+= 1
                return
            }
            length = n
        }
        guard p.send(tx.bytes, length: length, rtcp: tx.isRtcp) else {
            drops[DropReason.sendFailed.rawValue] &+= 1
            return
        }
        if tx.isRtcp {
            rtcpPacketsSent &+= 1
        } else {
            rtpPacketsSent &+= 1
            rtpBytesSent &+= UInt64(tx.length)
        }
    }
}
