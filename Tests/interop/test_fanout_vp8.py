"""(a) A publishes Opus (a 440 Hz sine) + VP8; B and C subscribe to both and decode every one of
A's frames at 320x240 over 5 s, and hear A's sine (its frequency, within TONE_TOLERANCE_HZ).

Every frame: on a clean loopback nothing is lost (and a datagram lost to a full socket buffer
would be NACKed and resent), so each subscriber decodes all ~150 frames A sent in the window.
Measured before this bound (5 runs each of VP8 and H264): 150/150 or 151/151 frames at both
subscribers in every run. The old bound, 80%, dates from the first commit (the walking skeleton,
copied with the aiortc-only harness self-check's) and no failure ever needed it. The wait for the window's last frame
is a condition (up to SETTLE_SEC, usually a few tens of ms), so a slow machine delays the
test instead of failing it."""
from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import Optional

from media import HEIGHT, WIDTH, AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink, measure_window
from minato_client import Member, create_room, run_async, sdp_media_sections, unique_name
from conftest import ARTIFACTS

SETTLE_SEC = 5.0
TONE_TOLERANCE_HZ = 3.0


def server_cpu_seconds(pid: int) -> float:
    """user+sys CPU time of the server process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def media_metrics(http: str) -> dict[str, float]:
    """The packet counters of /metrics (received, forwarded, dropped by reason, keyframe
    requests), for failure messages that say where the packets went."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    out: dict[str, float] = {}
    with opener.open(http + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(("minato_rtp_", "minato_packets_dropped_total", "minato_keyframe_requests_total",
                                "minato_rtcp_")) and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                if float(value) != 0:
                    out[name] = float(value)
    return out


def forwarded_packets(http: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(http + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("minato_rtp_packets_forwarded_total "):
                return int(line.split()[1])
    raise AssertionError("/metrics has no minato_rtp_packets_forwarded_total")


async def fanout(server, codec: Optional[str]) -> None:
    url = server.url
    t_join = time.monotonic()
    room = await create_room(url, unique_name("fanout"))
    members: list[Member] = []
    sinks = []
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        c = await Member.join(url, room["id"], "C"); members.append(c)
        audio, video = SineAudioTrack(), SyntheticVideoTrack()
        pub_audio = await a.publish(audio)
        pub_video = await a.publish(video, codec=codec)   # a re-offer on A's send connection
        assert pub_audio.publication["contentType"] == "audio"
        assert pub_video.publication["contentType"] == "video"
        want = (codec or "video/VP8").lower()
        mimes = [c["mimeType"].lower() for c in pub_video.publication.get("codecCapabilities", [])]
        assert want in mimes, f"publication codecCapabilities {mimes}, expected {want}"
        # A's send connection: the server's answer accepted both m-lines (recvonly).
        answer = sdp_media_sections(a.send_pc.remoteDescription.sdp)
        assert [(m["mid"], m["direction"]) for m in answer] == [(pub_audio.mid, "recvonly"), (pub_video.mid, "recvonly")], answer

        video_sinks, audio_sinks = [], []
        t_subscribe = {}
        for m in (b, c):
            t_subscribe[m.label] = time.monotonic()
            sv = await m.subscribe(pub_video.id)
            sa = await m.subscribe(pub_audio.id)
            assert sv.subscription["publicationId"] == pub_video.id
            offer = {s["mid"]: s for s in sdp_media_sections(m.recv_pc.remoteDescription.sdp)}
            assert offer[sv.mid]["direction"] == "sendonly" and offer[sv.mid]["kind"] == "video", offer
            assert want.split("/")[1].lower() in [x.lower() for x in offer[sv.mid]["codecs"]], offer[sv.mid]
            assert "opus" in [x.lower() for x in offer[sa.mid]["codecs"]], offer[sa.mid]
            vs, as_ = VideoSink(sv.track, f"{m.label}-video"), AudioSink(sa.track, f"{m.label}-audio")
            video_sinks.append(vs); audio_sinks.append(as_); sinks += [vs, as_]

        for vs in video_sinks:
            if not await vs.wait_frames(3, 10):
                raise AssertionError(f"{vs.name}: no video decoded within 10 s of subscribing; A sent "
                                     f"{video.frames_sent} frames; server: {media_metrics(server.http)}")
        loud_before = {s.name: s.loud_frames for s in audio_sinks}
        pid = server.proc.pid
        cpu0, fwd0, wall0 = server_cpu_seconds(pid), forwarded_packets(server.http), time.monotonic()
        result = await measure_window(video, video_sinks, window=5.0, settle=SETTLE_SEC)
        cpu1, fwd1, wall1 = server_cpu_seconds(pid), forwarded_packets(server.http), time.monotonic()
        forwarded = fwd1 - fwd0
        assert forwarded > 0, "the server forwarded no RTP packets during the window"
        report = {
            "codec": want,
            "joinToFirstFrameSec": {vs.name: round(vs.first_frame_at - t_join, 3) for vs in video_sinks},
            "subscribeToFirstFrameSec": {vs.name: round(vs.first_frame_at - t_subscribe[vs.name.split("-")[0]], 3)
                                         for vs in video_sinks},
            "windowSec": round(wall1 - wall0, 2),
            "packetsForwarded": forwarded,
            "forwardedPps": round(forwarded / (wall1 - wall0), 1),
            "serverCpuSec": round(cpu1 - cpu0, 3),
            "serverCpuMicrosPerForwardedPacket": round((cpu1 - cpu0) * 1e6 / forwarded, 1),
            "decodedOfSent": result,
        }
        tones = {s.name: tuple(round(x, 2) for x in s.tone()) for s in audio_sinks}
        report["audioToneHzPurity"] = tones
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"fanout-{want.split('/')[1].lower()}.json").write_text(json.dumps(report, indent=2))
        print(f"fanout {want}: {json.dumps(report)}; audio loud frames "
              f"{ {s.name: s.loud_frames - loud_before[s.name] for s in audio_sinks} }; tones {tones}")
        for vs in video_sinks:
            decoded, sent = result[vs.name]
            assert sent >= 100, f"A sent only {sent} frames in 5 s (is the machine overloaded?)"
            assert decoded == sent, (f"{vs.name}: decoded {decoded}/{sent} of A's frames (on a clean loopback: all); "
                                     f"server: {media_metrics(server.http)}")
            assert set(vs.sizes) == {(WIDTH, HEIGHT)}, f"{vs.name}: frame sizes {vs.sizes}"
        for s in audio_sinks:
            got = s.loud_frames - loud_before[s.name]
            assert got >= 100, f"{s.name}: {got} non-silent audio frames in ~6.5 s (peak {s.max_amplitude})"
            tone = s.tone_problem(audio.frequency, TONE_TOLERANCE_HZ)
            assert not tone, tone
        for m in members:
            assert not m.offer_errors, m.offer_errors
    finally:
        for s in sinks:
            s.stop()
        for m in members:
            await m.close()


def test_fanout_opus_vp8(server):
    run_async(fanout(server, None), timeout=90)
