import Testing
import Foundation
@testable import MinatoTransport

/// A connected pair of AF_UNIX datagram sockets: real kernel sends and refusals, no network.
final class DatagramPair {
    let sender: Int32
    private(set) var receiver: Int32
    /// The sender's SO_SNDBUF is small: datagrams queued at the receiver count against it, so
    /// the socket is full (EAGAIN) after a few unread ones.
    init() throws {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0, &fds) == 0 else { throw POSIXError(.EIO) }
        sender = fds[0]; receiver = fds[1]
        var size: Int32 = 4096
        setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    deinit { close(sender); if receiver >= 0 { close(receiver) } }

    func closeReceiver() { close(receiver); receiver = -1 }

    /// Every datagram waiting on the receiver, in order.
    func drain() -> [[UInt8]] {
        var out: [[UInt8]] = []
        var buf = [UInt8](repeating: 0, count: 70_000)
        while true {
            let n = recv(receiver, &buf, buf.count, Int32(MSG_DONTWAIT))
            if n <= 0 { return out }
            out.append(Array(buf[0..<n]))
        }
    }
}

/// Sends `datagrams` as one batch through `DatagramSender`; what the kernel took, per datagram.
func sendBatch(_ datagrams: [[UInt8]], on fd: Int32, gso: Bool = false) -> (sent: [UInt8], gso: Bool) {
    var storage = datagrams
    let count = storage.count
    let bases = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: count)
    let lengths = UnsafeMutablePointer<Int>.allocate(capacity: count)
    let sent = UnsafeMutablePointer<UInt8>.allocate(capacity: count)
    defer { bases.deallocate(); lengths.deallocate(); sent.deallocate() }
    var pointers: [UnsafeMutableRawBufferPointer] = []
    for i in 0..<count {
        let p = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, storage[i].count), alignment: 8)
        storage[i].withUnsafeBytes { p.copyMemory(from: $0) }
        pointers.append(p)
        bases[i] = p.baseAddress
        lengths[i] = storage[i].count
    }
    defer { pointers.forEach { $0.deallocate() } }
    var sender = DatagramSender(fd: fd, peer: sockaddr_storage(), peerLength: 0)
    var useGso = gso
    sender.send(bases, lengths, count: count, sent: sent, gso: &useGso)
    storage.removeAll()
    return (Array(UnsafeBufferPointer(start: sent, count: count)), useGso)
}

@Suite("DatagramSender: per-message send accounting")
struct DatagramSenderTests {
    @Test("a message the kernel refuses in the middle of a batch is marked unsent; the ones after it are sent")
    func refusedInTheMiddle() throws {
        let pair = try DatagramPair()
        // 300 kB exceeds an AF_UNIX datagram socket's send buffer: EMSGSIZE for that message alone.
        let batch: [[UInt8]] = [[1, 1, 1], [UInt8](repeating: 2, count: 300_000), [3, 3], [4]]
        let (sent, _) = sendBatch(batch, on: pair.sender)
        #expect(sent == [1, 0, 1, 1])
        // What arrived is exactly what was marked sent, in order.
        #expect(pair.drain() == [[1, 1, 1], [3, 3], [4]])
    }

    @Test("a full socket ends the batch: a prefix is sent, the rest is marked unsent")
    func fullSocket() throws {
        let pair = try DatagramPair()
        let batch = (0..<64).map { [UInt8(truncatingIfNeeded: $0), 0xAA] }
        let (sent, _) = sendBatch(batch, on: pair.sender)
        let taken = sent.filter { $0 == 1 }.count
        #expect(taken > 0 && taken < 64, "the receiver's queue holds only a few datagrams")
        #expect(sent == [UInt8](repeating: 1, count: taken) + [UInt8](repeating: 0, count: 64 - taken))
        let arrived = pair.drain()
        #expect(arrived == Array(batch.prefix(taken)))
        // The queue drained, the next batch goes out whole.
        let (again, _) = sendBatch([[9], [8]], on: pair.sender)
        #expect(again == [1, 1])
        #expect(pair.drain() == [[9], [8]])
    }

    @Test("a closed peer refuses everything, and every datagram is marked unsent")
    func closedPeer() throws {
        let pair = try DatagramPair()
        pair.closeReceiver()
        let (sent, _) = sendBatch([[1], [2], [3]], on: pair.sender)
        #expect(sent == [0, 0, 0])
    }
}
