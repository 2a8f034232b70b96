"""One aiortc publisher -> SFU -> one aiortc subscriber, measured under UDP loss.

Shared by Tests/interop/test_loss_aiortc.py (Minato) and bench/loss.py (Minato and Janus).
VP8 320x240 at 30 fps with the frame index drawn into the picture (media.py), so the
subscriber knows exactly which of the sender's frames it decoded.

The publisher runs in its own process (`python loss_pair.py minato WS_URL ROOM_ID` or
`python loss_pair.py janus`), so that it keeps its 30 fps on 2 cores whatever decoding, the
other end's SRTP and NACK handling and the server cost (a slow sender would make every loss
number meaningless; `measure` reports the rate it really sent). It prints one JSON line when it is
sending ({"ready": true, "port": its UDP port, ...}), then answers "sent" on stdin with
{"sent": frames handed to the encoder so far} (the next frame gets that index), and exits
on "exit" or end of input. All its other output goes to stderr.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from aiortc import RTCSessionDescription  # noqa: E402

from impair import UdpLoss  # noqa: E402
from media import SyntheticVideoTrack, VideoSink  # noqa: E402
from minato_client import Member, new_peer_connection  # noqa: E402  (also: aioice on 127.0.0.1)
from waiting import WaitTimeout, await_until  # noqa: E402

FPS = 30
# A freeze, as in W3C webrtc-stats (totalFreezesDuration): an interval between two displayed
# frames longer than max(3 x the frame spacing, frame spacing + 150 ms). At 30 fps: > 183 ms,
# i.e. a jump of 6 or more in the sender's frame index.
FREEZE_FRAMES = next(n for n in range(1, 100) if n / FPS > max(3 / FPS, 1 / FPS + 0.150))
METRIC_PREFIXES = ("minato_rtcp_", "minato_rtp_", "minato_keyframe_", "minato_retrans", "minato_nack",
                   "minato_rtx", 'minato_packets_dropped_total{reason="retransmission"}')


def candidate_port(sdp: str) -> int:
    """The UDP port of the first host candidate in an aiortc SDP (its only socket here)."""
    m = re.search(r"^a=candidate:\S+ 1 udp \d+ 127\.0\.0\.1 (\d+) typ host", sdp, re.M)
    if m is None:
        raise AssertionError(f"no 127.0.0.1 host candidate in the SDP:\n{sdp}")
    return int(m.group(1))


def frame_stats(indices: set[int], first: int, last: int) -> dict[str, Any]:
    """Which of the sender's frames first..last were decoded, and how long the picture froze.
    gaps: distances between consecutive decoded frames (window edges count as decoded), in
    frames; a gap of 1 is normal playback. frozenSec sums the gaps that are freezes
    (>= FREEZE_FRAMES), longestFreezeSec is the largest gap, both at FPS."""
    sent = last - first + 1
    decoded, prev, gaps = 0, first - 1, []
    for i in range(first, last + 2):
        if i == last + 1 or (i & 0xFFFF) in indices:
            gaps.append(i - prev)
            prev = i
            decoded += i <= last
    frozen = sum(g for g in gaps if g >= FREEZE_FRAMES)
    return {"sent": sent, "decoded": decoded, "decodedPct": round(100 * decoded / max(1, sent), 2),
            "frozenSec": round(frozen / FPS, 2), "longestFreezeSec": round(max(gaps) / FPS, 2)}


def metrics(http: Optional[str]) -> dict[str, float]:
    """The server's loss-related /metrics counters (NACKs, retransmissions, keyframe requests,
    RTCP and RTP packets: every name starting with METRIC_PREFIXES), or {} without a server."""
    if not http:
        return {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    out: dict[str, float] = {}
    with opener.open(http + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(METRIC_PREFIXES):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
    return out


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """Counters that moved between two snapshots (short names: the minato_ prefix dropped)."""
    return {k.removeprefix("minato_"): round(v - before.get(k, 0)) for k, v in sorted(after.items())
            if v != before.get(k, 0)}


# ---- the publisher process --------------------------------------------------------------------

class PublisherProcess:
    """`python loss_pair.py ARGS` as a child process: ready info, then "sent" on request."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args, self.log_path = args, log_path
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.info: dict = {}

    async def start(self, timeout: float = 40) -> dict:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "loss_pair.py"), *self.args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=log)
        log.close()
        try:
            self.info = await asyncio.wait_for(self._line(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"publisher process not sending within {timeout} s; log {self.log_path}") from None
        if not self.info.get("ready"):
            raise AssertionError(f"publisher process failed: {self.info}; log {self.log_path}")
        return self.info

    async def _line(self) -> dict:
        line = await self.proc.stdout.readline()
        if not line:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise AssertionError(f"publisher process exited ({await self.proc.wait()}):\n{tail}")
        return json.loads(line)

    async def sent(self) -> int:
        self.proc.stdin.write(b"sent\n")
        await self.proc.stdin.drain()
        return int((await asyncio.wait_for(self._line(), 5))["sent"])

    async def close(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            self.proc.stdin.write(b"exit\n")
            await self.proc.stdin.drain()
            await asyncio.wait_for(self.proc.wait(), 10)
        except (asyncio.TimeoutError, ConnectionError):
            self.proc.kill()
            await self.proc.wait()


async def _publish_minato(url: str, room_id: str, track: SyntheticVideoTrack) -> tuple[dict, Callable]:
    m = await Member.join(url, room_id, "loss-pub")
    pub = await m.publish(track)                  # aiortc's default offer: VP8 (+ rtx) first
    return {"publicationId": pub.id, "port": candidate_port(m.send_pc.localDescription.sdp)}, m.close


async def _publish_janus(track: SyntheticVideoTrack) -> tuple[dict, Callable]:
    jan = janus_session()
    await jan.create()
    h = await jan.attach()
    room = random.randint(10_000, 999_999)
    await jan.message(h, {"request": "create", "room": room, "publishers": 10, "bitrate": 0, "fir_freq": 0,
                          "videocodec": "vp8", "notify_joining": False, "permanent": False})
    data, _ = await jan.message(h, {"request": "join", "ptype": "publisher", "room": room, "display": "loss-pub"})
    pc = new_peer_connection()
    pc.addTransceiver(track, direction="sendonly")
    await pc.setLocalDescription(await pc.createOffer())
    _, jsep = await jan.message(h, {"request": "publish", "audio": False, "video": True},
                                jsep={"type": "offer", "sdp": pc.localDescription.sdp})
    await pc.setRemoteDescription(RTCSessionDescription(sdp=jsep["sdp"], type="answer"))
    await jan.wait(lambda e: e.get("janus") == "webrtcup" and e.get("sender") == h, 15)

    async def close() -> None:
        await pc.close()
        await jan.destroy()
    return {"room": room, "feed": data["id"], "port": candidate_port(pc.localDescription.sdp)}, close


async def publisher_main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w")               # the JSON protocol; everything else -> stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()
    track = SyntheticVideoTrack()
    try:
        if argv[0] == "minato":
            info, close = await _publish_minato(argv[1], argv[2], track)
        elif argv[0] == "janus":
            info, close = await _publish_janus(track)
        else:
            raise ValueError(f"usage: loss_pair.py minato WS_URL ROOM_ID | janus (got {argv})")
        await await_until(lambda: track.frames_sent > 0, 10, "the first frame handed to the encoder")
    except Exception as e:  # noqa: BLE001 - reported to the parent
        say({"error": repr(e)})
        return 1
    say({"ready": True, **info})
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while (line := (await reader.readline()).decode().strip()) not in ("", "exit"):
        say({"sent": track.frames_sent} if line == "sent" else {"error": f"unknown command {line!r}"})
    await close()
    return 0


# ---- Janus (the baseline in bench/loss.py) -----------------------------------------------------

def simulate_link_rtt(ms: float) -> None:
    """Makes this process's receivers report a round trip of `ms` more than loopback's ~0: each
    receiver report's DLSR is shortened by `ms`, so a server computing RTT from it (RFC 3550
    6.4.1) sees `ms`. Needed for Janus 1.1.2: it keeps packets for retransmission only once it
    has measured a non-zero RTT in whole milliseconds (ice.c: `nack_queue_ms` stays 0 until
    then), which on loopback may never happen; it then answers no NACK at all."""
    from aiortc.rtcrtpreceiver import RTCRtpReceiver
    from aiortc.rtp import RtcpRrPacket
    send, offset = RTCRtpReceiver._send_rtcp, int(ms / 1000 * 65536)

    async def send_rtcp(self: RTCRtpReceiver, packet: Any) -> None:
        if isinstance(packet, RtcpRrPacket):
            for report in packet.reports:
                if report.lsr and report.dlsr > offset:
                    report.dlsr -= offset
        await send(self, packet)
    RTCRtpReceiver._send_rtcp = send_rtcp


def janus_session() -> Any:
    """A janus_probe.Janus HTTP session whose event chatter goes to stderr."""
    import janus_probe
    janus_probe.say = lambda *a: print(*a, file=sys.stderr, flush=True)
    return janus_probe.Janus([])


# ---- the subscriber and the measurement --------------------------------------------------------

class Pair:
    """A publisher process and a subscriber (in this process) through one SFU."""

    def __init__(self, pub: PublisherProcess, sink: VideoSink, sub_port: int, close: Callable) -> None:
        self.pub, self.sink, self.sub_port, self._close = pub, sink, sub_port, close

    @property
    def pub_port(self) -> int:
        return int(self.pub.info["port"])

    async def close(self) -> None:
        self.sink.stop()
        try:
            await self._close()
        finally:
            await self.pub.close()


async def minato_pair(url: str, room_id: str, log_dir: Path) -> Pair:
    pub = PublisherProcess(["minato", url, room_id], log_dir / "loss-publisher.log")
    sub: Optional[Member] = None
    try:
        await pub.start()
        sub = await Member.join(url, room_id, "loss-sub")
        s = await sub.subscribe(pub.info["publicationId"])
        sink = VideoSink(s.track, "loss-sub")
        return Pair(pub, sink, candidate_port(sub.recv_pc.localDescription.sdp), sub.close)
    except BaseException:
        if sub is not None:
            await sub.close()
        await pub.close()
        raise


async def janus_pair(log_dir: Path) -> Pair:
    pub = PublisherProcess(["janus"], log_dir / "loss-publisher-janus.log")
    jan, pc = None, None
    try:
        info = await pub.start()
        jan = janus_session()
        await jan.create()
        h = await jan.attach()
        _, jsep = await jan.message(h, {"request": "join", "ptype": "subscriber", "room": info["room"],
                                        "streams": [{"feed": info["feed"]}]})
        pc = new_peer_connection()
        tracks: list = []
        pc.on("track", tracks.append)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=jsep["sdp"], type="offer"))
        answer = await pc.createAnswer()
        # Answer as the DTLS server: Janus drops a first ClientHello (bench/JANUS-NOTES.md).
        await pc.setLocalDescription(RTCSessionDescription(
            sdp=answer.sdp.replace("a=setup:active", "a=setup:passive"), type="answer"))
        await jan.message(h, {"request": "start"}, jsep={"type": "answer", "sdp": pc.localDescription.sdp})
        await jan.wait(lambda e: e.get("janus") == "webrtcup" and e.get("sender") == h, 15)
        sink = VideoSink(next(t for t in tracks if t.kind == "video"), "loss-sub")

        async def close() -> None:
            await pc.close()
            await jan.destroy()
        return Pair(pub, sink, candidate_port(pc.localDescription.sdp), close)
    except BaseException:
        if pc is not None:
            await pc.close()
        if jan is not None:
            await jan.destroy()
        await pub.close()
        raise


async def measure(pair: Pair, loss: UdpLoss, window: float = 15.0, http: Optional[str] = None,
                  warmup: float = 3.0, settle: float = 2.0) -> dict[str, Any]:
    """Waits for video and `warmup` s more without loss (RTCP reports have gone both ways, so a
    server has its RTT), then applies `loss` for `window` s and reports which of the frames sent
    meanwhile the subscriber decoded (frame_stats), the sender's frame rate, nft's counters and
    the server's counters that moved (`http`: Minato's base URL). "nftProblem" is '' when nft
    really dropped a share of the datagrams it saw near the configured percent (impair.py
    drop_rate_problem), else what went wrong: a caller asserts it is empty."""
    if not await pair.sink.wait_frames(10, 15):
        raise AssertionError(f"no clean video before the loss window: {pair.sink.frames} frames decoded")
    await asyncio.sleep(warmup)                   # clean video before the window (see above)
    m0 = metrics(http)
    with loss:
        first = await pair.pub.sent()
        t0 = time.monotonic()
        await asyncio.sleep(window)               # the measurement window itself
        last = await pair.pub.sent() - 1
        elapsed = time.monotonic() - t0
        try:                                      # frames in flight (and their repairs) still count
            await await_until(lambda: pair.sink.reached(last & 0xFFFF), settle, f"frame {last} decoded")
        except WaitTimeout:
            pass
        nft = loss.counters()
    result = {"loss": loss.describe(), "lossPct": loss.percent, "windowSec": round(elapsed, 2),
              "senderFps": round((last - first + 1) / elapsed, 1), **frame_stats(pair.sink.indices, first, last),
              "nftSeen": nft["seen"], "nftDropped": nft["dropped"],
              "nftDroppedPct": round(100 * nft["dropped"] / max(1, nft["seen"]), 2),
              "nftProblem": loss.check(nft)}     # '' when nft dropped ~lossPct of what it saw
    if http:
        result["serverCounters"] = metrics_delta(m0, metrics(http))
    return result


def summary(label: str, r: dict[str, Any]) -> str:
    server = " ".join(f"{k}={v}" for k, v in r.get("serverCounters", {}).items())
    return (f"{label}: loss {r['loss']}: sent {r['sent']} ({r['senderFps']} fps), decoded {r['decoded']} "
            f"= {r['decodedPct']}%, longest freeze {r['longestFreezeSec']} s, frozen {r['frozenSec']} s; "
            f"nft dropped {r['nftDropped']}/{r['nftSeen']} ({r['nftDroppedPct']}%)"
            + (f"; server: {server}" if r.get("serverCounters") is not None else ""))


if __name__ == "__main__":
    sys.exit(asyncio.run(publisher_main(sys.argv[1:])))
