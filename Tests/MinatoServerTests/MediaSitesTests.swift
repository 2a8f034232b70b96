import Foundation
import Logging
import Testing
import MinatoMedia
@testable import MinatoRooms
@testable import MinatoTransport

/// Media commands (rooms across nodes): every command survives the node link's encoding, and a
/// node serving media for another node's room (`RoomService.hostMedia`) runs only commands that
/// name what was made for that room, refusing the rest with an error and changing nothing.
@Suite struct MediaSitesTests {
    static let placeholder = TransportIndex(slot: 0, generation: 0)

    static func everyCommand() -> [MediaCommand] {
        let t = TransportId(7), p = ProducerId(slot: 3, generation: 1), c = ConsumerId(slot: 4, generation: 2)
        var pp = ProducerParameters(transport: placeholder, kind: .video, ssrc: 0, payloadType: 96, clockRate: 90_000,
                                    codec: .vp8, keyFrameRequest: .pli, rtxPayloadType: 97, nack: true,
                                    rids: ["l", "h"], ridExtensionId: 10)
        pp.layerSsrcs = [1, 3]
        pp.layerRtxSsrcs = [2, 4]
        var cp = ConsumerParameters(producer: p, transport: placeholder, ssrc: 9, payloadType: 96, extensionIds: .identity,
                                    rtxSsrc: 10, rtxPayloadType: 97, preferredLayer: 1)
        cp.pinned = true
        let remote = RemoteTransportParameters(iceUfrag: "u", icePwd: "p", fingerprintAlgorithm: "sha-256", fingerprint: "AB:CD",
                                               setup: "active", candidates: ["candidate:1 1 udp 1 198.18.2.11 40000 typ host"],
                                               endOfCandidates: true)
        return [.createTransport(role: .relayClient), .setRemote(t, remote), .addRemoteCandidate(t, nil),
                .addRemoteCandidate(t, "candidate:2 1 udp 1 198.18.2.12 40001 typ host"), .restartIce(t),
                .addProducer(t, pp), .addConsumer(t, cp), .removeProducer(p), .removeConsumer(c), .setPaused(p, true),
                .setPreferredLayer(c, nil), .setPreferredLayer(c, 2), .requestKeyFrame(p), .pairTransports(t, TransportId(8)),
                .closeTransport(t), .stats(producers: [p], consumers: [c])]
    }

    @Test func everyCommandCrossesTheLinkUnchanged() throws {
        for command in Self.everyCommand() {
            let text = command.encoded()
            let back = try #require(MediaCommand.decoded(text), "\(command) did not decode from \(text)")
            #expect(back.encoded() == text)
        }
        #expect(MediaCommand.decoded("{\"bogus\":{}}") == nil)
        #expect(MediaCommand.decoded("not json") == nil)
    }

    static func service() throws -> (RoomService, MediaWorker) {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let worker = MediaWorker(index: 0, runtime: try CryptoRuntime(), ice: IceConfiguration(portMin: 0, portMax: 0),
                                 transportTimeout: .zero, connectTimeout: .zero, logger: logger)
        return (RoomService(configuration: RoomConfiguration(), workers: [worker], logger: logger), worker)
    }

    static func params(_ room: String, _ command: MediaCommand) -> JSONValue {
        ["room": .string(room), "cmd": .string(command.encoded())]
    }

    static func transports(_ worker: MediaWorker) async throws -> Int {
        try await worker.perform { $0.counters.transports }
    }

    @Test func aServingNodeRunsOnlyWhatWasMadeForTheRoom() async throws {
        let (rooms, worker) = try Self.service()
        defer { worker.shutdown() }
        // Nothing yet: only a transport may start a room's media here.
        let early = await rooms.hostMedia(from: "n1", params: Self.params("n1.room", .closeTransport(TransportId(1))))
        #expect(early.failureName == "invalidParameter")
        let garbage = await rooms.hostMedia(from: "n1", params: ["room": "n1.room", "cmd": "{\"bogus\":1}"])
        #expect(garbage.failureName == "invalidParameter")
        let nameless = await rooms.hostMedia(from: "n1", params: ["cmd": .string(MediaCommand.createTransport(role: .client).encoded())])
        #expect(nameless.failureName == "invalidParameter")
        #expect(try await Self.transports(worker) == 0)

        let made = await rooms.hostMedia(from: "n1", params: Self.params("n1.room", .createTransport(role: .client)))
        let text = try #require(made.successValue?["reply"]?.stringValue)
        guard case .transport(let d)? = MediaReply.decoded(text) else { Issue.record("not a transport: \(text)"); return }
        #expect(d.iceLite)
        #expect(try await Self.transports(worker) == 1)

        // Another room, or the same room id from another node, may not name it.
        for (home, room) in [("n1", "n1.other"), ("n2", "n1.room")] {
            let r = await rooms.hostMedia(from: home, params: Self.params(room, .closeTransport(d.id)))
            #expect(r.failureName == "invalidParameter")
        }
        // Nor may the room itself name producers or consumers it has not made.
        let foreign = ProducerId(slot: 0, generation: 0)
        for command: MediaCommand in [.removeProducer(foreign), .setPaused(foreign, true),
                                      .stats(producers: [foreign], consumers: []),
                                      .addConsumer(d.id, ConsumerParameters(producer: foreign, transport: Self.placeholder, ssrc: 5,
                                                                            payloadType: 96, extensionIds: .identity))] {
            let r = await rooms.hostMedia(from: "n1", params: Self.params("n1.room", command))
            #expect(r.failureName == "invalidParameter", "\(command)")
        }
        #expect(try await Self.transports(worker) == 1)

        // Its own producer it may use.
        let pp = ProducerParameters(transport: Self.placeholder, kind: .audio, ssrc: 1234, payloadType: 111, clockRate: 48_000,
                                    codec: .other, keyFrameRequest: .none)
        let added = await rooms.hostMedia(from: "n1", params: Self.params("n1.room", .addProducer(d.id, pp)))
        let producerText = try #require(added.successValue?["reply"]?.stringValue)
        guard case .producer(let p)? = MediaReply.decoded(producerText) else { Issue.record("not a producer: \(producerText)"); return }
        let stats = await rooms.hostMedia(from: "n1", params: Self.params("n1.room", .stats(producers: [p], consumers: [])))
        #expect(stats.successValue != nil)

        // The home releasing the room closes everything made for it.
        let released = await rooms.hostMedia(from: "n1", params: ["room": "n1.room", "release": true])
        #expect(released.successValue != nil)
        #expect(try await Self.transports(worker) == 0)
        let after = await rooms.hostMedia(from: "n1", params: Self.params("n1.room", .closeTransport(d.id)))
        #expect(after.failureName == "invalidParameter")
    }
}

extension Result where Success == JSONValue, Failure == RoomError {
    var failureName: String? { if case .failure(let e) = self { return e.name }; return nil }
    var successValue: JSONValue? { if case .success(let v) = self { return v }; return nil }
}
