internal import Foundation
internal import MinatoMedia
public import MinatoTransport
internal import MinatoWire

/// Recording limits and the recorder program (config `recording.*`).
public struct RecordingConfiguration: Sendable {
    /// Where recordings are written (made when the first one starts); relative paths are the
    /// server's working directory's.
    public var directory = "recordings"
    /// Recordings running at once on this server (0: recording off).
    public var maxConcurrent = 4
    /// A recording is stopped (reason `maxDuration`) after this long.
    public var maxDurationSec = 4 * 3600
    /// A recording does not start, and a running one stops (reason `diskFull`), when the
    /// directory's file system has less free space than this.
    public var minFreeBytes: Int64 = 512 << 20
    /// GStreamer's `gst-launch-1.0` (a name looked up in PATH, or a path).
    public var gstLaunch = "gst-launch-1.0"
    /// GStreamer's `gst-discoverer-1.0`, which reads what a file to play holds.
    public var gstDiscoverer = "gst-discoverer-1.0"
    /// The recorder's jitter buffer (`rtpbin latency`): how long it waits for a retransmission.
    /// A recording is not watched live, so it waits long: a retransmission the SFU must first
    /// get from the publisher arrives in time even from a slow one.
    public var latencyMs = 1000
    /// How long a stopping recorder may take to finish its file before it is killed.
    public var stopTimeoutSec = 10
    /// Ended recordings remembered for `GET /v1/recordings` (the oldest are forgotten first).
    public static let keptEnded = 256
    public init() {}
}

/// One recording: the publications of one member written by a recorder child process
/// (`RecorderPipeline`) fed by one plain RTP egress transport per publication.
final class Recording {
    enum State: String { case starting, recording, stopping, stopped, failed }

    /// One recorded publication: its plain transport, its consumer, and the ports of the recorder.
    struct Stream {
        let publicationId: String
        let kind: String
        let codec: ForwardedCodec
        let payloadType: UInt8
        let recorderRtpPort: UInt16
        let recorderRtcpPort: UInt16
        let transport: TransportId
        var serverPort: UInt16 = 0
        var consumer: ConsumerId?
        let producer: ProducerId
        /// A simulcast video's highest layer to record (`encodingId`); nil: the top layer.
        var preferredLayer: Int? = nil
        /// The publisher's format parameters (a playback publishes the stream with them).
        var fmtp: String?
        /// A publication served by another node (`cluster.cascade`): its stream relayed to the
        /// room's node, where the recorder is, held (one reference) while the recording runs.
        var forward: ForwardKey? = nil
    }

    let id: String
    let roomId: String
    let memberId: String
    let file: String
    let format: String
    /// The simulcast encoding asked for (`encodingId`), if any.
    var encodingId: String?
    var streams: [Stream]
    var state: State = .starting
    var reason: String?
    /// When media began to flow to the recorder (the consumers were added), when it stopped
    /// (the recording was stopped or failed), and when the recording ended (its file finished).
    var startedAt: Date?
    var mediaEndedAt: Date?
    var endedAt: Date?
    let started = ContinuousClock.now
    var process: RecorderProcess?
    /// Waiters of `stop` (DELETE answers once the file is finished).
    var finished: [CheckedContinuation<Void, Never>] = []
    var supervisor: Task<Void, Never>?

    init(id: String, roomId: String, memberId: String, file: String, format: String, streams: [Stream]) {
        self.id = id; self.roomId = roomId; self.memberId = memberId; self.file = file; self.format = format
        self.streams = streams
    }

    var isActive: Bool { state == .starting || state == .recording || state == .stopping }

    /// The media time the file holds: from the first consumer to the stop (0 before it started).
    var mediaDurationMs: Int {
        startedAt.map { max(0, Int(exactly: ((mediaEndedAt ?? Date()).timeIntervalSince($0) * 1000).rounded()) ?? 0) } ?? 0
    }

    /// What members see (room snapshot, `recordingStarted`): no file path.
    var summaryJSON: JSONValue {
        ["id": .string(id), "memberId": .string(memberId), "publicationIds": .array(streams.map { .string($0.publicationId) }),
         "startedAt": .string(ISO8601DateFormatter().string(from: startedAt ?? Date()))]
    }

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "roomId": .string(roomId), "memberId": .string(memberId),
            "publicationIds": .array(streams.map { .string($0.publicationId) }),
            "file": .string(file), "format": .string(format), "state": .string(state.rawValue),
            "startedAt": .string(ISO8601DateFormatter().string(from: startedAt ?? Date())),
            // The media time the file holds: from the first consumer to the stop.
            "durationMs": .int(mediaDurationMs),
            "sizeBytes": .int(Int((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)??.int64Value ?? 0))]
        if let endedAt { o["endedAt"] = .string(ISO8601DateFormatter().string(from: endedAt)) }
        if let reason { o["reason"] = .string(reason) }
        if let encodingId { o["encodingId"] = .string(encodingId) }
        return .object(o)
    }
}

/// The recorder: a `gst-launch-1.0` pipeline with one `rtpbin` session per stream (jitter
/// buffer, NACKs for lost packets and PLI through RTCP back to the server, lip sync from the
/// server's sender reports), the codec's depayloader and parser, and `webmmux` (VP8/VP9 + Opus)
/// or `matroskamux` (H.264) into one file. Run with `-e`: SIGINT makes it finish the file.
enum RecorderPipeline {
    struct Input: Equatable {
        let kind: String
        let codec: ForwardedCodec
        let payloadType: UInt8
        let rtpPort: UInt16
        let rtcpPort: UInt16
        /// Where its RTCP goes: the server's plain transport.
        let serverPort: UInt16
    }

    /// WebM for VP8/VP9 (with Opus), Matroska when there is H.264 or AV1.
    static func format(_ codecs: [ForwardedCodec]) -> String {
        codecs.contains(where: { $0 == .h264 || $0 == .av1 }) ? "mkv" : "webm"
    }

    static func arguments(_ inputs: [Input], file: String, latencyMs: Int) -> [String] {
        let mux = format(inputs.map(\.codec)) == "webm" ? "webmmux" : "matroskamux"
        // buffer-mode=synced: the jitter buffer keeps the sender's clock instead of smoothing
        // arrival times (the default wobbled frame times enough for FFmpeg to guess 31 fps and
        // see one timestamp go back in 2 files of the recorder's validation runs).
        var a = ["-e", "-q", "rtpbin", "name=rb", "latency=\(latencyMs)", "buffer-mode=synced", "do-retransmission=true",
                 "rtp-profile=avpf", "drop-on-latency=false"]
        for (i, input) in inputs.enumerated() {
            let media = input.kind == "audio" ? "audio" : "video"
            // Video says it takes NACK and PLI feedback, so the session sends both.
            let caps = "application/x-rtp,media=\(media),clock-rate=\(input.codec.clockRate)," +
                "encoding-name=\(input.codec.gstEncodingName),payload=\(input.payloadType)" +
                (media == "video" ? ",rtcp-fb-nack=(boolean)true,rtcp-fb-nack-pli=(boolean)true" : "")
            a += ["udpsrc", "address=127.0.0.1", "port=\(input.rtpPort)", "caps=\(caps)", "!", "rb.recv_rtp_sink_\(i)"]
            a += ["udpsrc", "address=127.0.0.1", "port=\(input.rtcpPort)", "!", "rb.recv_rtcp_sink_\(i)"]
            a += ["rb.send_rtcp_src_\(i)", "!", "udpsink", "host=127.0.0.1", "port=\(input.serverPort)", "sync=false", "async=false"]
        }
        for input in inputs {
            a += ["rb."] + depayloader(input.codec) + ["!", "queue", "!", "mux."]
        }
        // filesink writes each buffer at once: a recorder killed mid-recording loses at most the
        // muxer's open cluster (validation: 599 of 600 frames after SIGKILL, 587 buffered).
        a += [mux, "name=mux"] + ["!", "filesink", "buffer-mode=unbuffered", "location=\(file)"]
        return a
    }

    static func depayloader(_ codec: ForwardedCodec) -> [String] {
        switch codec {
        case .vp8: return ["!", "rtpvp8depay", "request-keyframe=true", "wait-for-keyframe=true"]
        case .vp9: return ["!", "rtpvp9depay", "request-keyframe=true", "wait-for-keyframe=true"]
        // avc3: parameter sets in the stream, not in the caps. A browser that changes its
        // resolution sends new ones, and Matroska refuses a caps change ("Caps changes are not
        // supported", found with Chromium going from 320x240 to 480x360).
        case .h264: return ["!", "rtph264depay", "request-keyframe=true", "wait-for-keyframe=true", "!", "h264parse",
                            "!", "video/x-h264,stream-format=avc3,alignment=au"]
        case .av1: return ["!", "rtpav1depay", "!", "av1parse"]
        case .opus: return ["!", "rtpopusdepay", "!", "opusparse"]
        }
    }

    /// A file name part made of letters, digits, `-` and `_` only (at most 40 characters).
    static func safeName(_ s: String) -> String {
        let kept = s.unicodeScalars.map { (CharacterSet.alphanumerics.contains($0) && $0.isASCII) || $0 == "-" || $0 == "_" ? Character($0) : "_" }
        let text = String(kept.prefix(40))
        return text.isEmpty ? "_" : text
    }

    /// `<room>-<member>-<UTC start>-<id prefix>.<format>`.
    static func fileName(room: String, member: String, start: Date, id: String, format: String) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        return "\(safeName(room))-\(safeName(member))-\(f.string(from: start))-\(safeName(String(id.suffix(8)))).\(format)"
    }
}

extension ForwardedCodec {
    /// The encoding name in GStreamer's RTP caps.
    var gstEncodingName: String {
        switch self {
        case .opus: return "OPUS"
        case .vp8: return "VP8"
        case .vp9: return "VP9"
        case .h264: return "H264"
        case .av1: return "AV1"
        }
    }
}
