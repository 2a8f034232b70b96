import ArgumentParser
import Foundation
import MinatoClient
import Synchronization

/// `minato-client`: a bot on the Swift client SDK. Prints one JSON object with what it saw.
@main
struct MinatoClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "minato-client",
        abstract: "A bot on Minato's Swift client SDK.",
        subcommands: [Loopback.self, Subscribe.self, Publish.self, DataCommand.self])
}

struct Common: ParsableArguments {
    @Option(help: ArgumentHelp("The server's WebSocket URL (default ws://127.0.0.1:7880/ws). Repeat it for several "
                               + "servers, the nodes of a cluster: they are tried in order, and a member that loses its "
                               + "room (its node failed) joins it again through them."))
    var url: [String] = []
    @Option(help: "A JWT, when the server runs with auth.") var token: String?
    @Option(help: ArgumentHelp("A numeric local address for ICE candidates (default 127.0.0.1); repeat it for several. "
                               + "A server that is not on this host's loopback needs this host's address on the way to it."))
    var iceAddress: [String] = []
    @Option(help: "The room's name (found or created).") var room = "minato-client"
    @Option(help: "Seconds to receive for.") var seconds = 3.0
    @Flag(help: ArgumentHelp("Gather ICE candidates on every address this host has when a connection is made or "
                             + "restarted (instead of --ice-address), as a device that changes networks must."))
    var iceAnyAddress = false

    func context() async throws -> Context {
        try await Context.setup(Context.Options(urls: url.isEmpty ? ["ws://127.0.0.1:7880/ws"] : url, token: token,
                                                iceLocalAddresses: iceAnyAddress ? [] : iceAddress.isEmpty ? ["127.0.0.1"] : iceAddress))
    }
}

func printJSON(_ value: JSON) {
    print(value.serialized())
}

/// The room event types (and versions) a member saw, in order (read with `snapshot` while it is
/// in the room).
final class EventLog: Sendable {
    private let seen = Mutex<[(type: String, version: Int)]>([])
    init(_ member: LocalSFURoomMember) {
        Task { for await e in member.events { self.append(e.type, e.version) } }
    }
    private func append(_ type: String, _ version: Int) { seen.withLock { $0.append((type, version)) } }
    func snapshot() -> [String] { seen.withLock { $0.map(\.type) } }
    func versions() -> [Int] { seen.withLock { $0.map(\.version) } }
}

/// Writes one JSON line at once (unbuffered), for a test reading while the bot runs.
func printNow(_ value: JSON) {
    FileHandle.standardOutput.write(Data((value.serialized() + "\n").utf8))
}

/// Milliseconds since `start`.
func millis(since start: ContinuousClock.Instant) -> Double {
    let d = ContinuousClock.now - start
    return Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
}

/// Publishes synthetic video (and audio) as one member and subscribes to it as another, then
/// checks every packet: all counted from the clear header, every one decrypted and its stamp read.
struct Loopback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Publish synthetic media and receive it back through the server.")
    @OptionGroup var common: Common
    @Option(help: "Video bitrate in bit/s.") var bitrate = 500_000
    @Flag(help: "Publish audio too.") var audio = false
    @Option(help: ArgumentHelp("Restart ICE on the publisher's send and the subscriber's receive connection this many "
                               + "seconds into the window (reported under \"iceRestart\").")) var restartIceAfter: Double?

    func run() async throws {
        let context = try await common.context()
        let room = try await SFURoom.findOrCreate(context, name: common.room)
        let alice = try await room.join(name: "alice-\(UInt16.random(in: 0...UInt16.max))")
        let bob = try await room.join(name: "bob-\(UInt16.random(in: 0...UInt16.max))")
        let bobEvents = EventLog(bob)
        var sources: [(ContentType, any RtpSource & Sendable)] = [(.video, SyntheticVideoSource(bitrate: bitrate))]
        if audio { sources.append((.audio, SyntheticAudioSource())) }
        var results: [JSON] = []
        var counters: [(RoomPublication, RoomSubscription, StreamCounter)] = []
        for (_, source) in sources {
            let publication: RoomPublication
            if let v = source as? SyntheticVideoSource { publication = try await alice.publish(v) }
            else if let a = source as? SyntheticAudioSource { publication = try await alice.publish(a) }
            else { continue }
            let counter = StreamCounter(sampleEvery: 1)
            let subscription = try await bob.subscribe(publicationId: publication.id, sink: counter)
            counters.append((publication, subscription, counter))
        }
        var restart: JSON?
        if let after = restartIceAfter {
            try await Task.sleep(for: .seconds(after))
            let streamCounters = counters.map(\.2)
            let before = try await context.perform { streamCounters.map { $0.snapshot().packets } }
            let t0 = ContinuousClock.now
            try await alice.restartIce(.send)
            try await bob.restartIce(.recv)
            var done = (send: 0, recv: 0)
            while ContinuousClock.now - t0 < .seconds(10) {
                done = (try await alice.iceRestarts(.send), try await bob.iceRestarts(.recv))
                if done.send >= 1 && done.recv >= 1 { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            let took = ContinuousClock.now - t0
            let remaining = max(0, common.seconds - after)
            try await Task.sleep(for: .seconds(remaining))
            let after2 = try await context.perform { streamCounters.map { $0.snapshot().packets } }
            restart = ["sendCompleted": .number(Double(done.send)), "recvCompleted": .number(Double(done.recv)),
                       "ms": .number(Double(took.components.seconds) * 1000 + Double(took.components.attoseconds) / 1e15),
                       "packetsAfter": .array(zip(before, after2).map { .number(Double($1 - $0)) })]
        } else {
            try await Task.sleep(for: .seconds(common.seconds))
        }
        for (publication, subscription, counter) in counters {
            let s = try await context.perform { counter.snapshot() }
            let sorted = s.latenciesNs.sorted()
            let p50 = sorted.isEmpty ? 0 : Double(sorted[sorted.count / 2]) / 1e6
            results.append([
                "contentType": .string(publication.contentType.rawValue),
                "publicationId": .string(publication.id), "subscriptionId": .string(subscription.id),
                "codec": .string(subscription.codec?.encodingName ?? ""),
                "packets": .number(Double(s.packets)), "expected": .number(Double(s.expected)),
                "decryptFailures": .number(Double(s.decryptFailures)), "stampsRead": .number(Double(s.stampsRead)),
                "latencyP50Ms": .number(p50),
            ])
        }
        let events = bobEvents.snapshot()   // before leaving: what the member saw while in the room
        // The selected pairs' local candidate types: "relay" when the connection goes through TURN.
        let candidates: JSON = ["send": .string(try await alice.selectedCandidateType(.send) ?? ""),
                                "recv": .string(try await bob.selectedCandidateType(.recv) ?? "")]
        try await bob.leave()
        try await alice.leave()
        var out: JSON = ["roomId": .string(room.id), "streams": .array(results), "events": .array(events.map { .string($0) }),
                         "candidates": candidates, "relays": .number(Double(await alice.iceServers.count))]
        if let restart, case .object(var fields) = out { fields["iceRestart"] = restart; out = .object(fields) }
        printJSON(out)
        context.dispose()
    }
}

/// Joins a room and subscribes to every publication there (now or within the window),
/// counting packets and VP8 key frames per subscription.
struct Subscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Subscribe to every publication in a room and count what arrives.")
    @OptionGroup var common: Common
    @Option(help: "Publications to wait for before the window starts.") var expect = 1

    func run() async throws {
        let context = try await common.context()
        let room = try await SFURoom.find(context, name: common.room)
        let me = try await room.join(name: "swift-bot-\(UInt16.random(in: 0...UInt16.max))")
        var seen: [String] = []
        var eventTypes: [String] = []
        var subscriptions: [RoomSubscription] = []
        // Existing publications first, then the ones announced by events.
        for p in try await room.snapshot().publications ?? [] where p.publisherId != me.id {
            subscriptions.append(try await me.subscribe(publicationId: p.id))
            seen.append(p.id)
        }
        var iterator = me.events.makeAsyncIterator()
        let deadline = ContinuousClock.now + .seconds(15)
        while subscriptions.count < expect, ContinuousClock.now < deadline, let e = await iterator.next() {
            eventTypes.append(e.type)
            if e.type == "streamPublished", let p = e.publication, p.publisherId != me.id, !seen.contains(p.id) {
                subscriptions.append(try await me.subscribe(publicationId: p.id))
                seen.append(p.id)
            }
        }
        var results: [JSON] = []
        try await withThrowingTaskGroup(of: JSON.self) { group in
            for s in subscriptions {
                guard let stream = try await me.packets(of: s) else { continue }
                group.addTask {
                    var packets = 0, keyFrames = 0, gaps = 0, payloadTypes = Set<Int>()
                    var last: UInt16?
                    for await p in stream {
                        packets += 1
                        if let last, p.sequenceNumber != last &+ 1 { gaps += 1 }
                        last = p.sequenceNumber
                        payloadTypes.insert(Int(p.payloadType))
                        let pl = p.payload
                        // VP8: S=1, PID=0, then the payload header's P bit 0 = key frame.
                        if s.codec?.encodingName.uppercased() == "VP8", pl.count > 4, let b0 = pl.first,
                           b0 & 0x10 != 0, b0 & 0x0F == 0 {
                            var i = pl.startIndex + 1
                            if b0 & 0x80 != 0 {
                                let x = pl[i]; i += 1
                                if x & 0x80 != 0 { i += pl[i] & 0x80 != 0 ? 2 : 1 }
                                if x & 0x40 != 0 { i += 1 }
                                if x & 0x30 != 0 { i += 1 }
                            }
                            if i < pl.endIndex, pl[i] & 0x01 == 0 { keyFrames += 1 }
                        }
                    }
                    return ["subscriptionId": .string(s.id), "publicationId": .string(s.publicationId),
                            "contentType": .string(s.contentType.rawValue), "codec": .string(s.codec?.encodingName ?? ""),
                            "payloadTypes": .array(payloadTypes.sorted().map { .number(Double($0)) }),
                            "packets": .number(Double(packets)), "keyFrames": .number(Double(keyFrames)),
                            "sequenceGaps": .number(Double(gaps))]
                }
            }
            let window = common.seconds
            group.addTask { try await Task.sleep(for: .seconds(window)); return .null }
            // The sleeper finishes first; cancelling ends every stream's loop with its counts.
            if let first = try await group.next(), first != .null { results.append(first) }
            group.cancelAll()
            for try await r in group where r != .null { results.append(r) }
        }
        try await me.leave()
        printJSON(["memberId": .string(me.id), "subscriptions": .array(results),
                   "events": .array(eventTypes.map { .string($0) })])
        context.dispose()
    }
}

/// Joins a room and publishes synthetic video (and audio) for a while, staying in the room
/// through node failures: when the room is lost the member joins it again by name through the
/// given URLs, publishes again and subscribes again. Prints what happened, rejoins included.
struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Publish synthetic media into a room for a while, rejoining it when it is lost.")
    @OptionGroup var common: Common
    @Option(help: "The member's name (subscribers find its streams again by it after a rejoin).") var name = "swift-bot"
    @Option(help: "Video bitrate in bit/s.") var bitrate = 500_000
    @Flag(help: "Publish audio too.") var audio = false
    @Option(help: "Also subscribe to the video of the member of this name (waiting up to 15 s for it) and count its packets.")
    var subscribeTo: String?
    @Flag(help: ArgumentHelp("Report a timeline: the packets received every 100 ms, the connection events with their "
                             + "times, the room events' versions, and the recovery counters (for recovery tests)."))
    var timeline = false

    func run() async throws {
        let context = try await common.context()
        let room = try await SFURoom.findOrCreate(context, name: common.room)
        let me = try await room.join(name: name)
        // One sink for the subscription and the ones the SDK makes again after a rejoin: it counts on.
        let counter = StreamCounter()
        let start = ContinuousClock.now
        let joinedId = me.id
        let rejoins = RejoinLog(me, start: start) { try? await context.perform { counter.snapshot().packets } }
        let events = EventLog(me)
        if timeline {
            printNow(["joined": .string(me.id)])   // a test may act once the member is in
        }
        var publications = [try await me.publish(SyntheticVideoSource(bitrate: bitrate), options: PublicationOptions(metadata: "video"))]
        if audio { publications.append(try await me.publish(SyntheticAudioSource(), options: PublicationOptions(metadata: "audio"))) }
        if let subscribeTo {
            let deadline = ContinuousClock.now + .seconds(15)
            while true {
                let snapshot = try await room.snapshot()
                let publisher = snapshot.members?.first { $0.name == subscribeTo }
                if let p = snapshot.publications?.first(where: { $0.publisherId == publisher?.id && $0.contentType == .video }) {
                    _ = try await me.subscribe(publicationId: p.id, sink: counter)
                    break
                }
                guard ContinuousClock.now < deadline else { throw ValidationError("\(subscribeTo) published no video within 15 s") }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        var samples: [JSON] = []
        var announced = false   // the first packet received, printed at once for a test to act on
        let end = ContinuousClock.now + .seconds(common.seconds)
        while ContinuousClock.now < end {
            try await Task.sleep(for: .milliseconds(timeline ? 100 : 250))
            if timeline {
                let n = try await context.perform { counter.snapshot().packets }
                if n > 0, !announced {
                    announced = true
                    printNow(["receiving": .number(millis(since: start).rounded())])
                }
                samples.append([.number(millis(since: start).rounded()), .number(Double(n))])
            }
        }
        let received = try await context.perform { counter.snapshot().packets }
        let log = rejoins.snapshot()
        var out: [String: JSON] = ["roomId": .string(room.id), "memberId": .string(me.id),
                                   "firstPublications": .array(publications.map { .string($0.id) }),
                                   "packetsReceived": .number(Double(received)), "rejoins": .array(log)]
        if timeline {
            out["joinedId"] = .string(joinedId)
            out["timeline"] = .array(samples)
            out["eventVersions"] = .array(events.versions().map { .number(Double($0)) })
            out["eventTypes"] = .array(events.snapshot().map { .string($0) })
            out["replayedEvents"] = .number(Double(await me.replayedEvents))
            out["signalingRecoveries"] = .number(Double(await me.signalingRecoveries))
            out["mediaRecoveries"] = .number(Double(await me.mediaRecoveries))
            out["iceRestarts"] = ["send": .number(Double(try await me.iceRestarts(.send))),
                                  "recv": .number(Double(try await me.iceRestarts(.recv)))]
        }
        try await me.leave()
        printJSON(.object(out))
        context.dispose()
    }
}

/// A member's connection events as JSON, in order; each `reconnected` also says how many packets
/// `received()` counted by then.
final class RejoinLog: Sendable {
    private let entries = Mutex<[JSON]>([])
    init(_ member: LocalSFURoomMember, start: ContinuousClock.Instant, received: @escaping @Sendable () async -> UInt64?) {
        Task {
            for await e in member.connectionEvents {
                var entry = Self.json(e)
                if case .object(var fields) = entry {
                    fields["ms"] = .number(millis(since: start).rounded())
                    entry = .object(fields)
                }
                if case .reconnected = e, case .object(var fields) = entry, let n = await received() {
                    fields["packetsReceived"] = .number(Double(n))
                    entry = .object(fields)
                }
                self.append(entry)
            }
        }
    }
    private func append(_ entry: JSON) { entries.withLock { $0.append(entry) } }
    func snapshot() -> [JSON] { entries.withLock { $0 } }

    static func json(_ event: MemberConnectionEvent) -> JSON {
        switch event {
        case .reconnecting(let reason):
            return ["event": "reconnecting", "reason": .string(reason.rawValue)]
        case .reconnected(let reason, let publications, let subscriptions, let missing):
            return ["event": "reconnected", "reason": .string(reason.rawValue),
                    "publications": .array(publications.map { .string($0.id) }),
                    "subscriptions": .array(subscriptions.map { .string($0.id) }),
                    "missing": .array(missing.map { .string("\($0.publisherName ?? "?") \($0.contentType.rawValue)") })]
        case .failed(let reason, let error):
            return ["event": "failed", "reason": .string(reason.rawValue), "error": .string(error)]
        case .recovering(let cause):
            return ["event": "recovering", "cause": .string(cause.description)]
        case .recovered(let cause):
            return ["event": "recovered", "cause": .string(cause.description)]
        case .qualityChanged(let quality):
            return ["event": "quality", "cause": .string(quality.rawValue)]
        }
    }
}
