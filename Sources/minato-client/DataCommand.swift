import ArgumentParser
import Foundation
import MinatoClient

/// CLOCK_MONOTONIC in ns: the clock of the stamps in data messages (Python's `time.monotonic`
/// reads the same one, so peers on one host compare them).
func monotonicNs() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Message `index` of `size` bytes: even indexes a string "index:sentNs:" padded with "x", odd
/// ones bytes (index as UInt32, send time as UInt64, big-endian, then zeros).
enum DataStamp {
    static func make(_ index: Int, size: Int, now: UInt64) -> DataMessage {
        if index % 2 == 0 {
            var s = "\(index):\(now):"
            if s.utf8.count < size { s += String(repeating: "x", count: size - s.utf8.count) }
            return .string(s)
        }
        var b = [UInt8](repeating: 0, count: max(12, size))
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: index).bigEndian) { for i in 0..<4 { b[i] = $0[i] } }
        withUnsafeBytes(of: now.bigEndian) { for i in 0..<8 { b[4 + i] = $0[i] } }
        return .binary(b)
    }

    /// (index, send time) of a message made by `make`, nil for anything else.
    static func read(_ m: DataMessage) -> (index: Int, sentNs: UInt64, binary: Bool)? {
        switch m {
        case .string(let s):
            let parts = s.split(separator: ":", maxSplits: 2)
            guard parts.count >= 2, let i = Int(parts[0]), let t = UInt64(parts[1]) else { return nil }
            return (i, t, false)
        case .binary(let b):
            guard b.count >= 12 else { return nil }
            let i = b[0..<4].reduce(0) { $0 << 8 | Int($1) }
            let t = b[4..<12].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            return (i, t, true)
        }
    }
}

/// A data stream through the server, on the Swift SDK's data API: `--publish` writes `--count`
/// stamped messages (strings and bytes in turn) at `--rate`, after `--wait-subscribers`
/// subscriptions; otherwise the bot subscribes to the room's first data publication and reads
/// `--count` messages. Prints one JSON object (the publisher first prints `{"published": id}`).
struct DataCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "data", abstract: "Publish or read a data stream in a room.")
    @OptionGroup var common: Common
    @Flag(help: "Publish and write (else subscribe and read).") var publish = false
    @Option(help: "The member's name.") var name = "swift-data"
    @Option(help: "Messages to write, or to read before the bot reports.") var count = 1000
    @Option(help: "Messages per second to write (0: as fast as the channel takes them).") var rate = 0
    @Option(help: "Bytes per message (at least 24).") var size = 64
    @Flag(help: "Publish unordered with no retransmissions (lossy).") var lossy = false
    @Option(help: "Before writing, wait (up to 30 s) for this many subscriptions of the publication.") var waitSubscribers = 0
    @Flag(help: "After the messages, write one a byte over the server's limit and report the SDK's error.") var oversize = false
    @Flag(help: "Once the subscriptions are there, print {\"ready\": true} and wait for a line on stdin before writing.")
    var waitGo = false

    func run() async throws {
        let context = try await common.context()
        let room = try await SFURoom.findOrCreate(context, name: common.room)
        let me = try await room.join(name: name)
        let result = publish ? try await write(me) : try await read(me, room: room)
        try await me.leave()
        printJSON(result)
        context.dispose()
    }

    private func write(_ me: LocalSFURoomMember) async throws -> JSON {
        let stream = LocalDataStream(ordered: !lossy, maxRetransmits: lossy ? 0 : nil)
        var subscriptions = 0
        var events = me.events.makeAsyncIterator()
        let publication = try await me.publish(stream)
        printNow(["published": .string(publication.id)])
        let deadline = ContinuousClock.now + .seconds(30)
        while subscriptions < waitSubscribers, ContinuousClock.now < deadline, let e = await events.next() {
            if e.type == "publicationSubscribed" { subscriptions += 1 }
        }
        guard subscriptions >= waitSubscribers else { throw ValidationError("only \(subscriptions) subscriptions in 30 s") }
        if waitGo {
            printNow(["ready": .bool(true)])
            _ = await Task.detached { readLine() }.value
        }
        let start = monotonicNs()
        var fullRetries = 0
        for i in 0..<count {
            if rate > 0 {
                let due = start + UInt64(i) * 1_000_000_000 / UInt64(rate)
                let now = monotonicNs()
                if due > now { try await Task.sleep(for: .nanoseconds(Int(due - now))) }
            }
            while true {
                do {
                    switch DataStamp.make(i, size: size, now: monotonicNs()) {
                    case .string(let s): try await stream.write(s)
                    case .binary(let b): try await stream.write(b)
                    }
                    break
                } catch ClientError.dataBufferFull {
                    fullRetries += 1
                    try await Task.sleep(for: .milliseconds(1))
                }
            }
        }
        let elapsed = Double(monotonicNs() - start) / 1e9
        var out: [String: JSON] = ["publicationId": .string(publication.id), "sent": .number(Double(count)),
                                   "seconds": .number(elapsed), "fullRetries": .number(Double(fullRetries))]
        if oversize {
            do {
                try await stream.write([UInt8](repeating: 7, count: 65537))
                out["oversizeError"] = .null
            } catch {
                out["oversizeError"] = .string("\(error)")
            }
        }
        // The last messages reach the server before the member leaves.
        try await Task.sleep(for: .seconds(common.seconds))
        return .object(out)
    }

    private func read(_ me: LocalSFURoomMember, room: SFURoom) async throws -> JSON {
        var subscription: RoomSubscription?
        let deadline = ContinuousClock.now + .seconds(15)
        while subscription == nil {
            if let p = try await room.snapshot().publications?.first(where: { $0.contentType == .data && $0.publisherId != me.id }) {
                subscription = try await me.subscribe(publicationId: p.id)
            } else {
                guard ContinuousClock.now < deadline else { throw ValidationError("no data publication in 15 s") }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        guard let subscription, let messages = try await me.dataMessages(of: subscription) else {
            throw ValidationError("the subscription has no data stream")
        }
        printNow(["subscribed": .string(subscription.id)])
        struct Tally: Sendable {
            var received = 0, outOfOrder = 0, wrongKind = 0, unreadable = 0, strings = 0, binaries = 0, next = 0
            var latencies: [Double] = []
            var firstAt: UInt64 = 0, lastAt: UInt64 = 0
        }
        let window = common.seconds, count = self.count
        let reader = Task { () -> Tally in
            var t = Tally()
            for await m in messages {
                let now = monotonicNs()
                if t.firstAt == 0 { t.firstAt = now }
                t.lastAt = now
                t.received += 1
                guard let (index, sent, binary) = DataStamp.read(m) else { t.unreadable += 1; continue }
                if binary { t.binaries += 1 } else { t.strings += 1 }
                if binary != (index % 2 == 1) { t.wrongKind += 1 }
                if index != t.next { t.outOfOrder += 1 }
                t.next = index + 1
                if now >= sent { t.latencies.append(Double(now - sent) / 1e6) }
                if t.received >= count { break }
            }
            return t
        }
        let timer = Task { try await Task.sleep(for: .seconds(window)); reader.cancel() }
        var t = await reader.value
        timer.cancel()
        t.latencies.sort()
        let latencies = t.latencies
        func pct(_ p: Double) -> JSON {
            latencies.isEmpty ? .null : .number(latencies[min(latencies.count - 1, Int(p * Double(latencies.count - 1)))])
        }
        let (received, outOfOrder, wrongKind, unreadable, strings, binaries) = (t.received, t.outOfOrder, t.wrongKind, t.unreadable, t.strings, t.binaries)
        let (firstAt, lastAt) = (t.firstAt, t.lastAt)
        let span = lastAt > firstAt ? Double(lastAt - firstAt) / 1e9 : 0
        return ["subscriptionId": .string(subscription.id), "received": .number(Double(received)),
                "outOfOrder": .number(Double(outOfOrder)), "wrongKind": .number(Double(wrongKind)),
                "unreadable": .number(Double(unreadable)), "strings": .number(Double(strings)),
                "binaries": .number(Double(binaries)), "latencyP50Ms": pct(0.5), "latencyP99Ms": pct(0.99),
                "messagesPerSec": .number(span > 0 ? Double(received - 1) / span : 0)]
    }
}
