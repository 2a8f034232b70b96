"""Recording and plain RTP egress (issue 28): the admin API records a member's VP8 (or H.264) video and Opus audio into
one WebM (or Matroska) file through plain RTP egress and a GStreamer recorder child (gst-launch-1.0), with 2% loss on
the publisher's video. Asserted on the file with FFmpeg (ffprobe, a full decode) and PyAV: both
streams, the duration, the frames decoded (indexes drawn in the pictures) and the audio/video
offset (tone bursts against the frames made at the same moment). A SIGKILLed recorder leaves a
playable file, a `failed` recording and a room that goes on. Plain RTP ingress from FFmpeg is
watched by aiortc and by Chromium (the browser SDK)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy
import pytest

import av
import browser
from admin_util import http, metric, scrape
from browser import BROWSER_SERVER_ENV, wait_until
from impair import UdpLoss
from media import AudioSink, ScheduledToneTrack, SineAudioTrack, SyntheticVideoTrack, VideoSink, read_index
from conftest import ARTIFACTS, Server, minato_binary
from minato_client import Member, run_async
from test_browser_firefox import JOIN_MIC_THEN_CAMERA
from waiting import await_until

RECORDINGS = Path(tempfile.mkdtemp(prefix="minato-rec-"))
MINATO_SERVER_ENV = {**BROWSER_SERVER_ENV, "MINATO_RECORDING_DIRECTORY": str(RECORDINGS), "MINATO_RECORDING_MIN_FREE_BYTES": "0"}

pytestmark = pytest.mark.skipif(shutil.which("gst-launch-1.0") is None or shutil.which("ffprobe") is None,
                                reason="gst-launch-1.0 and ffprobe are installed by the test command")


@pytest.fixture(scope="module", autouse=True)
def _remove_recordings():
    yield
    shutil.rmtree(RECORDINGS, ignore_errors=True)


class TimedVideoTrack(SyntheticVideoTrack):
    """SyntheticVideoTrack that remembers when (monotonic) each frame index was made."""

    def __init__(self) -> None:
        super().__init__()
        self.made_at: dict[int, float] = {}

    async def recv(self):
        frame = await super().recv()
        self.made_at[self.frames_sent - 1] = time.monotonic()
        return frame


def api(server, method: str, path: str, body=None):
    # A recording starts once its media flows (a keyframe) and stops once its file is finished.
    r = http(method, server.http + path, body, timeout=30)
    return r.status, (r.json if r.text else {})


def new_room(server, prefix: str) -> str:
    status, body = api(server, "POST", "/v1/rooms", {"name": f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"})
    assert status == 201, body
    return body["room"]["id"]


def probe(path: str) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-show_format", "-of", "json", path],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"ffprobe failed on {path}: {out.stderr}"
    return json.loads(out.stdout)


def decode_errors(path: str) -> str:
    """What FFmpeg reports decoding every frame. Frames keep their own (variable) times
    (`-fps_mode vfr`): by default the null muxer takes H.264's declared 30 fps as its time base
    and reports two frames rounded to one tick as a muxing error, which is not the file's."""
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-fps_mode", "vfr", "-f", "null", "-"],
                         capture_output=True, text=True, timeout=60)
    return out.stderr.strip()


def decoded(path: str) -> tuple[list[tuple[float, int]], list[tuple[float, numpy.ndarray]]]:
    """(video: [(pts s, frame index)], audio: [(pts s, mono samples)]) decoded with PyAV."""
    video, audio = [], []
    with av.open(path) as f:
        for frame in f.decode(*f.streams):
            if frame.pts is None:
                continue
            t = float(frame.pts * frame.time_base)
            if isinstance(frame, av.VideoFrame):
                i = read_index(frame)
                if i is not None:
                    video.append((t, i))
            else:
                arr = frame.to_ndarray()
                mono = arr[0] if frame.format.is_planar else arr.reshape(-1, len(frame.layout.channels))[:, 0]
                audio.append((t, mono))
    return video, audio


def burst_onsets(audio: list[tuple[float, numpy.ndarray]], rate: int = 48000) -> list[float]:
    """File times where the audio goes from silence to a tone."""
    onsets, quiet = [], True
    for t, samples in audio:
        level = numpy.abs(samples.astype(numpy.float64))
        loud = numpy.nonzero(level > (0.05 if samples.dtype.kind == "f" else 1500))[0]
        if quiet and len(loud):
            onsets.append(t + loud[0] / rate)
            quiet = False
        elif not quiet and not len(loud):
            quiet = True
    return onsets


@pytest.mark.parametrize("codec,fmt,name", [("video/VP8", "webm", "vp8"), ("video/H264", "mkv", "h264")])
def test_record_video_and_opus_with_loss_plays_in_sync(server, codec: str, fmt: str, name: str):
    run_async(record_with_loss(server, codec, fmt, name), timeout=120)


async def record_with_loss(server, codec: str, fmt: str, name: str):
    room_id = new_room(server, "rec")
    clock: dict = {}
    schedule = [(2.0 + 2.0 * k, 2.5 + 2.0 * k) for k in range(5)]     # half-second tone bursts every 2 s
    video, audio = TimedVideoTrack(), ScheduledToneTrack(clock, schedule)
    pub = await Member.join(server.url, room_id, "speaker")
    try:
        vpub = await pub.publish(video, codec=codec)
        apub = await pub.publish(audio)
        await await_until(lambda: video.frames_sent > 30, 10, "the publisher sends video")
        # encodingId picks a simulcast layer: refused when nothing recorded is simulcast video.
        status, body = await asyncio.to_thread(api, server, "POST", f"/v1/rooms/{room_id}/recordings",
                                               {"memberId": pub.id, "encodingId": "h"})
        assert (status, body["error"]["name"], body["error"]["detail"]) == (
            400, "invalidParameter", '"encodingId" names a simulcast encoding, and no recorded publication is simulcast video.'), body
        sender = next(s for s in pub.send_pc.getSenders() if s.track is video)
        loss = UdpLoss(2.0, ssrc=sender._ssrc, hook="output")
        # Everything that blocks (nft, /proc, HTTP) runs off the event loop: the publisher's
        # sender reports are timed on it, and a stalled loop skews the sync they give the recorder.
        await asyncio.to_thread(loss.start)
        try:
            status, body = await asyncio.to_thread(api, server, "POST", f"/v1/rooms/{room_id}/recordings", {"memberId": pub.id})
            assert status == 201, body
            rec = body["recording"]
            assert rec["state"] == "recording" and rec["format"] == fmt, rec
            assert rec["publicationIds"] == [vpub.id, apub.id], rec
            # 2% loss on the SFU's leg into the recorder's video port too, so its NACKs to the
            # plain transport are what repair it.
            ports = await asyncio.to_thread(recorder_ports, rec["file"])
            leg = UdpLoss(2.0, dport=ports[0], hook="input", table="minato_rec_leg")
            await asyncio.to_thread(leg.start)
            nacks_before = metric(await asyncio.to_thread(scrape, server.http), "minato_rtcp_nacks_received_total") or 0
            recorder = await asyncio.to_thread(recorder_pid, rec["file"])
            try:
                clock["t0"] = time.monotonic()
                first_index = video.frames_sent
                cpu0, t0 = cpu_seconds(recorder), time.monotonic()
                await asyncio.sleep(12.0)
                cpu = (cpu_seconds(recorder) - cpu0) / (time.monotonic() - t0)
                last_index = video.frames_sent
                t_stop = time.monotonic()
                status, body = await asyncio.to_thread(api, server, "DELETE", f"/v1/rooms/{room_id}/recordings/{rec['id']}")
                stop_ms = (time.monotonic() - t_stop) * 1000
                leg_counters = await asyncio.to_thread(leg.counters)
            finally:
                await asyncio.to_thread(leg.stop)
            counters = await asyncio.to_thread(loss.counters)
            nacks = (metric(await asyncio.to_thread(scrape, server.http), "minato_rtcp_nacks_received_total") or 0) - nacks_before
        finally:
            await asyncio.to_thread(loss.stop)
        assert status == 200, body
        done = body["recording"]
        assert done["state"] == "stopped" and done["reason"] == "stopped", done
        problem = loss.check(counters) or leg.check(leg_counters)
        assert not problem, problem
        print(f"[recording] {name}: recorder leg {leg_counters}, NACKs from the recorder {nacks:.0f}, "
              f"recorder CPU {cpu:.1%} of a core at {done['sizeBytes'] * 8 / max(1, done['durationMs']):.0f} kbit/s")
        assert nacks > 0, "the recorder sent no NACK for the packets dropped on its leg"
        path = done["file"]
        try:
            check_recording(path, done, name, video, audio, first_index, last_index, counters, stop_ms)
        except AssertionError:
            keep(path)
            raise
        status, listing = api(server, "GET", f"/v1/rooms/{room_id}/recordings")
        assert status == 200 and [r["id"] for r in listing["recordings"]] == [rec["id"]], listing
    finally:
        await pub.close()


def keep(path: str) -> None:
    """A recording a test failed on goes to the artifacts (the temporary directory is removed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, ARTIFACTS / Path(path).name)
    if Path(path + ".log").exists():
        shutil.copy(path + ".log", ARTIFACTS / (Path(path).name + ".log"))


def check_recording(path: str, done: dict, name: str, video: TimedVideoTrack, audio: ScheduledToneTrack,
                    first_index: int, last_index: int, counters: dict, stop_ms: float) -> None:
    info = probe(path)
    kinds = sorted(s["codec_name"] for s in info["streams"])
    assert kinds == sorted(["opus", name]), info["streams"]
    duration = float(info["format"]["duration"])
    assert abs(duration - done["durationMs"] / 1000) < 0.5, f"the file lasts {duration} s, the recording {done['durationMs']} ms"
    errors = decode_errors(path)
    assert errors == "", errors[:2000]
    frames, samples = decoded(path)
    indexes = sorted({i for _, i in frames})
    assert indexes, "no frame index read from the recording"
    span = range(indexes[0], indexes[-1] + 1)
    share = len(indexes) / len(span)
    onsets = burst_onsets(samples)
    pts_of = {i: t for t, i in frames}
    offsets = []
    for k, made in sorted(audio.voiced_at.items()):
        near = min((i for i in pts_of if i in video.made_at), key=lambda i: abs(video.made_at[i] - made), default=None)
        if near is None:
            continue
        expected = pts_of[near] + (made - video.made_at[near])
        hit = min(onsets, key=lambda o: abs(o - expected), default=None)
        if hit is not None and abs(hit - expected) < 0.5:
            offsets.append((hit - expected) * 1000)
    print(f"[recording] {name}: {path}: {duration:.2f} s (recording {done['durationMs']} ms), {len(indexes)}/{len(span)} frames ({share:.1%}), sent "
          f"{first_index}..{last_index}, loss {counters}, stop {stop_ms:.0f} ms, size {done['sizeBytes']}, "
          f"A/V offsets ms {[round(o) for o in offsets]}")
    assert share >= 0.98, f"{len(indexes)} of {len(span)} frames decoded"
    assert indexes[0] <= first_index + 30, f"the recording starts at frame {indexes[0]}, asked at {first_index}"
    assert len(offsets) >= 3, f"tone bursts found at {onsets}, expected near frames {audio.voiced_at}"
    assert max(abs(o) for o in offsets) <= 40, f"audio/video offsets {offsets} ms"


async def recorded_speaker(server, prefix: str) -> tuple[str, Member, dict]:
    """A room with a member publishing the synthetic video and a steady 440 Hz tone, and a
    recording of it just started: (room id, member, recording). The caller closes the member."""
    room_id = new_room(server, prefix)
    video = SyntheticVideoTrack()
    pub = await Member.join(server.url, room_id, "speaker")
    try:
        await pub.publish(video)
        await pub.publish(SineAudioTrack())
        await await_until(lambda: video.frames_sent > 30, 10, "the publisher sends video")
        status, body = await asyncio.to_thread(api, server, "POST", f"/v1/rooms/{room_id}/recordings", {"memberId": pub.id})
        assert status == 201, body
        return room_id, pub, body["recording"]
    except BaseException:
        await pub.close()
        raise


def test_killed_recorder_leaves_a_playable_file_and_the_room_goes_on(server):
    run_async(killed_recorder(server), timeout=90)


async def killed_recorder(server):
    room_id, pub, rec = await recorded_speaker(server, "rec-kill")
    try:
        await asyncio.sleep(5.0)
        pid = recorder_pid(rec["file"])
        os.kill(pid, signal.SIGKILL)

        def state():
            return api(server, "GET", f"/v1/rooms/{room_id}/recordings/{rec['id']}")[1]["recording"]
        ended = await await_until(lambda: state()["state"] == "failed" and state(), 10, "the recording is failed", interval=0.5)
        assert ended["reason"] == "recorderFailed", ended
        info = probe(rec["file"])
        assert "vp8" in [s["codec_name"] for s in info["streams"]], info
        frames, _ = await asyncio.to_thread(decoded, rec["file"])
        played = (frames[-1][0] - frames[0][0]) if frames else 0.0
        print(f"[recording] killed after 5 s: {len(frames)} frames decoded, {played:.2f} s of video")
        assert played >= 3.0, f"only {played:.2f} s of a 5 s recording play after SIGKILL"
        # The SFU and the room go on: the publication is still there and a new recording starts.
        status, body = api(server, "GET", f"/v1/rooms/{room_id}/publications")
        assert status == 200 and len(body["publications"]) == 2, body
        status, body = await asyncio.to_thread(api, server, "POST", f"/v1/rooms/{room_id}/recordings", {"memberId": pub.id})
        assert status == 201, body
        await asyncio.sleep(1.0)
        await pub.leave()
        again = body["recording"]
        ended = await await_until(
            lambda: (r := api(server, "GET", "/v1/recordings")[1]["recordings"]) and
            next((x for x in r if x["id"] == again["id"] and x["state"] == "stopped"), None),
            15, "the recording stops when its member leaves", interval=0.5)
        assert ended["reason"] == "publicationEnded", ended
    finally:
        await pub.close()


def test_recording_requests_are_checked(server):
    room_id = new_room(server, "rec-bad")
    assert api(server, "POST", f"/v1/rooms/{room_id}/recordings", {})[1]["error"]["name"] == "invalidParameter"
    status, body = api(server, "POST", f"/v1/rooms/{room_id}/recordings", {"memberId": "nobody"})
    assert (status, body["error"]["name"]) == (404, "memberNotFound"), body
    status, body = api(server, "POST", f"/v1/rooms/{room_id}/recordings", {"publicationIds": ["nope"]})
    assert (status, body["error"]["name"]) == (404, "publicationNotFound"), body
    status, body = api(server, "DELETE", f"/v1/rooms/{room_id}/recordings/nope")
    assert (status, body["error"]["name"]) == (404, "recordingNotFound"), body
    status, body = api(server, "GET", "/v1/rooms/none/recordings")
    assert status == 404, body


def recorder_ports(file: str) -> list[int]:
    """The UDP ports the recorder writing `file` reads RTP from (its command line), video first."""
    cmd = [c.decode() for c in Path(f"/proc/{recorder_pid(file)}/cmdline").read_bytes().split(b"\0")]
    ports = []
    for i, c in enumerate(cmd[:-2]):
        if c == "udpsrc" and cmd[i + 2].startswith("port=") and any(x.startswith("caps=") for x in cmd[i + 3:i + 4]):
            ports.append(int(cmd[i + 2][5:]))
    assert ports, f"no RTP port in the recorder's command line {cmd}"
    return ports


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recorder_pid(file: str) -> int:
    """The gst-launch-1.0 process writing `file` (from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"gst-launch-1.0" in c for c in cmd) and any(c == f"location={file}".encode() for c in cmd):
            return int(entry.name)
    raise AssertionError(f"no recorder process writes {file}")


def test_full_disk_stops_the_recording_and_nothing_else(tmp_path):
    """A server whose recording directory is a 1200 KiB tmpfs (its own mount namespace) with
    recording.minFreeBytes 950 KiB: the recording stops with reason diskFull, its file plays, a
    new one is refused with 507 diskFull, and the room and the server go on."""
    directory = tmp_path / "rec"
    directory.mkdir()
    wrapper = tmp_path / "minato-on-tmpfs"
    wrapper.write_text('#!/bin/sh\nexec unshare -m --propagation private /bin/sh -c '
                       '\'mount -t tmpfs -o size=1200k minato-rec "$REC_TMPFS_DIR" && exec "$REC_SERVER_BIN" "$@"\' sh "$@"\n')
    wrapper.chmod(0o755)
    env = {"MINATO_RECORDING_DIRECTORY": str(directory), "MINATO_RECORDING_MIN_FREE_BYTES": str(950 * 1024),
           "REC_TMPFS_DIR": str(directory), "REC_SERVER_BIN": str(minato_binary())}
    srv = Server(wrapper, ARTIFACTS / "test_recording_diskfull.log", env=env)
    srv.start()
    try:
        run_async(fill_the_disk(srv, directory), timeout=90)
        assert srv.alive(), srv.tail()
    finally:
        srv.stop()


async def fill_the_disk(server, directory: Path):
    room_id, pub, rec = await recorded_speaker(server, "rec-full")
    try:

        def ended():
            r = api(server, "GET", f"/v1/rooms/{room_id}/recordings/{rec['id']}")[1]["recording"]
            return r if r["state"] in ("stopped", "failed") else None
        done = await await_until(ended, 60, "the recording stops on the full disk", interval=0.5,
                                 state=lambda: api(server, "GET", f"/v1/rooms/{room_id}/recordings/{rec['id']}")[1])
        assert (done["state"], done["reason"]) == ("stopped", "diskFull"), done
        size = done["sizeBytes"]
        assert 100_000 < size < 1200 * 1024, done
        # The file is on the tmpfs of the server's mount namespace: FFmpeg looks at it from there.
        inside = ["nsenter", "-t", str(server.proc.pid), "-m"]
        out = subprocess.run(inside + ["ffprobe", "-v", "error", "-show_format", "-show_streams", "-of", "json", done["file"]],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        info = json.loads(out.stdout)
        duration = float(info["format"]["duration"])
        assert sorted(s["codec_name"] for s in info["streams"]) == ["opus", "vp8"], info["streams"]
        errors = subprocess.run(inside + ["ffmpeg", "-v", "error", "-i", done["file"], "-fps_mode", "vfr", "-f", "null", "-"],
                                capture_output=True, text=True, timeout=60).stderr.strip()
        assert errors == "", errors[:2000]
        print(f"[recording] disk full after {done['durationMs']} ms: {size} bytes, {duration:.2f} s playable")
        assert abs(duration - done["durationMs"] / 1000) < 0.5, (duration, done)
        status, body = await asyncio.to_thread(api, server, "POST", f"/v1/rooms/{room_id}/recordings", {"memberId": pub.id})
        assert (status, body["error"]["name"]) == (507, "diskFull"), body
        status, body = api(server, "GET", f"/v1/rooms/{room_id}/publications")
        assert status == 200 and len(body["publications"]) == 2, body
        before = api(server, "GET", f"/v1/rooms/{room_id}/stats")[1]["packetsIn"]
        await asyncio.sleep(1.0)
        after = api(server, "GET", f"/v1/rooms/{room_id}/stats")[1]["packetsIn"]
        assert after > before + 30, f"media stopped flowing into the room ({before} -> {after})"
    finally:
        await pub.close()


def test_plain_rtp_egress_to_ffmpeg(server, tmp_path):
    """A publication sent as plain RTP to FFmpeg (Debian's 5.1, from the SDP the answer carries):
    FFmpeg decodes 90 consecutive frames of the publisher's video (indexes drawn in the
    pictures); an address outside media.plain.allowedAddresses is refused; DELETE and the end of
    the publication close it."""
    run_async(plain_egress(server, tmp_path), timeout=90)


def free_port_pair() -> int:
    """A UDP port p on 127.0.0.1 with p + 1 free too (for FFmpeg's RTP and RTCP)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
            a.bind(("127.0.0.1", 0))
            p = a.getsockname()[1]
            if p % 2 == 0 and p < 65535 and can_bind(p + 1):
                return p
    raise AssertionError("no free UDP port pair")


def can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


async def plain_egress(server, tmp_path: Path):
    room_id = new_room(server, "plain")
    video = SyntheticVideoTrack()
    pub = await Member.join(server.url, room_id, "cam")
    ffmpeg = None
    try:
        vpub = await pub.publish(video)
        await await_until(lambda: video.frames_sent > 30, 10, "the publisher sends video")
        path = f"/v1/rooms/{room_id}/plain-transports"
        status, body = api(server, "POST", path, {"publicationId": vpub.id, "address": "198.18.0.1", "rtpPort": 5004})
        assert (status, body["error"]["name"]) == (403, "addressNotAllowed"), body
        status, body = api(server, "POST", path, {"publicationId": "nope", "address": "127.0.0.1", "rtpPort": 5004})
        assert (status, body["error"]["name"]) == (404, "publicationNotFound"), body
        port = free_port_pair()
        sdp = tmp_path / "egress.sdp"
        # The answer's SDP names the ports chosen here; FFmpeg listens before the stream starts, so
        # it gets the first keyframe (the server asks the publisher for one).
        sdp_text = (f"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                    f"m=video {port} RTP/AVP 96\r\na=rtpmap:96 VP8/90000\r\na=rtcp:{port + 1}\r\na=recvonly\r\n")
        sdp.write_bytes(sdp_text.encode())
        w, h = 320, 240
        ffmpeg = await asyncio.create_subprocess_exec(
            "ffmpeg", "-nostdin", "-v", "error", "-protocol_whitelist", "file,udp,rtp", "-i", str(sdp),
            "-frames:v", "90", "-f", "rawvideo", "-pix_fmt", "yuv420p", "pipe:1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await await_until(lambda: not can_bind(port), 10, "FFmpeg listens", interval=0.1)
        status, body = await asyncio.to_thread(api, server, "POST", path,
                                               {"publicationId": vpub.id, "address": "127.0.0.1", "rtpPort": port, "payloadType": 96})
        assert status == 201, body
        egress = body["plainTransport"]
        assert egress["sdp"].split("\r\n")[4:] == sdp_text.split("\r\n")[4:], egress["sdp"]
        assert (egress["address"], egress["rtpPort"], egress["rtcpPort"]) == ("127.0.0.1", port, port + 1), egress
        assert f"m=video {port} RTP/AVP {egress['payloadType']}" in egress["sdp"] and "VP8/90000" in egress["sdp"], egress
        raw, err = await asyncio.wait_for(ffmpeg.communicate(), 30)
        size = w * h * 3 // 2
        frames = [raw[i:i + size] for i in range(0, len(raw) - size + 1, size)]
        indexes = []
        for f in frames:
            plane = numpy.frombuffer(f, dtype=numpy.uint8).reshape(h * 3 // 2, w)
            i = read_index(av.VideoFrame.from_ndarray(plane, format="yuv420p"))
            if i is not None:
                indexes.append(i)
        print(f"[plain] FFmpeg decoded {len(frames)} frames, indexes {indexes[:3]}..{indexes[-3:]}, "
              f"stderr {err.decode(errors='replace').strip()[:300]!r}")
        assert ffmpeg.returncode == 0, err.decode(errors="replace")
        assert len(frames) == 90, f"FFmpeg wrote {len(raw)} bytes"
        assert len(indexes) == 90 and indexes == list(range(indexes[0], indexes[0] + 90)), indexes
        listed = api(server, "GET", path)[1]["plainTransports"]
        assert [e["id"] for e in listed] == [egress["id"]], listed
        status, body = api(server, "DELETE", f"{path}/{egress['id']}")
        assert (status, body) == (200, {}), body
        assert api(server, "GET", path)[1]["plainTransports"] == []
        # The end of the publication closes one too.
        status, body = await asyncio.to_thread(api, server, "POST", path,
                                               {"publicationId": vpub.id, "address": "127.0.0.1", "rtpPort": port})
        assert status == 201, body
        await pub.unpublish(vpub)
        await await_until(lambda: api(server, "GET", path)[1]["plainTransports"] == [], 10, "the egress ends with its publication",
                          interval=0.5)
    finally:
        if ffmpeg is not None and ffmpeg.returncode is None:
            ffmpeg.kill()
            await ffmpeg.wait()
        await pub.close()


def test_plain_rtp_ingress_from_ffmpeg(server):
    """Debian's FFmpeg publishes VP8 and Opus into a room over plain RTP (`-f rtp`): an aiortc
    subscriber decodes the video and hears the 440 Hz tone; the sender's member is a bot; a
    sender address outside media.plain.allowedAddresses is refused; the member leaves with its
    last plain publication."""
    run_async(plain_ingress(server), timeout=90)


async def plain_ingress(server):
    room_id = new_room(server, "ingress")
    path = f"/v1/rooms/{room_id}/plain-publications"
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "video/VP8", "payloadType": 96,
                                              "ssrc": 1111, "address": "198.18.0.1"})
    assert (status, body["error"]["name"]) == (403, "addressNotAllowed"), body
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "video/XVID", "payloadType": 96, "ssrc": 1})
    assert (status, body["error"]["name"]) == (400, "invalidParameter"), body
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "video/VP8", "payloadType": 96, "ssrc": 1111})
    assert status == 201, body
    v = body["plainPublication"]
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "audio/opus", "payloadType": 111, "ssrc": 2222})
    assert status == 201, body
    a = body["plainPublication"]
    assert v["memberId"] == a["memberId"] and v["port"] != a["port"], (v, a)
    members = api(server, "GET", f"/v1/rooms/{room_id}/members")[1]["members"]
    assert [(m["name"], m["type"]) for m in members] == [("ffmpeg", "bot")], members
    viewer = await Member.join(server.url, room_id, "viewer")
    ffmpeg = None
    try:
        sv = await viewer.subscribe(v["publicationId"])
        sa = await viewer.subscribe(a["publicationId"])
        vs, as_ = VideoSink(sv.track, "viewer-video"), AudioSink(sa.track, "viewer-audio")
        ffmpeg = await asyncio.create_subprocess_exec(
            *ffmpeg_plain_sender(v, a), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        t0 = time.monotonic()
        assert await vs.wait_frames(90, 20), f"the viewer decoded {vs.frames} frames of FFmpeg's video"
        first = (vs.first_frame_at or t0) - t0
        await await_until(lambda: as_.loud_frames > 100, 10, "the viewer hears FFmpeg's tone", interval=0.2)
        await asyncio.sleep(1.0)
        problem = as_.tone_problem(440.0)
        print(f"[plain] ingress: first frame {first:.2f} s after FFmpeg started, {vs.frames} frames, "
              f"{as_.loud_frames} loud audio frames")
        assert not problem, problem
        status, body = api(server, "DELETE", f"{path}/{v['id']}")
        assert (status, body) == (200, {}), body
        assert [p["id"] for p in api(server, "GET", path)[1]["plainPublications"]] == [a["id"]]
        status, body = api(server, "DELETE", f"{path}/{a['id']}")
        assert (status, body) == (200, {}), body
        members = api(server, "GET", f"/v1/rooms/{room_id}/members")[1]["members"]
        assert [m["name"] for m in members] == ["viewer"], members
    finally:
        if ffmpeg is not None and ffmpeg.returncode is None:
            ffmpeg.kill()
            await ffmpeg.wait()
        await viewer.close()


def ffmpeg_plain_sender(v: dict, a: dict, seconds: int = 30) -> list[str]:
    """Debian's FFmpeg sending a VP8 test picture (320x240, 30 fps) and a 440 Hz Opus tone as
    plain RTP (SSRCs 1111 and 2222) to ingress publications `v` and `a`."""
    return ["ffmpeg", "-nostdin", "-v", "error", "-re", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30",
            "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", str(seconds),
            "-map", "0:v", "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "500k", "-g", "30",
            "-f", "rtp", "-payload_type", "96", "-ssrc", "1111", f"rtp://127.0.0.1:{v['port']}?rtcpport={v['port']}",
            "-map", "1:a", "-c:a", "libopus", "-ar", "48000", "-ac", "2",
            "-f", "rtp", "-payload_type", "111", "-ssrc", "2222", f"rtp://127.0.0.1:{a['port']}?rtcpport={a['port']}"]


def chromium_watches(page, publisher: str, what: str) -> dict:
    """Waits (20 s) until the harness page decoded 60 frames 320 wide of member `publisher`'s
    video and received 100 packets of its audio; their inbound stats by content type."""
    def flowing():
        st = {s["contentType"]: s for s in page.evaluate("T.stats()") if s["publisherName"] == publisher}
        v, a = st.get("video"), st.get("audio")
        return st if v and a and v["framesDecoded"] >= 60 and v["videoWidth"] == 320 and a["packetsReceived"] >= 100 else None
    return wait_until(flowing, 20, what, state=lambda: {"stats": page.evaluate("T.stats()"), "errors": page.evaluate("T.errors")})


def test_plain_rtp_ingress_to_chromium(server, chromium):
    """FFmpeg's plain RTP publications watched by Chromium through the browser SDK: it
    decodes the 320x240 video and receives the Opus audio."""
    name = f"ingress-chrome-{os.getpid()}-{time.monotonic_ns()}"
    status, body = api(server, "POST", "/v1/rooms", {"name": name})
    assert status == 201, body
    room_id = body["room"]["id"]
    path = f"/v1/rooms/{room_id}/plain-publications"
    pubs = []
    for mime, pt, ssrc in (("video/VP8", 96, 1111), ("audio/opus", 111, 2222)):
        status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": mime, "payloadType": pt, "ssrc": ssrc})
        assert status == 201, body
        pubs.append(body["plainPublication"])
    err = open(ARTIFACTS / "test_plain_rtp_ingress_to_chromium-ffmpeg.log", "w")
    ffmpeg = subprocess.Popen(ffmpeg_plain_sender(*pubs), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    page, log = browser.sdk_page(chromium, server, "chromium")
    try:
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", name)
        t0 = time.monotonic()
        page.evaluate("() => T.join('viewer', {}, null)")
        st = chromium_watches(page, "ffmpeg", "Chromium to decode FFmpeg's video and receive its audio")
        print(f"[plain] ingress to Chromium: 60 frames of {st['video']['videoWidth']}x{st['video']['videoHeight']} "
              f"decoded {time.monotonic() - t0:.2f} s after join, {st['audio']['packetsReceived']} audio packets")
        assert page.evaluate("T.errors") == []
    finally:
        ffmpeg.kill()
        ffmpeg.wait()
        err.close()
        browser.close_page(page, log, "test_plain_rtp_ingress_to_chromium")


def test_plain_rtp_with_srtp(server, tmp_path):
    """Plain RTP with SDES-style SRTP keys (AES_CM_128_HMAC_SHA1_80), both ways with Debian's
    FFmpeg: FFmpeg publishes with its key (`-srtp_out_params`), an aiortc viewer decodes it; a
    sender with another key gets nothing in (counted `srtp_unprotect_failed`); an egress with
    SRTP carries `RTP/SAVP` and the server's key in its SDP (`a=crypto`), from which FFmpeg
    decodes 30 frames; a malformed srtp object is refused."""
    run_async(plain_srtp(server, tmp_path), timeout=90)


async def plain_srtp(server, tmp_path: Path):
    import base64
    suite = "AES_CM_128_HMAC_SHA1_80"
    room_id = new_room(server, "srtp")
    path = f"/v1/rooms/{room_id}/plain-publications"
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "video/VP8", "payloadType": 96, "ssrc": 1111,
                                              "srtp": {"cryptoSuite": "NULL_CIPHER"}})
    assert (status, body["error"]["name"]) == (400, "invalidParameter"), body
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "video/VP8", "payloadType": 96, "ssrc": 1111,
                                              "srtp": {"cryptoSuite": suite, "keyBase64": "c2hvcnQ="}})
    assert (status, body["error"]["name"]) == (400, "invalidParameter"), body
    key, wrong = base64.b64encode(os.urandom(30)).decode(), base64.b64encode(os.urandom(30)).decode()
    status, body = api(server, "POST", path, {"memberName": "ffmpeg", "mimeType": "video/VP8", "payloadType": 96, "ssrc": 1111,
                                              "srtp": {"cryptoSuite": suite, "keyBase64": key}})
    assert status == 201, body
    good = body["plainPublication"]
    assert good["srtp"]["cryptoSuite"] == suite and len(base64.b64decode(good["srtp"]["keyBase64"])) == 30, good
    status, body = api(server, "POST", path, {"memberName": "intruder", "mimeType": "video/VP8", "payloadType": 96, "ssrc": 3333,
                                              "srtp": {"cryptoSuite": suite, "keyBase64": key}})
    assert status == 201, body
    bad = body["plainPublication"]

    def sender(port: int, ssrc: int, k: str) -> list[str]:
        return ["ffmpeg", "-nostdin", "-v", "error", "-re", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-t", "30",
                "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "500k", "-g", "30",
                "-f", "rtp", "-payload_type", "96", "-ssrc", str(ssrc), "-srtp_out_suite", suite, "-srtp_out_params", k,
                f"srtp://127.0.0.1:{port}?rtcpport={port}"]
    drops0 = metric(await asyncio.to_thread(scrape, server.http), "minato_packets_dropped_total", reason="srtp_unprotect_failed") or 0
    viewer = await Member.join(server.url, room_id, "viewer")
    procs = []
    try:
        sv = await viewer.subscribe(good["publicationId"])
        vs = VideoSink(sv.track, "srtp-video")
        for port, ssrc, k in ((good["port"], 1111, key), (bad["port"], 3333, wrong)):
            procs.append(await asyncio.create_subprocess_exec(*sender(port, ssrc, k), stdout=asyncio.subprocess.DEVNULL,
                                                              stderr=asyncio.subprocess.PIPE))
        assert await vs.wait_frames(60, 20), f"the viewer decoded {vs.frames} frames of FFmpeg's SRTP video"
        drops = metric(await asyncio.to_thread(scrape, server.http), "minato_packets_dropped_total", reason="srtp_unprotect_failed") or 0
        stats = (await asyncio.to_thread(api, server, "GET", f"/v1/rooms/{room_id}/stats"))[1]
        received = {p["publicationId"]: p["packetsReceived"] for p in stats.get("publicationStats", [])}
        print(f"[plain] SRTP ingress: {vs.frames} frames of {dict(vs.sizes)} decoded; the wrong key's sender: "
              f"{drops - drops0:.0f} datagrams refused, {received.get(bad['publicationId'])} packets taken")
        assert set(vs.sizes) == {(320, 240)}, vs.sizes
        assert drops - drops0 >= 30 and received.get(bad["publicationId"]) == 0, (drops - drops0, received)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        await viewer.close()

    # Egress: an aiortc publisher's video to FFmpeg, protected with the server's key.
    room2 = new_room(server, "srtp-out")
    video = SyntheticVideoTrack()
    pub = await Member.join(server.url, room2, "cam")
    ffmpeg = None
    try:
        vpub = await pub.publish(video)
        await await_until(lambda: video.frames_sent > 30, 10, "the publisher sends video")
        out = f"/v1/rooms/{room2}/plain-transports"
        port = free_port_pair()
        status, body = await asyncio.to_thread(api, server, "POST", out, {"publicationId": vpub.id, "address": "127.0.0.1",
                                                                           "rtpPort": port, "srtp": {"cryptoSuite": suite}})
        assert status == 201, body
        egress = body["plainTransport"]
        assert f"m=video {port} RTP/SAVP " in egress["sdp"], egress["sdp"]
        assert f"a=crypto:1 {suite} inline:{egress['srtp']['keyBase64']}" in egress["sdp"], egress["sdp"]
        sdp = tmp_path / "srtp.sdp"
        sdp.write_text(egress["sdp"])
        ffmpeg = await asyncio.create_subprocess_exec(
            "ffmpeg", "-nostdin", "-v", "error", "-protocol_whitelist", "file,udp,rtp,srtp", "-i", str(sdp),
            "-frames:v", "30", "-f", "rawvideo", "-pix_fmt", "yuv420p", "pipe:1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await await_until(lambda: not can_bind(port), 10, "FFmpeg listens", interval=0.1)
        # FFmpeg came after the first keyframe: a second (clear) egress asks the publisher for another.
        await asyncio.sleep(0.6)
        status, body = await asyncio.to_thread(api, server, "POST", out, {"publicationId": vpub.id, "address": "127.0.0.1",
                                                                           "rtpPort": free_port_pair()})
        assert status == 201, body
        raw, err = await asyncio.wait_for(ffmpeg.communicate(), 30)
        frames = len(raw) // (320 * 240 * 3 // 2)
        print(f"[plain] SRTP egress: FFmpeg decoded {frames} frames, stderr {err.decode(errors='replace').strip()[:300]!r}")
        assert ffmpeg.returncode == 0 and frames == 30, err.decode(errors="replace")
    finally:
        if ffmpeg is not None and ffmpeg.returncode is None:
            ffmpeg.kill()
            await ffmpeg.wait()
        await pub.close()


def test_playback_of_a_recording(server):
    """A recording played into another room: a bot member publishes it in real time, an aiortc
    viewer decodes the recorded frames (indexes drawn in the pictures) in order and hears the
    tone, and the member leaves when the file ends."""
    run_async(playback(server), timeout=120)


async def playback(server):
    room_id, pub, started = await recorded_speaker(server, "rec-src")
    try:
        await asyncio.sleep(6.0)
        status, body = await asyncio.to_thread(api, server, "DELETE", f"/v1/rooms/{room_id}/recordings/{started['id']}")
        assert status == 200 and body["recording"]["state"] == "stopped", body
        rec = body["recording"]
    finally:
        await pub.close()
    recorded = sorted({i for _, i in (await asyncio.to_thread(decoded, rec["file"]))[0]})
    room2 = new_room(server, "rec-play")
    viewer = await Member.join(server.url, room2, "viewer")
    try:
        status, body = await asyncio.to_thread(api, server, "POST", f"/v1/rooms/{room2}/playbacks",
                                               {"recordingId": rec["id"], "memberName": "replay", "startDelayMs": 2000})
        assert status == 201, body
        pb = body["playback"]
        assert pb["state"] == "playing" and len(pb["publicationIds"]) == 2, pb
        sv = await viewer.subscribe(pb["publicationIds"][0])
        sa = await viewer.subscribe(pb["publicationIds"][1])
        as_ = AudioSink(sa.track, "replay-audio")
        seen: list[int] = []

        async def collect() -> None:
            while True:
                frame = await sv.track.recv()
                i = read_index(frame)
                if i is not None:
                    seen.append(i)
        collector = asyncio.ensure_future(collect())

        def state():
            return api(server, "GET", f"/v1/rooms/{room2}/playbacks")[1]["playbacks"][0]
        ended = await await_until(lambda: (s := state())["state"] != "playing" and s, 30, "the playback ends with its file",
                                  interval=0.5)
        collector.cancel()
        assert (ended["state"], ended["reason"]) == ("ended", "fileEnded"), ended
        problem = as_.tone_problem(440.0)
        members = api(server, "GET", f"/v1/rooms/{room2}/members")[1]["members"]
        got = sorted(set(seen))
        share = len(got) / max(1, len(recorded))
        print(f"[playback] {len(recorded)} frames recorded, {len(got)} decoded by the viewer ({share:.1%}), in order: "
              f"{seen == sorted(seen)}; audio {as_.loud_frames} loud frames")
        assert [m["name"] for m in members] == ["viewer"], members
        assert share >= 0.95, f"the viewer decoded {len(got)} of the {len(recorded)} recorded frames"
        assert seen == sorted(seen), "frames out of order"
        assert not problem, problem
    finally:
        await viewer.close()


# Files FFmpeg makes for playback: 320x240 test picture at 30 fps (a keyframe a second) and a
# 440 Hz tone, 4 s.
FILE_ENCODERS = {
    "h264.mkv": ["-c:v", "libx264", "-profile:v", "baseline", "-pix_fmt", "yuv420p", "-g", "30", "-c:a", "libopus"],
    "vp8.webm": ["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-g", "30", "-b:v", "400k", "-c:a", "libopus"],
}


@pytest.mark.parametrize("name", sorted(FILE_ENCODERS))
def test_playback_of_a_file(server, name: str):
    """A WebM/Matroska file made by FFmpeg (H.264 or VP8, with Opus), put in recording.directory
    and played by name: its codecs are read from the file (gst-discoverer-1.0), an aiortc
    viewer decodes 320x240 video and hears the tone, the member leaves when the file ends.
    Files outside the directory, missing ones and ones that are not media are refused."""
    path = RECORDINGS / f"play-{name}"
    out = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30",
                          "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "4",
                          *FILE_ENCODERS[name], str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    run_async(play_file(server, path.name), timeout=90)


async def play_file(server, file: str):
    room_id = new_room(server, "play-file")
    path = f"/v1/rooms/{room_id}/playbacks"
    (RECORDINGS / "notes.txt").write_text("not a video\n")
    for body, expected in (({"file": "../../etc/hostname"}, (403, "fileNotAllowed")), ({"file": "/etc/hostname"}, (403, "fileNotAllowed")),
                           ({"file": "missing.mkv"}, (404, "fileNotFound")), ({"file": "notes.txt"}, (422, "notPlayable")),
                           ({"file": file, "recordingId": "x"}, (400, "invalidParameter"))):
        status, answer = await asyncio.to_thread(api, server, "POST", path, body)
        assert (status, answer.get("error", {}).get("name")) == expected, (body, answer)
    viewer = await Member.join(server.url, room_id, "viewer")
    try:
        status, body = await asyncio.to_thread(api, server, "POST", path, {"file": file, "memberName": "film", "startDelayMs": 2000})
        assert status == 201, body
        pb = body["playback"]
        assert pb["state"] == "playing" and len(pb["publicationIds"]) == 2 and pb["file"].endswith("/" + file), pb
        assert "recordingId" not in pb, pb
        sv = await viewer.subscribe(pb["publicationIds"][0])
        sa = await viewer.subscribe(pb["publicationIds"][1])
        vs, as_ = VideoSink(sv.track, "film-video"), AudioSink(sa.track, "film-audio")

        def state():
            return api(server, "GET", path)[1]["playbacks"][0]
        ended = await await_until(lambda: (s := state())["state"] != "playing" and s, 30, "the playback ends with its file",
                                  interval=0.5)
        vs.stop()
        as_.stop()
        problem = as_.tone_problem(440.0)
        members = api(server, "GET", f"/v1/rooms/{room_id}/members")[1]["members"]
        print(f"[playback] {file}: {vs.frames} frames of {dict(vs.sizes)} decoded, {as_.loud_frames} loud audio frames; "
              f"ended {ended['reason']}")
        assert (ended["state"], ended["reason"]) == ("ended", "fileEnded"), ended
        assert [m["name"] for m in members] == ["viewer"], members
        assert vs.frames >= 90 and set(vs.sizes) == {(320, 240)}, (vs.frames, vs.sizes)
        assert not problem, problem
    finally:
        await viewer.close()


def test_playback_of_a_vp9_file_to_chromium(server, chromium):
    """A VP9 + Opus WebM file (FFmpeg's) played into a room: Chromium, through the browser SDK,
    decodes its VP9 at 320x240 and receives its audio (aiortc has no VP9)."""
    path = RECORDINGS / "play-vp9.webm"
    out = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30",
                          "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "6",
                          "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "30", "-b:v", "400k",
                          "-c:a", "libopus", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    name = f"play-vp9-{os.getpid()}-{time.monotonic_ns()}"
    status, body = api(server, "POST", "/v1/rooms", {"name": name})
    assert status == 201, body
    room_id = body["room"]["id"]
    page, log = browser.sdk_page(chromium, server, "chromium")
    try:
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", name)
        page.evaluate("() => T.join('viewer', {}, null)")
        status, body = api(server, "POST", f"/v1/rooms/{room_id}/playbacks", {"file": path.name, "memberName": "film"})
        assert status == 201, body
        st = chromium_watches(page, "film", "Chromium to decode the file's VP9 and receive its audio")
        print(f"[playback] play-vp9.webm to Chromium: {st['video']['framesDecoded']} frames of {st['video']['codec']} "
              f"{st['video']['videoWidth']}x{st['video']['videoHeight']}, {st['audio']['packetsReceived']} audio packets")
        assert st["video"]["codec"].lower() == "video/vp9", st
        assert page.evaluate("T.errors") == []
    finally:
        browser.close_page(page, log, "test_playback_of_a_vp9_file_to_chromium")


# Samples the page's video sender every 100 ms (performance.now(), framesEncoded, framesSent,
# keyFramesEncoded, pliCount, nackCount, qualityLimitationReason) into T.encoderSamples, so a
# gap in a recording can be told apart from a pause of Chromium's encoder.
SAMPLE_ENCODER = """() => {
    T.encoderSamples = [];
    T.encoderSampler = setInterval(async () => {
      const o = { t: performance.now() / 1000 };
      (await T.pubs.video._local.transceiver.sender.getStats()).forEach((s) => {
        if (s.type !== 'outbound-rtp') return;
        for (const k of ['framesEncoded', 'framesSent', 'keyFramesEncoded', 'pliCount', 'nackCount'])
          o[k] = (o[k] || 0) + (s[k] || 0);
        o.limit = s.qualityLimitationReason;
      });
      T.encoderSamples.push(o);
    }, 100);
}"""


def encoder_summary(samples: list[dict]) -> dict:
    """The longest time Chromium's framesEncoded (and framesSent) stood still, and the counters'
    growth over the samples."""
    def longest_still(key: str) -> float:
        longest, since = 0.0, None
        for a, b in zip(samples, samples[1:]):
            if b.get(key, 0) == a.get(key, 0):
                since = a["t"] if since is None else since
                longest = max(longest, b["t"] - since)
            else:
                since = None
        return longest
    if len(samples) < 2:
        return {"encodedStill": 0.0, "samples": len(samples)}
    first, last = samples[0], samples[-1]
    return {"encodedStill": round(longest_still("framesEncoded"), 2), "sentStill": round(longest_still("framesSent"), 2),
            **{k: last.get(k, 0) - first.get(k, 0) for k in ("framesEncoded", "framesSent", "keyFramesEncoded", "pliCount", "nackCount")},
            "limits": sorted({s.get("limit") for s in samples if s.get("limit")})}


@pytest.mark.parametrize("mime,codec,fmt", [("video/H264", "h264", "mkv"), ("video/VP8", "vp8", "webm")])
def test_record_chromium_with_loss(server, chromium, mime: str, codec: str, fmt: str):
    """Chromium (the browser SDK, fake camera and microphone) publishes H.264 (or VP8) and Opus; 10 s of it
    are recorded with 2% of every UDP datagram into the SFU and the recorder dropped (nftables,
    input): a Matroska file FFmpeg reads without an error, as long as the recording, whose video
    never stops for more than 0.5 s longer than Chromium's encoder did (sampled from its stats)."""
    page, log = browser.sdk_page(chromium, server, "chromium")
    page.evaluate("T.connect()")
    room_id = page.evaluate("(n) => T.findOrCreate(n)", f"rec-chrome-{os.getpid()}-{time.monotonic_ns()}")
    # 640x480: Chromium starts lower and raises the resolution as its estimate grows, which the
    # file must take (Matroska refused a caps change of H.264 parameter sets).
    member_id = page.evaluate(JOIN_MIC_THEN_CAMERA, ["chrome", {"width": 640, "height": 480, "frameRate": 30}, mime])

    def video_flows() -> bool:
        stats = api(server, "GET", f"/v1/rooms/{room_id}/stats")[1]
        return any(p["packetsReceived"] > 100 for p in stats.get("publicationStats", []))
    wait_until(video_flows, 20, "Chromium's media reaches the server")

    def publication_counters() -> dict:
        stats = api(server, "GET", f"/v1/rooms/{room_id}/stats")[1]
        return {p["publicationId"]: {k: p[k] for k in ("packetsReceived", "packetsLost", "nacksSent", "packetsRecovered", "keyFrameRequests")}
                for p in stats.get("publicationStats", [])}
    page.evaluate(SAMPLE_ENCODER)
    before = publication_counters()
    with UdpLoss(2.0) as loss:
        status, body = api(server, "POST", f"/v1/rooms/{room_id}/recordings", {"memberId": member_id})
        assert status == 201, body
        rec = body["recording"]
        assert rec["format"] == fmt, rec
        time.sleep(10.0)
        status, body = api(server, "DELETE", f"/v1/rooms/{room_id}/recordings/{rec['id']}")
        counters = loss.counters()
    after = publication_counters()
    encoder = encoder_summary(page.evaluate("() => { clearInterval(T.encoderSampler); return T.encoderSamples; }"))
    # What the server saw of each publication during the recording (growth of its counters).
    server_saw = {pid: {k: v - before.get(pid, {}).get(k, 0) for k, v in c.items()} for pid, c in after.items()}
    done, path = body["recording"], body["recording"]["file"]
    try:
        assert status == 200 and done["state"] == "stopped", body
        assert not loss.check(counters), loss.check(counters)
        info = probe(path)
        assert sorted(s["codec_name"] for s in info["streams"]) == sorted([codec, "opus"]), info["streams"]
        duration = float(info["format"]["duration"])
        errors = decode_errors(path)
        times, sizes = [], set()
        with av.open(path) as f:
            for frame in f.decode(video=0):
                if frame.pts is not None:
                    times.append(float(frame.pts * frame.time_base))
                    sizes.add(f"{frame.width}x{frame.height}")
        gaps = [b - a for a, b in zip(times, times[1:])]
        worst = max(range(len(gaps)), key=lambda i: gaps[i])
        print(f"[recording] chromium {codec}: {duration:.2f} s (recording {done['durationMs']} ms), {len(times)} frames "
              f"of {sorted(sizes)}, "
              f"longest gap {max(gaps):.3f} s (after the frame at {times[worst]:.2f} s), loss {counters}; "
              f"Chromium's video sender over the recording {encoder}; the server's publication counters {server_saw}")
        assert errors == "", errors[:2000]
        assert abs(duration - done["durationMs"] / 1000) < 0.5, f"the file lasts {duration} s, the recording {done['durationMs']} ms"
        assert len(times) >= 10 * duration, f"{len(times)} frames in {duration} s"
        # Chromium's encoder may skip frames on its own (libvpx's frame dropper after a large keyframe
        # at a low estimate): a stall of its framesEncoded cannot be in the file, and is added.
        assert max(gaps) < 0.5 + encoder["encodedStill"], \
            f"the video stops for {max(gaps):.2f} s (Chromium's encoder for at most {encoder['encodedStill']} s)"
    except AssertionError:
        keep(path)
        raise
    finally:
        page.context.close()
