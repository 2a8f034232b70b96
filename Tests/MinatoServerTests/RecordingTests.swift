import Foundation
import Testing
@testable import MinatoRooms
@testable import MinatoServer
import MinatoWire

/// The recorder's command line and file names (the recording itself is tested with GStreamer,
/// FFmpeg and PyAV in Tests/interop/test_recording.py).
@Suite struct RecordingTests {
    let vp8 = RecorderPipeline.Input(kind: "video", codec: .vp8, payloadType: 96, rtpPort: 5000, rtcpPort: 5001, serverPort: 40000)
    let opus = RecorderPipeline.Input(kind: "audio", codec: .opus, payloadType: 111, rtpPort: 5002, rtcpPort: 5003, serverPort: 40001)

    @Test func vp8AndOpusGoToWebmWithOneRtpbinSessionEach() {
        let a = RecorderPipeline.arguments([vp8, opus], file: "/r/x.webm", latencyMs: 400)
        let line = a.joined(separator: " ")
        #expect(a.prefix(3) == ["-e", "-q", "rtpbin"])
        #expect(line.contains("latency=400 buffer-mode=synced do-retransmission=true rtp-profile=avpf"))
        #expect(line.contains("udpsrc address=127.0.0.1 port=5000 caps=application/x-rtp,media=video,clock-rate=90000,encoding-name=VP8,payload=96,rtcp-fb-nack=(boolean)true,rtcp-fb-nack-pli=(boolean)true ! rb.recv_rtp_sink_0"))
        #expect(line.contains("udpsrc address=127.0.0.1 port=5001 ! rb.recv_rtcp_sink_0"))
        #expect(line.contains("rb.send_rtcp_src_0 ! udpsink host=127.0.0.1 port=40000 sync=false async=false"))
        #expect(line.contains("encoding-name=OPUS,payload=111 ! rb.recv_rtp_sink_1"))   // no feedback caps for audio
        #expect(line.contains("rb.send_rtcp_src_1 ! udpsink host=127.0.0.1 port=40001"))
        #expect(line.contains("rb. ! rtpvp8depay request-keyframe=true wait-for-keyframe=true ! queue ! mux."))
        #expect(line.contains("rb. ! rtpopusdepay ! opusparse ! queue ! mux."))
        #expect(line.hasSuffix("webmmux name=mux ! filesink buffer-mode=unbuffered location=/r/x.webm"))
        // Every argument is one token for gst-launch: no spaces inside.
        #expect(!a.contains { $0.contains(" ") })
    }

    @Test func h264GoesToMatroska() {
        let h264 = RecorderPipeline.Input(kind: "video", codec: .h264, payloadType: 96, rtpPort: 1, rtcpPort: 2, serverPort: 3)
        #expect(RecorderPipeline.format([.h264, .opus]) == "mkv")
        #expect(RecorderPipeline.format([.vp9, .opus]) == "webm")
        let line = RecorderPipeline.arguments([h264, opus], file: "f.mkv", latencyMs: 200).joined(separator: " ")
        #expect(line.contains("rtph264depay request-keyframe=true wait-for-keyframe=true ! h264parse ! video/x-h264,stream-format=avc3,alignment=au ! queue ! mux."))
        #expect(line.contains("matroskamux name=mux"))
    }

    @Test func fileNamesKeepOnlySafeCharacters() {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let name = RecorderPipeline.fileName(room: "../../etc/passwd", member: "a b;rm -rf", start: start,
                                             id: "n1.0123-4567-89ab-cdef", format: "webm")
        #expect(name == "______etc_passwd-a_b_rm_-rf-20270115T080000Z-9ab-cdef.webm")
        #expect(!name.contains("/"))
        #expect(RecorderPipeline.safeName("") == "_")
        #expect(RecorderPipeline.safeName(String(repeating: "x", count: 100)).count == 40)
        #expect(RecorderPipeline.safeName("日本") == "__")
    }

    @Test func configurationKeysAreCheckedAndApplied() throws {
        var c = ServerConfiguration()
        #expect(c.rooms.recording.directory == "recordings")
        #expect(c.rooms.recording.maxConcurrent == 4)
        try c.apply(yaml: "recording:\n  directory: /tmp/rec\n  maxConcurrent: 0\n  minFreeBytes: 1048576\n  gstLaunch: /usr/bin/gst-launch-1.0\n",
                    source: "test")
        #expect(c.rooms.recording.directory == "/tmp/rec")
        #expect(c.rooms.recording.maxConcurrent == 0)
        #expect(c.rooms.recording.minFreeBytes == 1 << 20)
        #expect(throws: ConfigurationError.self) { try c.apply(environment: ["MINATO_RECORDING_GST_LAUNCH": "gst-launch-1.0 --evil"]) }
        #expect(throws: ConfigurationError.self) { try c.apply(environment: ["MINATO_RECORDING_MAX_DURATION_SEC": "0"]) }
    }
}

/// The player's command line (the playback itself is tested in Tests/interop/test_recording.py).
@Suite struct PlaybackPipelineTests {
    @Test func eachStreamGoesThroughAnRtpbinSessionToItsIngressPort() {
        let a = PlaybackPipeline.arguments(file: "/r/x.webm", [
            .init(kind: "video", codec: .vp8, payloadType: 96, ssrc: 7, port: 40010),
            .init(kind: "audio", codec: .opus, payloadType: 111, ssrc: 8, port: 40011)])
        let line = a.joined(separator: " ")
        #expect(line.hasPrefix("-q rtpbin name=rb sdes=application/x-rtp-source-sdes,cname=(string)minato-playback filesrc location=/r/x.webm ! matroskademux name=d"))
        #expect(line.contains("d.video_0 ! queue ! rtpvp8pay picture-id-mode=15-bit pt=96 ssrc=7 mtu=1200 ! rb.send_rtp_sink_0"))
        #expect(line.contains("rb.send_rtp_src_0 ! udpsink host=127.0.0.1 port=40010 sync=true"))
        #expect(line.contains("rb.send_rtcp_src_0 ! udpsink host=127.0.0.1 port=40010 sync=false async=false"))
        #expect(line.contains("d.audio_0 ! queue ! rtpopuspay pt=111 ssrc=8 mtu=1200 ! rb.send_rtp_sink_1"))
        #expect(!a.contains { $0.contains(" ") })
        let h264 = PlaybackPipeline.arguments(file: "f.mkv", [.init(kind: "video", codec: .h264, payloadType: 96, ssrc: 1, port: 2)])
        #expect(h264.joined(separator: " ").contains("h264parse ! rtph264pay config-interval=-1 pt=96"))
    }
}

/// `gst-discoverer-1.0 -v` reports (Debian's GStreamer 1.22, files made by FFmpeg) read into
/// what playback publishes.
@Suite struct MediaFileProbeTests {
    @Test func h264AndOpusInMatroska() throws {
        let report = """
        Analyzing file:///tmp/t.mkv
        Done discovering file:///tmp/t.mkv

        Properties:
          Duration: 0:00:03.008000000
          Seekable: yes
          container #0: video/x-matroska
            video #1: video/x-h264, level=(string)1.3, profile=(string)constrained-baseline, codec_data=(buffer)0142c00dffe100186742c00d, stream-format=(string)avc, width=(int)320
              Codec:
                video/x-h264, level=(string)1.3
            audio #2: audio/x-opus, rate=(int)48000, channels=(int)1, channel-mapping-family=(int)0
        """
        let p = try #require(MediaFileProbe.parse(report))
        #expect(p.durationMs == 3008)
        #expect(p.video == .init(codec: .h264, fmtp: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42c00d"))
        #expect(p.audio == .init(codec: .opus, fmtp: nil))
        #expect(p.unsupported.isEmpty)
    }

    @Test func vp9AloneAndUnsupportedStreamsAreNamed() throws {
        let report = """
          Duration: 1:02:03.500000000
            video #1: video/x-vp9, width=(int)320, height=(int)240
            video #2: video/x-vp8, width=(int)320, height=(int)240
            audio #3: audio/x-vorbis, rate=(int)48000
        """
        let p = try #require(MediaFileProbe.parse(report))
        #expect(p.durationMs == 3_723_500)
        #expect(p.video == .init(codec: .vp9, fmtp: nil))   // the first video stream
        #expect(p.audio == nil && p.unsupported == ["audio/x-vorbis"])
    }

    @Test func notAMediaFile() {
        #expect(MediaFileProbe.parse("Analyzing file:///tmp/x.txt\nAn error was encountered while discovering the file\n Could not determine type of stream.\n") == nil)
        #expect(MediaFileProbe.durationMs("0:61:00.0") == nil && MediaFileProbe.durationMs("x") == nil)
        #expect(MediaFileProbe.h264Fmtp("video/x-h264, width=(int)320").hasSuffix("profile-level-id=42e01f"))
    }
}

/// The admin API's `srtp` object of plain RTP (SDES-style keys).
@Suite struct PlainSrtpParametersTests {
    @Test func suitesKeysAndRefusals() throws {
        #expect(try PlainSrtpParameters.parse(nil) == nil)
        let own = try #require(try PlainSrtpParameters.parse(["cryptoSuite": "AES_CM_128_HMAC_SHA1_80"]))
        #expect(own.keys.localKeyAndSalt.count == 30 && own.keys.remoteKeyAndSalt == own.keys.localKeyAndSalt)
        #expect(own.cryptoLine == "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:" + Data(own.keys.localKeyAndSalt).base64EncodedString())
        let theirs = [UInt8](repeating: 7, count: 28)
        let gcm = try #require(try PlainSrtpParameters.parse(["cryptoSuite": "AEAD_AES_128_GCM",
                                                              "keyBase64": .string(Data(theirs).base64EncodedString())]))
        #expect(gcm.keys.remoteKeyAndSalt == theirs && gcm.keys.localKeyAndSalt.count == 28 && gcm.keys.localKeyAndSalt != theirs)
        for bad: JSONValue in ["AES_CM_128_HMAC_SHA1_80", ["cryptoSuite": "NULL"],
                               ["cryptoSuite": "AES_CM_128_HMAC_SHA1_80", "keyBase64": .string(Data(theirs).base64EncodedString())],
                               ["cryptoSuite": "AES_CM_128_HMAC_SHA1_80", "keyBase64": "not base64!"],
                               ["cryptoSuite": "AES_CM_128_HMAC_SHA1_80", "keyBase64": 5]] {
            #expect(throws: RoomError.self) { _ = try PlainSrtpParameters.parse(bad) }
        }
    }
}
