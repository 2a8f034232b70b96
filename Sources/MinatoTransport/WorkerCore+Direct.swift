internal import CMinatoShims
internal import MinatoMedia

/// Direct receive (`DirectReceiver`; docs/architecture.md "Reading established transports"):
/// the worker reads established transports' sockets itself and handles each datagram as
/// libnice's receive callback would.
extension WorkerCore {
    /// The direct receiver's epoll set has input (its GLib source fired): reads each ready
    /// socket, at most `DirectReceiver.batchesPerSocket` batches (a socket with more stays ready
    /// for the next iteration), and handles every datagram as libnice's callback would.
    func readDirect() {
        guard let direct else { return }
        let ready = direct.ready()
        for i in 0..<ready {
            let key = direct.readyKeys[i]
            let slot = Int(truncatingIfNeeded: key & 0xffff_ffff)
            // A key read after its transport closed (or its slot was reused) finds nothing.
            guard slot < byIndex.count, let t = byIndex[slot], DirectReceiver.key(t.index) == key else { continue }
            readDirect(t, direct)
        }
    }

    private func readDirect(_ t: WebRtcTransport, _ direct: DirectReceiver) {
        for _ in 0..<DirectReceiver.batchesPerSocket {
            let fd = t.directFd
            guard fd >= 0 else { return }
            let n = direct.read(fd: fd)
            for j in 0..<n {
                // What the previous datagram did may have closed the transport.
                guard t.secure.state != .closed else { drops[DropReason.transportClosed.rawValue] &+= UInt64(n - j); return }
                directDatagram(j, on: t, direct)
            }
            guard n == DirectReceiver.batch else { return }
        }
    }

    /// Datagram `j` of the batch just read for `t`. STUN from the pair's peer is answered here;
    /// anything from another address means ICE has a decision to make (the peer moved, or checks
    /// another pair): the socket goes back to libnice, which sees the peer's next retransmission
    /// (this STUN datagram is dropped, counted as `unknownPacket`); media from there is still
    /// handled.
    @inline(__always)
    private func directDatagram(_ j: Int, on t: WebRtcTransport, _ direct: DirectReceiver) {
        let length = direct.lengths[j]
        guard length > 0, let base = direct.buffers[j] else { drops[DropReason.oversize.rawValue] &+= 1; return }
        let from = direct.sources + j
        let fromPeer = withUnsafePointer(to: t.directPeer) { minato_same_address(from, $0) != 0 }
        if !fromPeer { t.leaveDirect(handBack: true) }
        if base.load(as: UInt8.self) < 4 {   // STUN (RFC 7983)
            if fromPeer, t.answerCheck(UnsafeRawBufferPointer(start: base, count: length), from: from, reply: direct.reply,
                                       capacity: DirectReceiver.replyCapacity, now: monotonicNow()) {
                direct.checksAnswered &+= 1
            } else {
                drops[DropReason.unknownPacket.rawValue] &+= 1
            }
            return
        }
        received(UnsafeMutableRawBufferPointer(start: base, count: length), on: t, kernelArrival: direct.arrivals[j])
    }
}
