public import MinatoMedia
internal import MinatoWire

/// Plain RTP egress transports on a worker (`PlainRtpTransport`): made and closed by command,
/// read when their socket is readable, written by `flush` like any transport's packets but
/// without SRTP.
extension WorkerCore {
    /// Makes a plain RTP egress transport in `router` sending to `remote`. Consumers are added
    /// to it with `addConsumer(on:)` like on a WebRTC transport; it is closed by `closeTransport`.
    public func createPlainTransport(id: TransportId, router: RouterId, remote: PlainRemote) throws -> PlainTransportDescription {
        assertOnThread()
        let index = engine.addTransport(router: router, feedbackSsrc: UInt32.random(in: 1...UInt32.max))
        let t = PlainRtpTransport(id: id, index: index, remote: remote)
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
    /// loop iteration), RTCP from the remote goes to the engine, anything else is dropped.
    func plainReadable(_ t: PlainRtpTransport) {
        var budget = 64
        while budget > 0, let (datagram, fromRemote) = t.read() {
            budget -= 1
            guard fromRemote, classifyPacket(UnsafeRawBufferPointer(datagram)) == .rtcp else {
                drops[DropReason.plainUnexpected.rawValue] &+= 1
                continue
            }
            engine.handleRtcp(from: t.index, packet: UnsafeRawBufferPointer(datagram), now: monotonicNow())
            flushIfFull()
        }
    }

    /// One packet of the engine's outbox to a plain transport, in the clear.
    @inline(__always)
    func sendPlain(_ p: PlainRtpTransport, _ tx: Transmit) {
        guard p.send(tx.bytes, length: tx.length, rtcp: tx.isRtcp) else {
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
