internal import Foundation
internal import MinatoMedia
internal import MinatoTransport
internal import MinatoWire
#if canImport(Glibc)
internal import Glibc
#endif

/// A recording played into a room (admin API `/v1/rooms/{id}/playbacks`): a bot member whose
/// publications are plain RTP ingress (RoomService+PlainIngress), fed in real time by a
/// GStreamer child (`PlaybackPipeline`) that reads the file. It ends when the file does (the
/// member leaves), on DELETE, or with the room.
final class Playback {
    enum State: String { case playing, ended, failed }
    let id: String
    let roomId: String
    /// What is played: a recording of this server, or a file of `recording.directory`.
    let recordingId: String?
    let file: String
    var memberId = ""
    var ingresses: [PlainIngress] = []
    var state = State.playing
    var reason: String?
    var process: RecorderProcess?
    /// Waits `startDelayMs`, then starts the player.
    var supervisor: Task<Void, Never>?
    let startedAt = Date()
    var endedAt: Date?

    init(id: String, roomId: String, recordingId: String?, file: String) {
        self.id = id; self.roomId = roomId; self.recordingId = recordingId; self.file = file
    }

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "roomId": .string(roomId), "file": .string(file), "memberId": .string(memberId),
            "publicationIds": .array(ingresses.map { .string($0.publicationId) }), "state": .string(state.rawValue),
            "startedAt": .string(ISO8601DateFormatter().string(from: startedAt))]
        if let endedAt { o["endedAt"] = .string(ISO8601DateFormatter().string(from: endedAt)) }
        if let reason { o["reason"] = .string(reason) }
        if let recordingId { o["recordingId"] = .string(recordingId) }
        return .object(o)
    }
}

/// The player: `filesrc ! matroskademux`, each stream payloaded as recorded (VP8, VP9, H.264,
/// Opus) into an `rtpbin` send session (sender reports with one CNAME, so subscribers keep lip
/// sync), RTP and RTCP to the stream's ingress port; `udpsink sync=true` paces it in real time.
enum PlaybackPipeline {
    struct Output: Equatable {
        let kind: String
        let codec: ForwardedCodec
        let payloadType: UInt8
        let ssrc: UInt32
        let port: UInt16
    }

    static func arguments(file: String, _ outputs: [Output]) -> [String] {
        var a = ["-q", "rtpbin", "name=rb", "sdes=application/x-rtp-source-sdes,cname=(string)minato-playback",
                 "filesrc", "location=\(file)", "!", "matroskademux", "name=d"]
        for (i, o) in outputs.enumerated() {
            let pad = o.kind == "audio" ? "d.audio_0" : "d.video_0"
            a += [pad, "!", "queue"] + payloader(o) + ["!", "rb.send_rtp_sink_\(i)"]
            a += ["rb.send_rtp_src_\(i)", "!", "udpsink", "host=127.0.0.1", "port=\(o.port)", "sync=true"]
            a += ["rb.send_rtcp_src_\(i)", "!", "udpsink", "host=127.0.0.1", "port=\(o.port)", "sync=false", "async=false"]
        }
        return a
    }

    static func payloader(_ o: Output) -> [String] {
        let common = ["pt=\(o.payloadType)", "ssrc=\(o.ssrc)", "mtu=1200"]
        switch o.codec {
        case .vp8: return ["!", "rtpvp8pay", "picture-id-mode=15-bit"] + common
        case .vp9: return ["!", "rtpvp9pay", "picture-id-mode=15-bit"] + common
        case .h264: return ["!", "h264parse", "!", "rtph264pay", "config-interval=-1"] + common
        case .av1: return ["!", "rtpav1pay"] + common
        case .opus: return ["!", "rtpopuspay"] + common
        }
    }
}

extension RoomService {
    /// Plays a finished recording of this server (`recordingId`), or a WebM/Matroska `file` of
    /// `recording.directory` (VP8, VP9 or H.264 and Opus: its first video and first audio
    /// stream, as `gst-discoverer-1.0` reports them), into `roomId` as bot member `memberName`
    /// (default `playback-` and 8 hex digits), after `startDelayMs` (default 1000) so members
    /// can subscribe before its first keyframe: a file cannot make another on request.
    public func adminStartPlayback(_ roomId: String, recordingId: String?, file: String? = nil, memberName: String?,
                                   startDelayMs: Int?) async throws(RoomError) -> JSONValue {
        let room = try adminRoom(roomId)
        // (kind, codec, payload type, fmtp) of each stream to publish, the file and its length.
        var tracks: [(kind: String, codec: ForwardedCodec, payloadType: UInt8, fmtp: String?)] = []
        let path: String, length: Int
        switch (recordingId, file) {
        case (let recordingId?, nil):
            guard let rec = recordings.first(where: { $0.id == recordingId }) else {
                throw RoomError(code: 404, name: "recordingNotFound", detail: "There is no recording '\(recordingId.prefix(80))'.")
            }
            guard !rec.isActive else { throw RoomError(code: 409, name: "recordingRunning", detail: "The recording has not ended yet.") }
            guard FileManager.default.fileExists(atPath: rec.file) else {
                throw RoomError(code: 410, name: "fileGone", detail: "The recording's file is no longer there.")
            }
            tracks = rec.streams.map { ($0.kind, $0.codec, $0.payloadType, $0.fmtp) }
            path = rec.file
            length = rec.mediaDurationMs
        case (nil, let file?):
            path = try playableFile(file)
            let probe = try await probeMediaFile(path)
            if let v = probe.video { tracks.append(("video", v.codec, 96, v.fmtp)) }
            if let a = probe.audio { tracks.append(("audio", a.codec, 111, a.fmtp)) }
            guard !tracks.isEmpty else {
                throw Self.notPlayable("The file has no VP8, VP9, H.264 or Opus stream (it has \(probe.unsupported.joined(separator: ", "))).")
            }
            // A file that states no duration (a live WebM) is bounded like a recording.
            length = probe.durationMs > 0 ? probe.durationMs : configuration.recording.maxDurationSec * 1000
        default:
            throw RoomError.invalidParameter("The body needs \"recordingId\" or \"file\" (a string), not both.")
        }
        let delay = startDelayMs ?? 1000
        guard (0...60_000).contains(delay) else { throw RoomError.invalidParameter("startDelayMs must be 0...60000.") }
        guard playbacks.filter({ $0.state == .playing }).count < configuration.recording.maxConcurrent else {
            throw RoomError.limitExceeded("At most \(configuration.recording.maxConcurrent) playbacks may run at once (recording.maxConcurrent).")
        }
        let name = memberName ?? Self.sessionName("playback")
        let playback = Playback(id: newId(), roomId: room.id, recordingId: recordingId, file: path)
        playbacks.append(playback)
        var outputs: [PlaybackPipeline.Output] = []
        do throws(RoomError) {
            // Video first: a member's tiles show its picture before its sound.
            for s in tracks.sorted(by: { $0.kind == "video" && $1.kind != "video" }) {
                let ssrc = UInt32.random(in: 1...UInt32.max)
                let request = PlainPublicationRequest(memberName: name, mimeType: "\(s.kind)/\(s.codec.encodingName)",
                                                      payloadType: Int(s.payloadType), ssrc: Int(ssrc), address: "127.0.0.1", fmtp: s.fmtp)
                let ingress = try await createPlainIngress(in: room, request, anyAddress: true)
                playback.ingresses.append(ingress)
                playback.memberId = ingress.memberId
                outputs.append(.init(kind: s.kind, codec: s.codec, payloadType: s.payloadType, ssrc: ssrc, port: ingress.port))
            }
        } catch {
            endPlayback(playback, state: .failed, reason: "startFailed")
            throw error
        }
        let id = playback.id, program = configuration.recording.gstLaunch
        playback.supervisor = Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(delay))
            await self?.spawnPlayer(id, program: program, file: path, outputs: outputs)
            // The player exits at the end of the file; should its end-of-stream get stuck (an
            // RTCP branch that never hears it), the file's length plus 5 s ends it anyway.
            try? await Task.sleep(for: .milliseconds(length + 5000))
            guard !Task.isCancelled else { return }
            await self?.playerOverran(id)
        }
        return ["playback": playback.json]
    }

    /// `file` resolved (relative to `recording.directory`, symbolic links followed): it must be
    /// a regular file inside that directory, so the admin API reads nothing else of the machine.
    private func playableFile(_ file: String) throws(RoomError) -> String {
        let directory = URL(fileURLWithPath: configuration.recording.directory).standardizedFileURL.resolvingSymlinksInPath().path
        guard !file.isEmpty, file.utf8.count <= 4096, !file.utf8.contains(0) else {
            throw RoomError.invalidParameter("\"file\" must be a path of 1 to 4096 bytes.")
        }
        let url = file.hasPrefix("/") ? URL(fileURLWithPath: file) : URL(fileURLWithPath: directory).appendingPathComponent(file)
        let path = url.standardizedFileURL.resolvingSymlinksInPath().path
        guard path.hasPrefix(directory + "/") else {
            throw RoomError(code: 403, name: "fileNotAllowed",
                            detail: "Only files in the recording directory (recording.directory) can be played.")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw RoomError(code: 404, name: "fileNotFound", detail: "There is no file '\(file.prefix(200))' in the recording directory.")
        }
        return path
    }

    /// Runs `gst-discoverer-1.0 -v` on `path` (at most 10 s) and reads its report.
    private func probeMediaFile(_ path: String) async throws(RoomError) -> MediaFileProbe {
        let report = FileManager.default.temporaryDirectory.appendingPathComponent("minato-probe-\(newId()).txt").path
        defer { try? FileManager.default.removeItem(atPath: report) }
        let exited = ExitSignal()
        let process: RecorderProcess
        do {
            process = try await RecorderProcess.start(program: configuration.recording.gstDiscoverer,
                                                      arguments: ["-v", "--timeout=10", path], log: report) { status, _ in
                exited.fire(status)
            }
        } catch {
            throw RoomError.internalError("\(configuration.recording.gstDiscoverer) did not start: \(error)")
        }
        let status = await exited.wait(timeout: .seconds(12))
        if status == nil { process.send(SIGKILL) }
        guard status == 0, let text = try? String(contentsOfFile: report, encoding: .utf8), let probe = MediaFileProbe.parse(text) else {
            throw Self.notPlayable("The file is not a media file GStreamer can read.")
        }
        return probe
    }

    static func notPlayable(_ detail: String) -> RoomError { RoomError(code: 422, name: "notPlayable", detail: detail) }

    public func adminPlaybacks(_ roomId: String) throws(RoomError) -> JSONValue {
        _ = try adminRoom(roomId)
        return ["playbacks": .array(playbacks.filter { $0.roomId == roomId }.map(\.json))]
    }

    /// Stops a playback: the player is stopped and the member leaves.
    public func adminStopPlayback(_ roomId: String, _ id: String) throws(RoomError) -> JSONValue {
        _ = try adminRoom(roomId)
        guard let p = playbacks.first(where: { $0.id == id && $0.roomId == roomId }) else {
            throw RoomError(code: 404, name: "playbackNotFound", detail: "There is no playback '\(id.prefix(80))' in this room.")
        }
        if p.state == .playing { endPlayback(p, state: .ended, reason: "stopped") }
        return ["playback": p.json]
    }

    private func spawnPlayer(_ id: String, program: String, file: String, outputs: [PlaybackPipeline.Output]) async {
        guard let p = playbacks.first(where: { $0.id == id }), p.state == .playing else { return }
        do {
            p.process = try await RecorderProcess.start(program: program, arguments: PlaybackPipeline.arguments(file: file, outputs),
                                                        log: "/dev/null") { [weak self] status, signalled in
                Task { await self?.playerExited(id, status: status, signalled: signalled) }
            }
        } catch {
            endPlayback(p, state: .failed, reason: "playerFailed")
        }
    }

    private func playerOverran(_ id: String) {
        guard let p = playbacks.first(where: { $0.id == id }), p.state == .playing else { return }
        logger.warning("player still running after the file's length; stopped", metadata: ["playback": "\(id)"])
        endPlayback(p, state: .ended, reason: "fileEnded")
    }

    private func playerExited(_ id: String, status: Int32, signalled: Bool) {
        guard let p = playbacks.first(where: { $0.id == id }), p.state == .playing else { return }
        let clean = status == 0 && !signalled
        if !clean { logger.warning("player exited", metadata: ["playback": "\(id)", "status": "\(status)"]) }
        endPlayback(p, state: clean ? .ended : .failed, reason: clean ? "fileEnded" : "playerFailed")
    }

    /// The playback is over: the player stops, its publications end and its member leaves.
    func endPlayback(_ p: Playback, state: Playback.State, reason: String) {
        guard p.state == .playing else { return }
        p.state = state
        p.reason = reason
        p.endedAt = Date()
        p.supervisor?.cancel()
        p.process?.send(SIGKILL)
        if let room = rooms.first(where: { $0.id == p.roomId }) {
            for i in p.ingresses {
                if let pub = room.publication(i.publicationId) { unpublish(pub, in: room) } else { closePlainIngress(i) }
            }
            if let m = room.member(p.memberId) { leaveIfNothingPublished(m, in: room) }
            flushOutbox()
        } else {
            for i in p.ingresses { closePlainIngress(i) }
        }
        let ended = playbacks.filter { $0.state != .playing }
        if ended.count > RecordingConfiguration.keptEnded, let oldest = ended.first { playbacks.removeAll { $0 === oldest } }
    }

    /// A publication ended: a playback feeding it ends too (its member was kicked, the room closed).
    func playbackPublicationEnded(_ pubId: String) {
        for p in playbacks where p.state == .playing && p.ingresses.contains(where: { $0.publicationId == pubId }) {
            endPlayback(p, state: .ended, reason: "publicationEnded")
        }
    }
}

/// A child process's exit status, awaited once with a timeout: settled once, by the exit
/// (its status) or by the timeout (nil), whichever comes first.
private final class ExitSignal: @unchecked Sendable {
    private let lock = NSLock()
    /// nil: not settled yet; .some(nil): timed out; .some(status): exited.
    private var outcome: Int32??
    private var waiter: CheckedContinuation<Int32?, Never>?

    func fire(_ status: Int32) { settle(status) }

    /// The status, or nil when the process has not ended within `timeout`.
    func wait(timeout: Duration) async -> Int32? {
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.settle(nil)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { (c: CheckedContinuation<Int32?, Never>) in
            lock.lock()
            if let outcome { lock.unlock(); c.resume(returning: outcome); return }
            waiter = c
            lock.unlock()
        }
    }

    private func settle(_ value: Int32?) {
        lock.lock()
        guard outcome == nil else { lock.unlock(); return }
        outcome = .some(value)
        let w = waiter
        waiter = nil
        lock.unlock()
        w?.resume(returning: value)
    }
}
