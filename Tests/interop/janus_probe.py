#!/usr/bin/env python3
"""Janus VideoRoom probe: one aiortc publisher and one aiortc subscriber over Janus's HTTP API.

Proves that Janus 1.1.2 (config/janus, started through scripts/janus-run.sh) works in a
loopback-only network namespace, and records the exact HTTP + SDP exchange a non-browser client
must follow (bench/JANUS-NOTES.md). Not a pytest module; run it inside a fresh namespace:

  unshare -n bash -c 'ip link set lo up; .venv-interop/bin/python Tests/interop/janus_probe.py'

Options (see --help): --minimal ssrc|mid|bare strips the publisher offer to what a
libnice/OpenSSL/libsrtp client would write, --minimal-answer does the same to the subscriber
answer, --sub-setup passive answers Janus's offer as DTLS server, --srtp sets the SRTP profiles
aiortc offers, --joinandconfigure publishes in one request, --early-subscribe skips the wait for
the publisher's webrtcup (Janus then says "No such feed"), --no-start uses a Janus already on
127.0.0.1:8088.
Everything (requests, responses, SDPs, Janus log) goes to artifacts/janus/.
Exit 0 when the subscriber decoded video and audio frames.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import random
import re
import signal
import string
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiortc.codecs  # noqa: E402
import aiortc.rtcdtlstransport as dtls  # noqa: E402
from aiortc import RTCRtpSender, RTCSessionDescription  # noqa: E402
from aiortc.rtp import RTCP_PSFB_APP, RTCP_PSFB_FIR, RTCP_PSFB_PLI, RtcpPsfbPacket  # noqa: E402

from media import AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink, measure_window  # noqa: E402
from minato_client import new_peer_connection  # noqa: E402  (also patches aioice to use 127.0.0.1)
from waiting import WaitTimeout, wait_until  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ART = REPO / "artifacts" / "janus"
BASE = "http://127.0.0.1:8088/janus"
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
T0 = time.monotonic()


def stamp() -> str:
    return f"{time.monotonic() - T0:7.3f}s"


def say(*args: Any) -> None:
    print(f"[{stamp()}]", *args, flush=True)


# --- aiortc knobs: payload types as the Swift client will use them, SRTP profiles, and a record
# --- of the DTLS role and SRTP profile each transport ended up with.

def use_payload_types(opus: int = 111, vp8: int = 96) -> None:
    for c in aiortc.codecs.CODECS["audio"]:
        if c.mimeType.lower() == "audio/opus":
            c.payloadType = opus
    vids = aiortc.codecs.CODECS["video"]
    for i, c in enumerate(vids):
        if c.mimeType.lower() == "video/vp8":
            c.payloadType = vp8
            rtx = vids[i + 1]
            rtx.payloadType = vp8 + 1
            rtx.parameters = {"apt": vp8}
    # H264 keeps 99..102; it is never offered (codec preferences below).


SRTP_BY_NAME = {
    "AEAD_AES_256_GCM": dtls.SRTP_AEAD_AES_256_GCM,
    "AEAD_AES_128_GCM": dtls.SRTP_AEAD_AES_128_GCM,
    "AES128_CM_SHA1_80": dtls.SRTP_AES128_CM_SHA1_80,
}
DTLS_RESULTS: list[tuple[str, str]] = []      # (our DTLS role, selected SRTP profile)

_orig_setup_srtp = dtls.RTCDtlsTransport._setup_srtp


def _record_setup_srtp(self: dtls.RTCDtlsTransport) -> None:
    prof = self._ssl.get_selected_srtp_profile()
    DTLS_RESULTS.append((self._role, prof.decode() if isinstance(prof, bytes) else str(prof)))
    _orig_setup_srtp(self)


dtls.RTCDtlsTransport._setup_srtp = _record_setup_srtp

# Keyframe requests (PLI/FIR) and REMB that reach the publisher, with their times.
RTCP_SEEN: list[tuple[str, str]] = []
_orig_handle_rtcp = RTCRtpSender._handle_rtcp_packet


async def _record_rtcp(self: RTCRtpSender, packet: Any) -> None:
    if isinstance(packet, RtcpPsfbPacket):
        name = {RTCP_PSFB_PLI: "PLI", RTCP_PSFB_FIR: "FIR", RTCP_PSFB_APP: "REMB"}.get(packet.fmt, f"PSFB{packet.fmt}")
        if name != "REMB" or not any(n.startswith("REMB") for _, n in RTCP_SEEN):
            RTCP_SEEN.append((stamp(), f"{name} to {self.kind}"))
    await _orig_handle_rtcp(self, packet)


RTCRtpSender._handle_rtcp_packet = _record_rtcp


def minimal_offer(sdp: str, how: str) -> str:
    """Strip aiortc's offer to what a bare client writes: per m-line mid, direction, rtcp-mux,
    rtpmap/fmtp/rtcp-fb, ICE credentials, the sha-256 fingerprint, setup, candidates; no msid,
    no a=rtcp:, no msid-semantic. `how` says how Janus may map incoming SSRCs to m-lines:
    "ssrc" keeps the a=ssrc:N cname lines, "mid" keeps only the sdes:mid extmap (aiortc puts the
    mid extension in every packet), "bare" keeps neither (Janus then drops all media)."""
    keep = ["v=", "o=", "s=", "t=", "m=", "c=", "a=group:BUNDLE", "a=mid:", "a=sendonly", "a=recvonly",
            "a=sendrecv", "a=rtcp-mux", "a=rtpmap:", "a=fmtp:", "a=rtcp-fb:", "a=ice-ufrag:", "a=ice-pwd:",
            "a=fingerprint:sha-256", "a=setup:", "a=candidate:", "a=end-of-candidates"]
    lines = []
    for ln in sdp.replace("\r\n", "\n").split("\n"):
        if ln.startswith(tuple(keep)) \
                or how == "ssrc" and re.match(r"a=ssrc:\d+ cname:", ln) \
                or how == "mid" and ln.startswith("a=extmap:") and ln.endswith("urn:ietf:params:rtp-hdrext:sdes:mid"):
            lines.append(ln)
    return "\r\n".join(lines) + "\r\n"


def minimal_answer(sdp: str, keep_pts: tuple[int, ...] = (111, 96)) -> str:
    """The subscriber answer as a bare client writes it: minimal_offer(..., "bare") with only
    the Opus and VP8 payload types left on the m-lines (rtx declined), no a=ssrc."""
    out = []
    for ln in minimal_offer(sdp, "bare").split("\r\n"):
        if ln.startswith("m="):
            parts = ln.split(" ")
            ln = " ".join(parts[:3] + [pt for pt in parts[3:] if int(pt) in keep_pts])
        m = re.match(r"a=(rtpmap|fmtp|rtcp-fb):(\d+)", ln)
        if m and int(m.group(2)) not in keep_pts:
            continue
        out.append(ln)
    return "\r\n".join(out)


# --- Janus HTTP API ---------------------------------------------------------------------------

class JanusError(Exception):
    pass


def _tx() -> str:
    return "".join(random.choices(string.ascii_letters + string.digits, k=12))


class Janus:
    """One Janus session over HTTP: POSTs for requests, one long-poll GET loop for events."""

    def __init__(self, transcript: list) -> None:
        self.transcript = transcript
        self.session: Optional[int] = None
        self.events: list[dict] = []
        self._cond = asyncio.Condition()
        self._tasks: list[asyncio.Task] = []
        self.closed = False

    def _http(self, method: str, url: str, body: Optional[dict], timeout: float) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        with _opener.open(req, timeout=timeout) as r:
            return json.loads(r.read())

    async def post(self, path: str, body: dict, timeout: float = 10) -> dict:
        body = {**body, "transaction": _tx()}
        self.transcript.append({"t": stamp(), "dir": ">", "method": "POST", "path": "/janus" + path, "body": body})
        resp = await asyncio.to_thread(self._http, "POST", BASE + path, body, timeout)
        self.transcript.append({"t": stamp(), "dir": "<", "body": resp})
        if resp.get("janus") == "error":
            raise JanusError(f"POST {path} {body.get('janus')}: {resp['error']}")
        return resp

    async def create(self) -> int:
        resp = await self.post("", {"janus": "create"})
        self.session = resp["data"]["id"]
        threading.Thread(target=self._poll_thread, args=(asyncio.get_running_loop(),), daemon=True).start()
        self._tasks.append(asyncio.ensure_future(self._keepalive()))
        return self.session

    async def attach(self, plugin: str = "janus.plugin.videoroom") -> int:
        resp = await self.post(f"/{self.session}", {"janus": "attach", "plugin": plugin})
        return resp["data"]["id"]

    async def message(self, handle: int, body: dict, jsep: Optional[dict] = None,
                      timeout: float = 15) -> tuple[dict, Optional[dict]]:
        """Sends a plugin request. Synchronous requests (create, destroy, list...) answer in the
        POST ("success" + plugindata); asynchronous ones (join, publish, start...) answer "ack"
        and the result comes as an "event" with the same transaction on the long poll."""
        msg: dict[str, Any] = {"janus": "message", "body": body}
        if jsep is not None:
            msg["jsep"] = jsep
        resp = await self.post(f"/{self.session}/{handle}", msg)
        if resp["janus"] == "success":
            data = resp["plugindata"]["data"]
            if "error" in data:
                raise JanusError(f"{body['request']}: {data}")
            return data, None
        assert resp["janus"] == "ack", resp
        tx = resp["transaction"]
        ev = await self.wait(lambda e: e.get("transaction") == tx and e.get("janus") == "event", timeout)
        data = ev["plugindata"]["data"]
        if "error" in data:
            raise JanusError(f"{body['request']}: {data}")
        return data, ev.get("jsep")

    async def wait(self, pred: Callable[[dict], bool], timeout: float = 15, start: int = 0) -> dict:
        deadline = time.monotonic() + timeout
        async with self._cond:
            while True:
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching Janus event")
                try:
                    await asyncio.wait_for(self._cond.wait(), left)
                except asyncio.TimeoutError:
                    pass

    def _poll_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        # GET /janus/<session>?maxev=N: blocks up to 30 s; one event -> an object, several -> an
        # array; nothing within 30 s -> {"janus":"keepalive"}. A daemon thread, so a GET still
        # pending when the session is destroyed never delays the exit.
        url = f"{BASE}/{self.session}?maxev=10"
        while not self.closed:
            try:
                resp = self._http("GET", url, None, 40)
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
                if self.closed:
                    return
                say("long poll failed:", e)
                time.sleep(0.5)          # back-off before the next long poll (not a wait for a condition)
                continue
            if not self.closed:
                asyncio.run_coroutine_threadsafe(self._deliver(resp if isinstance(resp, list) else [resp]), loop)

    async def _deliver(self, evs: list[dict]) -> None:
        evs = [e for e in evs if e.get("janus") != "keepalive"]
        for ev in evs:
            self.transcript.append({"t": stamp(), "dir": "<", "method": "GET(long-poll)", "body": ev})
            if ev.get("janus") in ("webrtcup", "media", "hangup", "slowlink", "detached") \
                    or ev.get("janus") == "event" and "transaction" not in ev:
                say("event:", json.dumps({k: v for k, v in ev.items() if k != "jsep"})[:300])
        async with self._cond:
            self.events.extend(evs)
            self._cond.notify_all()

    async def _keepalive(self) -> None:
        while not self.closed:
            await asyncio.sleep(20)      # pacing: Janus sessions time out after 60 s without a keepalive
            if not self.closed:
                await self.post(f"/{self.session}", {"janus": "keepalive"})   # -> {"janus":"ack"}

    async def destroy(self) -> None:
        if self.session is not None:
            self.closed = True
            try:
                await self.post(f"/{self.session}", {"janus": "destroy"})
            finally:
                for t in self._tasks:
                    t.cancel()


# --- Janus process ----------------------------------------------------------------------------

def interfaces() -> list[str]:
    with open("/proc/self/net/dev") as f:
        return sorted(ln.split(":")[0].strip() for ln in f.read().splitlines()[2:] if ":" in ln)


def janus_info(timeout: float = 1) -> Optional[dict]:
    try:
        with _opener.open(BASE + "/info", timeout=timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def start_janus(log_path: Path) -> subprocess.Popen:
    log = open(log_path, "wb")
    proc = subprocess.Popen([str(REPO / "scripts" / "janus-run.sh")], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=REPO)

    def answering() -> bool:
        if proc.poll() is not None:
            sys.exit(f"janus exited with {proc.returncode} during startup; log {log_path}:\n"
                     + "\n".join(log_path.read_text(errors="replace").splitlines()[-30:]))
        return janus_info() is not None
    try:
        wait_until(answering, 60, f"janus answering on {BASE}/info", interval=0.1)
    except WaitTimeout:
        proc.kill()
        sys.exit(f"janus not answering on {BASE}/info within 60 s; log {log_path}")
    return proc


def stop_janus(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)            # Janus shuts down cleanly on SIGINT/SIGTERM
    try:
        return proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


# --- the probe ---------------------------------------------------------------------------------

def sdp_summary(sdp: str) -> str:
    pick = re.compile(r"^(m=|a=group|a=setup|a=ice-lite|a=rtcp-mux|a=candidate|a=rtpmap|a=mid|a=ssrc:\d+ cname"
                      r"|a=end-of-candidates|a=send|a=recv|a=extmap)")
    return "\n".join("    " + ln for ln in sdp.splitlines() if pick.match(ln))


def artifact_tag(args: argparse.Namespace) -> str:
    return (f"minimal-{args.minimal}" if args.minimal else "full") + ("-minans" if args.minimal_answer else "") \
        + ("-passive" if args.sub_setup == "passive" else "")


async def probe(args: argparse.Namespace, transcript: list, sdps: dict[str, str]) -> int:
    timings: dict[str, float] = {}
    failures: list[str] = []
    pcs = []

    def mark(name: str) -> None:
        timings[name] = round(time.monotonic() - t_setup, 3)
        say("--", name)

    jan = Janus(transcript)
    t_setup = time.monotonic()
    sid = await jan.create()
    pub_h = await jan.attach()
    say(f"session {sid}, publisher handle {pub_h}")
    room = random.randint(10_000, 999_999)
    data, _ = await jan.message(pub_h, {"request": "create", "room": room, "description": "probe",
                                        "publishers": 100, "bitrate": 0, "fir_freq": 0,
                                        "audiocodec": "opus", "videocodec": "vp8",
                                        "notify_joining": False, "permanent": False})
    say("room:", data)

    # Publisher: sendonly VP8 (PT 96) + Opus (PT 111), full SDP with candidates (no trickle).
    pub = new_peer_connection()
    pcs.append(pub)
    vsrc, asrc = SyntheticVideoTrack(), SineAudioTrack()
    at = pub.addTransceiver(asrc, direction="sendonly")
    vt = pub.addTransceiver(vsrc, direction="sendonly")
    at.setCodecPreferences([c for c in RTCRtpSender.getCapabilities("audio").codecs if c.name == "opus"])
    vt.setCodecPreferences([c for c in RTCRtpSender.getCapabilities("video").codecs if c.name == "VP8"])
    await pub.setLocalDescription(await pub.createOffer())   # returns after ICE gathering
    offer = pub.localDescription.sdp
    if args.minimal:
        offer = minimal_offer(offer, args.minimal)
    sdps["publisher offer (sent to Janus)"] = offer
    mark("publisher offer ready")

    if args.joinandconfigure:        # one request: join + publish, answer in the "joined" event
        data, jsep = await jan.message(pub_h, {"request": "joinandconfigure", "ptype": "publisher", "room": room,
                                               "display": "probe-pub"}, jsep={"type": "offer", "sdp": offer})
        pub_id = data["id"]
        say(f"joined (joinandconfigure) as publisher id {pub_id}")
    else:
        data, _ = await jan.message(pub_h, {"request": "join", "ptype": "publisher", "room": room,
                                            "display": "probe-pub"})
        pub_id = data["id"]
        say(f"joined as publisher id {pub_id}")
        mark("publisher joined")
        data, jsep = await jan.message(pub_h, {"request": "publish", "audio": True, "video": True}, jsep={
            "type": "offer", "sdp": offer})
    assert jsep and jsep["type"] == "answer", (data, jsep)
    mark("publisher answer received")
    say("publish ->", {k: v for k, v in data.items() if k != "streams"}, "streams:",
        [(s.get("mid"), s.get("type"), s.get("codec")) for s in data.get("streams", [])])
    sdps["Janus answer to the publisher"] = jsep["sdp"]
    await pub.setRemoteDescription(RTCSessionDescription(sdp=jsep["sdp"], type="answer"))
    if not args.early_subscribe:   # before webrtcup the feed has no streams yet: "No such feed"
        await jan.wait(lambda e: e.get("janus") == "webrtcup" and e.get("sender") == pub_h, 15)
        mark("publisher webrtcup")

    # Subscriber: a second handle on the same session.
    sub_h = await jan.attach()
    data, jsep = await jan.message(sub_h, {"request": "join", "ptype": "subscriber", "room": room,
                                           "streams": [{"feed": pub_id}]})
    assert jsep and jsep["type"] == "offer", (data, jsep)
    mark("subscriber offer received")
    say("subscriber attached:", data.get("videoroom"), [(s.get("mid"), s.get("type"), s.get("codec"))
                                                        for s in data.get("streams", [])])
    sdps["Janus offer to the subscriber"] = jsep["sdp"]
    sub = new_peer_connection()
    pcs.append(sub)
    sinks: dict[str, Any] = {}

    @sub.on("track")
    def on_track(track):  # noqa: ANN001
        sinks[track.kind] = VideoSink(track, "video") if track.kind == "video" else AudioSink(track, "audio")

    await sub.setRemoteDescription(RTCSessionDescription(sdp=jsep["sdp"], type="offer"))
    answer = await sub.createAnswer()
    if args.sub_setup == "passive":   # we become the DTLS server; Janus (client) starts the handshake
        answer = RTCSessionDescription(sdp=answer.sdp.replace("a=setup:active", "a=setup:passive"), type="answer")
    await sub.setLocalDescription(answer)
    sub_answer = sub.localDescription.sdp
    if args.minimal_answer:
        sub_answer = minimal_answer(sub_answer)
    sdps["subscriber answer (sent to Janus)"] = sub_answer
    data, _ = await jan.message(sub_h, {"request": "start"}, jsep={"type": "answer", "sdp": sub_answer})
    say("start ->", data)
    await jan.wait(lambda e: e.get("janus") == "webrtcup" and e.get("sender") == sub_h, 15)
    mark("subscriber webrtcup")
    vs = sinks.get("video")
    if vs is None or not await vs.wait_frames(1, 10):
        failures.append("no video frame decoded within 10 s of subscriber webrtcup")
    else:
        timings["first subscriber frame"] = round(vs.first_frame_at - t_setup, 3)

    # Count for the window.
    v0 = vs.frames if vs else 0
    a0 = sinks["audio"].frames if "audio" in sinks else 0
    window = await measure_window(vsrc, [vs] if vs else [], window=args.seconds, settle=0.5)
    vframes = (vs.frames - v0) if vs else 0
    aframes = (sinks["audio"].frames - a0) if "audio" in sinks else 0
    loud = sinks["audio"].loud_frames if "audio" in sinks else 0
    sizes = vs.sizes if vs else {}
    say(f"decoded in {args.seconds:g} s + 0.5 s settle: video {vframes} frames {dict(sizes)}, "
        f"audio {aframes} frames (loud {loud}); sender frames decoded/sent {window.get('video')}")
    if vframes == 0:
        failures.append("no video frames in the window")
    if aframes == 0:
        failures.append("no audio frames in the window")

    # Teardown: leave as subscriber, unpublish, detach both handles, destroy room and session.
    await jan.message(sub_h, {"request": "leave"})
    await jan.message(pub_h, {"request": "unpublish"})
    await jan.post(f"/{sid}/{sub_h}", {"janus": "detach"})
    await jan.message(pub_h, {"request": "destroy", "room": room})
    await jan.post(f"/{sid}/{pub_h}", {"janus": "detach"})
    await jan.destroy()
    for pc in pcs:
        await pc.close()

    say("timings (s from session create):", timings)
    say("DTLS (our role, SRTP profile) per transport [publisher, subscriber]:", DTLS_RESULTS)
    say("keyframe requests / first REMB seen by the publisher:", RTCP_SEEN)
    for name, sdp in sdps.items():
        print(f"--- {name} (summary) ---\n{sdp_summary(sdp)}")
    tag = artifact_tag(args)
    (ART / f"probe-{tag}-result.json").write_text(json.dumps({
        "video_frames": vframes, "audio_frames": aframes, "audio_loud": loud, "window_s": args.seconds,
        "sender_frames_decoded_sent": window.get("video"), "sizes": {f"{w}x{h}": n for (w, h), n in sizes.items()},
        "timings": timings, "dtls": DTLS_RESULTS, "rtcp_to_publisher": RTCP_SEEN, "failures": failures}, indent=1))
    for f in failures:
        say("FAIL:", f)
    say("OK" if not failures else "FAILED", f"(artifacts in {ART})")
    return 0 if not failures else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="frame counting window (default 5)")
    ap.add_argument("--minimal", choices=("ssrc", "mid", "bare"),
                    help="send Janus a stripped publisher offer, keeping a=ssrc lines, or only the mid "
                         "extmap, or neither (see minimal_offer)")
    ap.add_argument("--srtp", default="AEAD_AES_128_GCM,AES128_CM_SHA1_80",
                    help="SRTP profiles aiortc offers, in order (default AEAD_AES_128_GCM,AES128_CM_SHA1_80;"
                         " aiortc's own default adds AEAD_AES_256_GCM first)")
    ap.add_argument("--minimal-answer", action="store_true",
                    help="send Janus a stripped subscriber answer (VP8/Opus only, no a=ssrc; see minimal_answer)")
    ap.add_argument("--joinandconfigure", action="store_true",
                    help="publisher joins and publishes in one request (joinandconfigure + jsep)")
    ap.add_argument("--early-subscribe", action="store_true",
                    help="subscribe right after the publish answer, without waiting for webrtcup")
    ap.add_argument("--sub-setup", choices=("active", "passive"), default="active",
                    help="a=setup of the subscriber answer (default active: we are the DTLS client)")
    ap.add_argument("--no-start", action="store_true", help="use a Janus already on 127.0.0.1:8088")
    args = ap.parse_args()

    if interfaces() != ["lo"]:
        sys.exit(f"run inside a loopback-only namespace (found {interfaces()}): "
                 "unshare -n bash -c 'ip link set lo up; .venv-interop/bin/python Tests/interop/janus_probe.py'")
    dtls.SRTP_PROFILES[:] = [SRTP_BY_NAME[n.strip()] for n in args.srtp.split(",") if n.strip()]
    use_payload_types()
    ART.mkdir(parents=True, exist_ok=True)
    proc = None
    if not args.no_start:
        t = time.monotonic()
        proc = start_janus(ART / "janus.log")
        say(f"janus up in {time.monotonic() - t:.2f} s (pid {proc.pid})")
    transcript: list = []
    sdps: dict[str, str] = {}
    try:
        rc = asyncio.run(asyncio.wait_for(probe(args, transcript, sdps), args.seconds + 60))
    except (JanusError, TimeoutError, AssertionError) as e:
        say("FAILED:", type(e).__name__, e, f"(Janus log: {ART / 'janus.log'})")
        rc = 1
    finally:
        tag = artifact_tag(args)
        (ART / f"probe-{tag}-transcript.json").write_text(json.dumps(transcript, indent=1))
        (ART / f"probe-{tag}-sdp.txt").write_text("".join(f"===== {k} =====\n{v}\n" for k, v in sdps.items()))
        if proc is not None:
            say("janus exit code after SIGINT:", stop_janus(proc))
    return rc


if __name__ == "__main__":
    sys.exit(main())
