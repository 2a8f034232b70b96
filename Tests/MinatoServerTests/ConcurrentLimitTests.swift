import Foundation
import Logging
import Testing
import MinatoMedia
@testable import MinatoRooms
@testable import MinatoTransport

/// Requests that suspend between their checks and their commit (the offer is read off the
/// actor, the media worker makes the transport and the producer): fired at once on one
/// `RoomService` with a real media worker, each limit holds where the request commits, and a
/// request refused there leaves nothing behind (no publication, member or session, no producer
/// or transport on the worker). Outcomes are counted, never timed.
@Suite struct ConcurrentLimitTests {
    static func service(_ configure: (inout RoomConfiguration) -> Void = { _ in }) throws -> (RoomService, MediaWorker) {
        var c = RoomConfiguration()
        configure(&c)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        // Any free UDP port on loopback; no media or connect timeout (nothing connects here).
        let worker = MediaWorker(index: 0, runtime: try CryptoRuntime(), ice: IceConfiguration(portMin: 0, portMax: 0),
                                 transportTimeout: .zero, connectTimeout: .zero, logger: logger)
        return (RoomService(configuration: c, workers: [worker], logger: logger), worker)
    }

    /// What the worker holds: live producers and transports. Asked through the worker's inbox,
    /// so every removal posted before it has run.
    static func held(on worker: MediaWorker) async throws -> (producers: Int, transports: Int) {
        try await worker.perform { core in (core.engine.activeProducerCount, core.counters.transports) }
    }

    /// A publisher's offer with one sending VP8 m-line.
    static func offer(mid: String, ssrc: UInt32) -> String {
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE \(mid)\r\n"
            + "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
            + "a=fingerprint:sha-256 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89\r\n"
            + "a=setup:actpass\r\n"
            + "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 127.0.0.1\r\na=mid:\(mid)\r\na=sendonly\r\na=rtcp-mux\r\n"
            + "a=rtpmap:96 VP8/90000\r\na=ssrc:\(ssrc) cname:x\r\n"
    }

    /// A room with one member on `channel`; returns the member's id.
    static func member(of s: RoomService, on channel: ClientChannel) async throws -> String {
        let room = try await s.createRoom(CreateRoomRequest(name: "r"), from: channel)
        let roomId = try #require(room["id"]?.stringValue)
        let joined = try await s.join(JoinRequest(roomId: roomId, name: "m"), from: channel)
        return try #require(joined.member["id"]?.stringValue)
    }

    /// Runs the requests at once; their outcomes, in no particular order.
    static func concurrently<T: Sendable>(_ requests: [@Sendable () async throws -> T]) async -> [Result<T, RoomError>] {
        await withTaskGroup(of: Result<T, RoomError>.self) { group in
            for request in requests {
                group.addTask {
                    do { return .success(try await request()) } catch let e as RoomError { return .failure(e) } catch {
                        return .failure(.internalError("\(error)"))
                    }
                }
            }
            var outcomes: [Result<T, RoomError>] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
    }

    static func failures<T>(_ outcomes: [Result<T, RoomError>]) -> [RoomError] {
        outcomes.compactMap { if case .failure(let e) = $0 { return e } else { return nil } }
    }

    /// One member's 12 publishes on one connection, each of its own m-line: exactly
    /// `rooms.maxPublicationsPerMember` (8) succeed, the 4 others are refused with the limit's
    /// error, and the room and the worker hold 8 publications and 8 producers.
    @Test func concurrentPublishesStopAtTheMemberLimit() async throws {
        let (s, worker) = try Self.service()
        defer { worker.shutdown() }
        let channel = ClientChannel(id: 1) { _ in }
        let member = try await Self.member(of: s, on: channel)
        let limit = RoomConfiguration().maxPublicationsPerMember
        let requests: [@Sendable () async throws -> PublishResult] = (0..<12).map { i in
            let r = PublishRequest(memberId: member, contentType: "video", mid: "\(i)", offer: Self.offer(mid: "\(i)", ssrc: UInt32(1000 + i)))
            return { try await s.publish(r, from: channel) }
        }
        let outcomes = await Self.concurrently(requests)
        let refused = Self.failures(outcomes)
        #expect(outcomes.count - refused.count == limit)
        #expect(refused.count == 12 - limit)
        let expected = RoomError.limitExceeded("A member may have at most \(limit) publications (rooms.maxPublicationsPerMember).")
        #expect(refused.allSatisfy { $0 == expected }, "\(refused)")
        #expect(await s.counts().publications == limit)
        let held = try await Self.held(on: worker)
        #expect(held.producers == limit)
        #expect(held.transports == 1)
    }

    /// Two publishes of the same m-line (each offer with its own SSRC, so the worker does not
    /// tell them apart): one publication, the other refused as published already.
    @Test func concurrentPublishesOfOneMidMakeOnePublication() async throws {
        let (s, worker) = try Self.service()
        defer { worker.shutdown() }
        let channel = ClientChannel(id: 1) { _ in }
        let member = try await Self.member(of: s, on: channel)
        let requests: [@Sendable () async throws -> PublishResult] = (0..<2).map { i in
            let r = PublishRequest(memberId: member, contentType: "video", mid: "0", offer: Self.offer(mid: "0", ssrc: UInt32(1000 + i)))
            return { try await s.publish(r, from: channel) }
        }
        let outcomes = await Self.concurrently(requests)
        let refused = Self.failures(outcomes)
        #expect(refused == [RoomError.invalidParameter("m-line '0' is published already; unpublish it first.")])
        #expect(await s.counts().publications == 1)
        #expect(try await Self.held(on: worker).producers == 1)
    }

    /// Six WHIP sessions started at once from six addresses with `whip.maxSessions` 2: two
    /// go live, four are refused with the limit's 503, and the server holds two sessions, two
    /// members, two producers and two transports.
    @Test func concurrentWhipSessionsStopAtTheServerLimit() async throws {
        let (s, worker) = try Self.service { $0.maxMediaSessions = 2 }
        defer { worker.shutdown() }
        let requests: [@Sendable () async throws -> MediaSessionResult] = (0..<6).map { i in
            let r = MediaSessionRequest(kind: .ingest, roomName: "live", memberName: nil, offer: Self.offer(mid: "0", ssrc: UInt32(1000 + i)),
                                        clientAddress: "198.18.0.\(i + 1)")
            let channel = ClientChannel(id: UInt64(100 + i)) { _ in }
            return { try await s.ingest(r, from: channel) }
        }
        let outcomes = await Self.concurrently(requests)
        let refused = Self.failures(outcomes)
        #expect(refused.count == 4)
        let expected = RoomError(code: 503, name: "limitExceeded",
                                 detail: "The server has its maximum of 2 WHIP/WHEP sessions (whip.maxSessions); try again later.")
        #expect(refused.allSatisfy { $0 == expected }, "\(refused)")
        #expect(await s.mediaSessions.count == 2)
        #expect(await s.counts().members == 2)
        let held = try await Self.held(on: worker)
        #expect(held.producers == 2)
        #expect(held.transports == 2)
    }
}
