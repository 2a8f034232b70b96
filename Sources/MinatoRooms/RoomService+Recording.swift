internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire
#if canImport(Glibc)
internal import Glibc
#endif

/// Recordings (admin API `/v1/rooms/{id}/recordings`): a member's audio and video, each through
/// a plain RTP egress transport on the room's worker into a recorder child process
/// (`RecorderPipeline`) that writes one WebM or Matroska file. A crash of the recorder ends its
/// recording (`failed`), nothing else. Room events `recordingStarted` and `recordingStopped`
/// tell the members.
extension RoomService {
    /// `encodingId`: for a simulcast video publication, the encoding to record (as a
    /// subscriber's `preferredEncodingId`: that layer, or the next lower one receiving); by
    /// default the top layer that is receiving. A plain transport has no bandwidth estimate, so
    /// nothing else lowers it.
    public func adminStartRecording(_ roomId: String, memberId: String?, publicationIds: [String]?,
                                    encodingId: String? = nil) async throws(RoomError) -> JSONValue {
        let cfg = configuration.recording
        guard cfg.maxConcurrent > 0 else {
            throw RoomError(code: 403, name: "recordingDisabled", detail: "Recording is off on this server (recording.maxConcurrent is 0).")
        }
        let room = try adminRoom(roomId)
        let pubs = try recordedPublications(room, memberId: memberId, publicationIds: publicationIds)
        if let encodingId {
            guard let video = pubs.first(where: { $0.contentType == "video" && $0.layers.count > 1 }) else {
                throw RoomError.invalidParameter("\"encodingId\" names a simulcast encoding, and no recorded publication is simulcast video.")
            }
            try Validate.preferredEncoding(encodingId, of: video, key: "encodingId")
        }
        guard recordings.filter(\.isActive).count < cfg.maxConcurrent else {
            throw RoomError.limitExceeded("At most \(cfg.maxConcurrent) recordings may run at once (recording.maxConcurrent).")
        }
        let directory = URL(fileURLWithPath: cfg.directory).standardizedFileURL.path
        do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw RoomError.internalError("The recording directory '\(directory)' cannot be made: \(error.localizedDescription)")
        }
        if let free = Self.freeBytes(directory), free < cfg.minFreeBytes {
            throw RoomError(code: 507, name: "diskFull",
                            detail: "The recording directory has \(free) bytes free, under recording.minFreeBytes (\(cfg.minFreeBytes)).")
        }
        guard let ports = Self.freeUdpPorts(pubs.count * 2) else { throw RoomError.serviceUnavailable("No free UDP port for the recorder.") }
        let id = newId()
        let publisher = room.member(pubs[0].publisherId)
        let format = RecorderPipeline.format(pubs.compactMap { $0.stream?.codec.codec.codec })
        let file = directory + "/" + RecorderPipeline.fileName(room: room.name ?? room.id, member: publisher?.name ?? pubs[0].publisherId,
                                                               start: Date(), id: id, format: format)
        var streams: [Recording.Stream] = []
        for (i, pub) in pubs.enumerated() {
            guard let stream = pub.stream else { continue }
            // A publication served by another node is recorded from its stream relayed here.
            let producer: ProducerId, forward: ForwardKey?
            do {
                (producer, forward) = try await self.producer(of: pub, at: .home, in: room)
            } catch {
                for s in streams { if let f = s.forward { releaseForward(f, in: room) } }
                throw error
            }
            let tid = TransportId(nextTransportId)
            nextTransportId += 1
            streams.append(Recording.Stream(publicationId: pub.id, kind: pub.contentType, codec: stream.codec.codec.codec,
                                            payloadType: stream.codec.codec.codec == .opus ? 111 : 96,
                                            recorderRtpPort: ports[2 * i], recorderRtcpPort: ports[2 * i + 1],
                                            transport: tid, producer: producer,
                                            preferredLayer: pub.contentType == "video" ? pub.layerCap(preferredEncodingId: encodingId) : nil,
                                            fmtp: stream.codec.codec.parameters.text, forward: forward))
        }
        let recording = Recording(id: id, roomId: room.id, memberId: pubs[0].publisherId, file: file, format: format, streams: streams)
        recording.encodingId = encodingId
        recordings.append(recording)
        do {
            try await startRecorder(recording, in: room)
        } catch {
            finish(recording, state: .failed, reason: "startFailed")
            throw error
        }
        return ["recording": recording.json]
    }

    public func adminRecordings(_ roomId: String?) throws(RoomError) -> JSONValue {
        if let roomId { _ = try adminRoom(roomId) }
        return ["recordings": .array(recordings.filter { roomId == nil || $0.roomId == roomId }.map(\.json))]
    }

    public func adminRecording(_ roomId: String, _ recordingId: String) throws(RoomError) -> JSONValue {
        ["recording": try recording(roomId, recordingId).json]
    }

    /// Stops a recording and answers once its file is finished (or the recorder was killed).
    public func adminStopRecording(_ roomId: String, _ recordingId: String) async throws(RoomError) -> JSONValue {
        let r = try recording(roomId, recordingId)
        if r.isActive {
            stopRecording(r, reason: "stopped")
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                if r.isActive { r.finished.append(c) } else { c.resume() }
            }
        }
        return ["recording": r.json]
    }

    private func recording(_ roomId: String, _ recordingId: String) throws(RoomError) -> Recording {
        guard let r = recordings.first(where: { $0.id == recordingId && $0.roomId == roomId }) else {
            throw RoomError(code: 404, name: "recordingNotFound", detail: "There is no recording '\(recordingId.prefix(80))' in this room.")
        }
        return r
    }

    /// The publications to record: the ones named, or the member's media publications (at
    /// most one audio and one video, the first published of each), all of one member.
    private func recordedPublications(_ room: Room, memberId: String?, publicationIds: [String]?) throws(RoomError) -> [RoomPublication] {
        var pubs: [RoomPublication] = []
        if let publicationIds, !publicationIds.isEmpty {
            for pid in publicationIds {
                guard let p = room.publication(pid) else { throw RoomError.publicationNotFound(pid) }
                pubs.append(p)
            }
        } else if let memberId {
            guard room.member(memberId) != nil else { throw RoomError.memberNotFound(memberId) }
            for kind in ["video", "audio"] {
                if let p = room.publications.first(where: { $0.publisherId == memberId && $0.contentType == kind && $0.stream != nil && $0.enabled }) {
                    pubs.append(p)
                }
            }
            guard !pubs.isEmpty else { throw Self.notRecordable("Member '\(memberId.prefix(80))' has no enabled audio or video publication to record.") }
        } else {
            throw RoomError.invalidParameter("The body needs \"memberId\" (a string) or \"publicationIds\" (strings).")
        }
        guard Set(pubs.map(\.publisherId)).count == 1 else { throw Self.notRecordable("The publications of one recording must be one member's.") }
        guard pubs.filter({ $0.contentType == "video" }).count <= 1, pubs.filter({ $0.contentType == "audio" }).count <= 1 else {
            throw Self.notRecordable("A recording holds at most one video and one audio publication.")
        }
        for p in pubs {
            guard let codec = p.stream?.codec.codec.codec, p.producer != nil else {
                throw Self.notRecordable("Publication '\(p.id.prefix(80))' is not audio or video with media flowing.")
            }
            guard codec != .av1 else { throw Self.notRecordable("Publication '\(p.id.prefix(80))' is AV1, which the recorder does not take.") }
            guard p.enabled else { throw Self.notRecordable("Publication '\(p.id.prefix(80))' is disabled: it sends nothing to record.") }
        }
        return pubs
    }

    /// Makes the plain transports, starts the recorder, waits until it listens, then adds the
    /// consumers (so the first keyframe is not sent before anyone reads it).
    private func startRecorder(_ r: Recording, in room: Room) async throws(RoomError) {
        for i in r.streams.indices {
            let s = r.streams[i]
            let remote = PlainRemote(address: "127.0.0.1", rtpPort: s.recorderRtpPort, rtcpPort: s.recorderRtcpPort)
            let router = room.router, tid = s.transport
            let d = try await onWorker(room) { try $0.createPlainTransport(id: tid, router: router, remote: remote) }
            r.streams[i].serverPort = d.port
        }
        let inputs = r.streams.map {
            RecorderPipeline.Input(kind: $0.kind, codec: $0.codec, payloadType: $0.payloadType, rtpPort: $0.recorderRtpPort,
                                   rtcpPort: $0.recorderRtcpPort, serverPort: $0.serverPort)
        }
        let cfg = configuration.recording
        let id = r.id
        let process: RecorderProcess
        do {
            process = try await RecorderProcess.start(
                program: cfg.gstLaunch, arguments: RecorderPipeline.arguments(inputs, file: r.file, latencyMs: cfg.latencyMs),
                log: r.file + ".log") { [weak self] status, signalled in
                Task { await self?.recorderExited(id, status: status, signalled: signalled) }
            }
        } catch {
            throw RoomError.internalError("The recorder (\(cfg.gstLaunch)) did not start: \(error)")
        }
        r.process = process
        logger.info("recording started", metadata: ["recording": "\(r.id)", "file": "\(r.file)", "pid": "\(process.pid)"])
        // The recorder listens once the kernel lists its RTP ports as bound (at most 5 s).
        let ports = r.streams.map(\.recorderRtpPort)
        for _ in 0..<250 {
            if Self.boundUdpPorts().isSuperset(of: ports) || !process.isRunning { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        guard process.isRunning, r.state == .starting else {
            throw RoomError.internalError("The recorder exited at start; see \(r.file).log.")
        }
        guard room.publications.contains(where: { p in r.streams.contains { $0.publicationId == p.id } }) else {
            throw RoomError.publicationNotFound(r.streams[0].publicationId)
        }
        for i in r.streams.indices {
            let s = r.streams[i], ssrc = UInt32.random(in: 1...UInt32.max)
            let consumer = try await onWorker(room) { core in
                let c = try core.addConsumer(on: s.transport) { index in
                    var c = ConsumerParameters(producer: s.producer, transport: index, ssrc: ssrc, payloadType: s.payloadType,
                                               extensionIds: ExtensionIdMap(), preferredLayer: s.preferredLayer)
                    c.pinned = true
                    return c
                }
                if s.kind == "video" { core.requestKeyFrame(s.producer) }
                return c
            }
            r.streams[i].consumer = consumer
        }
        // The recording starts once every stream has reached the recorder (a video stream after its
        // first keyframe): the muxer writes nothing until each of its inputs has, so a stream that
        // never arrived would leave an empty file that cannot even be finished.
        // The file's time zero is the first packet of any stream, not the last stream's: audio
        // flows at once while video waits for its keyframe (seconds under loss), and the file
        // holds that audio, so `durationMs` counts from it.
        let consumers = r.streams.compactMap(\.consumer)
        var flowing = false
        var firstMediaAt: Date?
        for _ in 0..<(Self.firstMediaTimeoutMs / 50) {
            let sent = try await onWorker(room) { core in consumers.map { (core.consumerStats($0)?.packetsSent ?? 0) > 0 } }
            if firstMediaAt == nil, sent.contains(true) { firstMediaAt = Date() }
            flowing = !sent.contains(false)
            if flowing || r.state != .starting || !process.isRunning { break }
            try? await Task.sleep(for: .milliseconds(50))
        }
        guard r.state == .starting, process.isRunning else { throw RoomError.internalError("The recorder exited at start; see \(r.file).log.") }
        guard flowing else {
            throw RoomError(code: 409, name: "noMedia",
                            detail: "Not every recorded publication sent media (a keyframe for video) within \(Self.firstMediaTimeoutMs / 1000) s; is one disabled?")
        }
        r.state = .recording
        r.startedAt = firstMediaAt ?? Date()
        room.recordings.append((r.id, r.summaryJSON))
        emit(room, "recordingStarted", ["recording": r.summaryJSON])
        flushOutbox()
        r.supervisor = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                guard let self, await self.checkRecording(id) else { return }
            }
        }
    }

    /// Once a second: the duration limit and the disk floor. False when the recording is over.
    private func checkRecording(_ id: String) -> Bool {
        guard let r = recordings.first(where: { $0.id == id }), r.state == .recording else { return false }
        let cfg = configuration.recording
        if ContinuousClock.now - r.started >= .seconds(cfg.maxDurationSec) {
            stopRecording(r, reason: "maxDuration")
            return false
        }
        if let free = Self.freeBytes((r.file as NSString).deletingLastPathComponent), free < cfg.minFreeBytes {
            stopRecording(r, reason: "diskFull")
            return false
        }
        return true
    }

    /// Ends the media into the recorder, then asks it to finish its file (SIGINT: EOS with
    /// `-e`); kills it after `recording.stopTimeoutSec`.
    func stopRecording(_ r: Recording, reason: String) {
        guard r.state == .starting || r.state == .recording else { return }
        r.state = .stopping
        r.reason = reason
        r.mediaEndedAt = Date()
        r.supervisor?.cancel()
        closeRecordingTransports(r)
        guard let process = r.process, process.isRunning else {
            finish(r, state: .stopped, reason: reason)
            return
        }
        process.send(SIGINT)
        let id = r.id, wait = configuration.recording.stopTimeoutSec
        Task { [weak self] in
            try? await Task.sleep(for: .seconds(wait))
            await self?.killRecorder(id)
        }
    }

    private func killRecorder(_ id: String) {
        guard let r = recordings.first(where: { $0.id == id }), r.state == .stopping, let p = r.process, p.isRunning else { return }
        logger.warning("recorder did not finish in time; killed", metadata: ["recording": "\(id)"])
        p.send(SIGKILL)
    }

    private func recorderExited(_ id: String, status: Int32, signalled: Bool) {
        guard let r = recordings.first(where: { $0.id == id }), r.isActive else { return }
        if r.state == .stopping && !signalled && status == 0 {
            finish(r, state: .stopped, reason: r.reason ?? "stopped")
        } else {
            logger.warning("recorder exited", metadata: ["recording": "\(id)", "status": "\(status)", "signalled": "\(signalled)"])
            finish(r, state: .failed, reason: r.state == .stopping ? (r.reason ?? "stopped") : "recorderFailed")
        }
    }

    /// The recording is over: transports closed, event sent, waiters answered, old ones forgotten.
    func finish(_ r: Recording, state: Recording.State, reason: String) {
        let wasAnnounced = r.state == .recording || r.state == .stopping
        closeRecordingTransports(r)
        r.supervisor?.cancel()
        r.state = state
        r.reason = reason
        r.endedAt = Date()
        if r.mediaEndedAt == nil { r.mediaEndedAt = r.endedAt }
        r.process?.send(SIGKILL)
        if wasAnnounced, let room = rooms.first(where: { $0.id == r.roomId }) {
            room.recordings.removeAll { $0.id == r.id }
            emit(room, "recordingStopped", ["recording": r.summaryJSON], reason: reason)
            flushOutbox()
        }
        logger.info("recording ended", metadata: ["recording": "\(r.id)", "state": "\(state.rawValue)", "reason": "\(reason)"])
        let waiters = r.finished
        r.finished = []
        for w in waiters { w.resume() }
        let ended = recordings.filter { !$0.isActive }
        if ended.count > RecordingConfiguration.keptEnded, let oldest = ended.first {
            recordings.removeAll { $0 === oldest }
        }
    }

    private func closeRecordingTransports(_ r: Recording) {
        guard let room = rooms.first(where: { $0.id == r.roomId }) else { return }
        let ids = r.streams.map(\.transport)
        for i in r.streams.indices {
            r.streams[i].consumer = nil
            if let f = r.streams[i].forward { releaseForward(f, in: room) }
            r.streams[i].forward = nil
        }
        workers[room.worker].post { core in for id in ids { core.closeTransport(id) } }
    }

    /// Relayed streams stopped (their relay failed): the recordings fed by them stop (reason
    /// `relayFailed`), their files finished with what they had.
    func recordingRelayStopped(_ keys: [ForwardKey]) {
        for r in recordings where r.isActive && r.streams.contains(where: { s in s.forward.map(keys.contains) ?? false }) {
            for i in r.streams.indices { r.streams[i].forward = nil }   // already stopped
            stopRecording(r, reason: "relayFailed")
        }
    }

    /// A publication ended (unpublished, its member left, the room closed): its recordings stop.
    func recordedPublicationEnded(_ pubId: String, reason: String) {
        for r in recordings where r.isActive && r.streams.contains(where: { $0.publicationId == pubId }) {
            stopRecording(r, reason: reason)
        }
    }

    // MARK: Helpers

    /// How long a starting recording waits for the first packet of each stream.
    static let firstMediaTimeoutMs = 10_000

    /// A request well formed but naming nothing that can be recorded (409).
    static func notRecordable(_ detail: String) -> RoomError { RoomError(code: 409, name: "notRecordable", detail: detail) }

    static func freeBytes(_ path: String) -> Int64? {
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return nil }
        return Int64(clamping: UInt64(s.f_bavail).multipliedReportingOverflow(by: UInt64(s.f_frsize)).partialValue)
    }

    /// `count` distinct free UDP ports on 127.0.0.1 (bound together, then released for the recorder).
    static func freeUdpPorts(_ count: Int) -> [UInt16]? {
        var fds: [Int32] = []
        defer { for fd in fds { Glibc.close(fd) } }
        var ports: [UInt16] = []
        for _ in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            guard fd >= 0 else { return nil }
            fds.append(fd)
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_addr.s_addr = inet_addr("127.0.0.1")
            a.sin_port = 0
            let ok = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 } }
            guard ok else { return nil }
            var b = sockaddr_in(), len = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &b) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
            ports.append(UInt16(bigEndian: b.sin_port))
        }
        return ports
    }

    /// The local ports of the UDP sockets bound in this network namespace (/proc/net/udp and
    /// udp6). Read rather than probed: a probe that binds the port could make the recorder's own
    /// bind fail if it came at that moment.
    static func boundUdpPorts() -> Set<UInt16> {
        var ports = Set<UInt16>()
        for table in ["/proc/net/udp", "/proc/net/udp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count > 1, let colon = fields[1].lastIndex(of: ":"),
                      let port = UInt16(fields[1][fields[1].index(after: colon)...], radix: 16) else { continue }
                ports.insert(port)
            }
        }
        return ports
    }
}
