internal import Foundation
internal import MinatoWire

/// What a WebM or Matroska file holds, as GStreamer's `gst-discoverer-1.0 -v` reports it: its
/// duration and its first video and first audio stream (codec, and for H.264 the
/// `profile-level-id` from the file's decoder configuration). Playback (`POST …/playbacks
/// {file}`) publishes those two streams.
struct MediaFileProbe: Equatable {
    struct Track: Equatable {
        let codec: ForwardedCodec
        /// Format parameters for the publication (H.264: packetization mode and profile).
        let fmtp: String?
    }

    var video: Track?
    var audio: Track?
    var durationMs = 0
    /// Streams of a codec Minato does not forward ("video/x-theora"), by caps name.
    var unsupported: [String] = []

    /// Reads the discoverer's report; nil when it names no stream at all (not a media file).
    static func parse(_ report: String) -> MediaFileProbe? {
        var probe = MediaFileProbe()
        var streams = 0
        for raw in report.split(whereSeparator: \.isNewline) {
            let line = raw.drop { $0 == " " }
            if line.hasPrefix("Duration: ") {
                probe.durationMs = durationMs(String(line.dropFirst("Duration: ".count))) ?? 0
                continue
            }
            // "video #1: video/x-h264, level=(string)1.3, …" / "audio #2: audio/x-opus, rate=…"
            guard line.hasPrefix("video #") || line.hasPrefix("audio #"), let colon = line.firstIndex(of: ":") else { continue }
            let kind = String(line.prefix(5))
            let caps = line[line.index(after: colon)...].drop { $0 == " " }
            let name = String(caps.prefix { $0 != "," && $0 != " " })
            guard name.contains("/") else { continue }
            streams += 1
            let track: Track?
            switch name {
            case "video/x-vp8": track = Track(codec: .vp8, fmtp: nil)
            case "video/x-vp9": track = Track(codec: .vp9, fmtp: nil)
            case "video/x-h264": track = Track(codec: .h264, fmtp: h264Fmtp(String(caps)))
            case "audio/x-opus": track = Track(codec: .opus, fmtp: nil)
            default: track = nil
            }
            guard let track else { probe.unsupported.append(name); continue }
            if kind == "video", probe.video == nil { probe.video = track }
            if kind == "audio", probe.audio == nil { probe.audio = track }
        }
        return streams > 0 ? probe : nil
    }

    /// "0:00:03.008000000" (hours:minutes:seconds.fraction) in milliseconds.
    static func durationMs(_ text: String) -> Int? {
        let parts = text.split(separator: ":")
        guard parts.count == 3, let h = Int(parts[0]), let m = Int(parts[1]), let s = Double(parts[2]),
              (0...1_000_000).contains(h), (0..<60).contains(m), s >= 0, s < 60 else { return nil }
        return (h * 3600 + m * 60) * 1000 + Int((s * 1000).rounded())
    }

    /// H.264's format parameters: packetization mode 1 (what the payloader sends) and the
    /// profile and level from the caps' `codec_data` (an avcC record: bytes 1–3), or
    /// constrained baseline 3.1 when the caps have none.
    static func h264Fmtp(_ caps: String) -> String {
        var profile = "42e01f"
        if let r = caps.range(of: "codec_data=(buffer)") {
            let hex = caps[r.upperBound...].prefix { $0.isHexDigit }
            if hex.count >= 8 { profile = String(hex.dropFirst(2).prefix(6)).lowercased() }
        }
        return "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=\(profile)"
    }
}
