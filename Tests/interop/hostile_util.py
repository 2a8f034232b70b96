"""Helpers of the hostile-client suite (test_hostile.py).

- A *stream process*: an aiortc publisher streaming VP8 and an aiortc subscriber decoding it,
  both in one password room, in their own Python process, so the floods the suite makes in the
  test process never starve the decoder (what is measured is the server, not the test's GIL).
  Run as `python hostile_util.py URL ROOM_ID PASSWORD`; it prints one JSON line
  {"ready": true, ...ids and reconnect secrets...} and then answers one JSON line per command
  line on stdin (see `StreamProcess`).
- `rss_mb`: a process's resident set size from /proc.
- Raw WebSockets whose reading the test controls (`raw_connect`, `drain`), and the evidence of
  how the server closed one (`close_evidence`).
"""
from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Optional

import websockets

from minato_client import Connection, Member, RpcError

HERE = Path(__file__).resolve().parent


def say(config: Any, line: str) -> None:
    """Prints past pytest's capture (`config`: the pytest config, or None), so the PROBE lines
    of the hostile suites are in the CI log of a passing run too."""
    capman = config.pluginmanager.getplugin("capturemanager") if config else None
    if capman is not None:
        with capman.global_and_fixture_disabled():
            print("\n" + line, flush=True)
    else:
        print(line, flush=True)


# ---- /proc ---------------------------------------------------------------------------------------

def rss_mb(pid: int) -> Optional[float]:
    """VmRSS of `pid` in MiB, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


# ---- joining with the reconnect secret -------------------------------------------------------------

async def join_member(url: str, room_id: str, name: str, *, keepalive: Optional[float] = 5.0,
                      **extra: Any) -> tuple[Member, Optional[str]]:
    """Member.join with a keepalive period of the caller's choice (None: no keepalive); also
    returns the `reconnectSecret` of the join result (None if absent)."""
    m = await Member.join(url, room_id, name, keepalive=False, **extra)
    if keepalive:
        m.start_keepalive(keepalive)
    return m, m.reconnect_secret


async def pipelined(conn: Connection, calls: Iterable[tuple[str, dict]], window: int = 8,
                    timeout: float = 30) -> list[dict]:
    """Sends `calls` with at most `window` unanswered at a time (below the server's in-flight
    limit); returns the whole responses in call order."""
    sem = asyncio.Semaphore(window)

    async def one(method: str, params: dict) -> dict:
        async with sem:
            return await conn.call_raw(method, params, timeout=timeout)
    return list(await asyncio.gather(*(one(m, p) for m, p in calls)))


def error_name(resp: dict) -> Optional[str]:
    err = resp.get("error")
    if not isinstance(err, dict):
        return None
    data = err.get("data") or {}
    return data.get("name") if isinstance(data, dict) else None


def error_detail(resp: dict) -> str:
    data = (resp.get("error") or {}).get("data") or {}
    return str(data.get("detail") or "") if isinstance(data, dict) else ""


# ---- raw WebSockets ------------------------------------------------------------------------------

async def raw_connect(url: str, *, max_queue: int = 1, rcvbuf: Optional[int] = None) -> Any:
    """A websockets client connection that reads only when the test calls recv(): with
    max_queue=1 the library stops reading the TCP socket once one frame is buffered, and a small
    SO_RCVBUF keeps the kernel from buffering much either. No client pings (they would need the
    pongs to be read)."""
    ws = await websockets.connect(url, max_size=None, open_timeout=10, proxy=None, ping_interval=None,
                                  max_queue=max_queue, close_timeout=2)
    if rcvbuf is not None:
        sock = ws.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    return ws


def request(rid: Any, method: str, params: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


async def raw_call(ws: Any, rid: Any, method: str, params: dict, timeout: float = 10) -> dict:
    """Sends one request and reads until its response (notifications before it are dropped)."""
    await ws.send(request(rid, method, params))
    deadline = time.monotonic() + timeout
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic())))
        if msg.get("id") == rid:
            return msg


class Drained:
    """What a socket delivered once the test read it to the end."""

    def __init__(self) -> None:
        self.messages = 0
        self.responses = 0
        self.results = 0
        self.errors: dict[str, int] = {}
        self.error_details: dict[str, str] = {}
        self.notifications = 0
        self.closed = False
        self.close_code: Optional[int] = None      # None with `closed`: ended without a close frame
        self.close_reason: Optional[str] = None
        self.bytes = 0

    def summary(self) -> str:
        how = (f"closed {self.close_code} {self.close_reason!r}" if self.closed and self.close_code is not None
               else "ended without a close frame" if self.closed else "still open")
        return (f"{self.messages} messages ({self.results} results, errors {self.errors}, "
                f"{self.notifications} notifications, {self.bytes / 1e6:.1f} MB), {how}")


def open_up(ws: Any) -> None:
    """Undoes raw_connect's throttling before the test reads a socket to the end: a big receive
    buffer and a deeper frame queue (a 16 KB window with delayed ACKs would crawl)."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        except OSError:
            pass
    assembler = getattr(ws, "recv_messages", None)
    if assembler is not None and getattr(assembler, "high", None) is not None:
        assembler.high, assembler.low = 1024, 256


async def drain(ws: Any, quiet: float = 3.0, limit_s: float = 60.0) -> Drained:
    """Reads `ws` until the server closes it, or until nothing arrived for `quiet` seconds."""
    open_up(ws)
    d = Drained()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            text = await asyncio.wait_for(ws.recv(), quiet)
        except asyncio.TimeoutError:
            return d
        except websockets.ConnectionClosed as e:
            d.closed = True
            if e.rcvd is not None:
                d.close_code, d.close_reason = e.rcvd.code, e.rcvd.reason
            return d
        d.messages += 1
        d.bytes += len(text)
        try:
            msg = json.loads(text)
        except ValueError:
            continue
        if "id" in msg:
            d.responses += 1
            if "error" in msg:
                name = error_name(msg) or str((msg.get("error") or {}).get("code"))
                d.errors[name] = d.errors.get(name, 0) + 1
                d.error_details.setdefault(name, error_detail(msg))
            else:
                d.results += 1
        else:
            d.notifications += 1
    return d


def close_evidence(d: Drained, log_path: Path, log_offset: int = 0) -> tuple[bool, str]:
    """Did the server close this socket for a full outgoing queue? Either the client saw the
    close frame 4008 "outgoingQueueFull…", or (the frame can be lost when the socket is stuck,
    the connection then just ends) the server log names outgoingQueueFull after `log_offset`."""
    if d.closed and d.close_code is not None:
        ok = d.close_code == 4008 and (d.close_reason or "").startswith("outgoingQueueFull")
        return ok, f"client saw close {d.close_code} {d.close_reason!r}"
    try:
        with open(log_path, "rb") as f:
            f.seek(log_offset)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    if "outgoingQueueFull" in text:
        line = next(l for l in text.splitlines() if "outgoingQueueFull" in l)
        return True, f"connection ended without a close frame; server log: {line.strip()[:200]}"
    state = "ended without a close frame" if d.closed else "is still open"
    return False, f"the connection {state} and the server log does not mention outgoingQueueFull"


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ---- the stream process (test side) ------------------------------------------------------------

class StreamProcess:
    """Controls the stream process: the publisher and the subscriber of the suite's room."""

    def __init__(self, url: str, room_id: str, password: str, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), url, room_id, password],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     cwd=str(HERE))
        self._buf = b""
        line = self._readline(45)
        info = json.loads(line or "{}")
        if not info.get("ready"):
            self.stop()
            raise RuntimeError(f"stream process did not get ready: {line!r} (log {log_path})")
        self.info: dict = info

    def _readline(self, timeout: float) -> str:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"stream process: no answer within {timeout}s")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ConnectionError(f"stream process exited ({self.proc.poll()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def command(self, cmd: str, timeout: float = 15, **args: Any) -> dict:
        if self.proc.poll() is not None:
            raise ConnectionError(f"stream process exited ({self.proc.returncode})")
        self.proc.stdin.write((json.dumps({"cmd": cmd, **args}) + "\n").encode())
        self.proc.stdin.flush()
        reply = json.loads(self._readline(timeout))
        if "error" in reply:
            raise AssertionError(f"stream process: {cmd}: {reply['error']}")
        return reply

    def frames(self) -> int:
        return int(self.command("frames")["frames"])

    def events(self, since: int = 0) -> list[list]:
        """roomEvents the subscriber's socket received: [version, type, memberId, reason]."""
        return self.command("events", since=since)["events"]

    def event_count(self) -> int:
        return int(self.command("events", since=10 ** 9)["total"])

    def owner_keepalive(self) -> dict:
        """Both members' owners call keepalive on their own sockets."""
        return self.command("keepalive")

    def keepalive_probe_start(self, period: float = 0.02) -> None:
        self.command("ka_start", period=period)

    def keepalive_probe_stop(self) -> dict:
        return self.command("ka_stop", timeout=20)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def start_stream(server: Any, room_name: str, password: str, log_path: Path) -> StreamProcess:
    """Makes a password room through the admin API (open on loopback; `keepWhenEmpty`, since the
    stream process takes longer to join than a short rooms.emptyTimeoutSec) and starts the
    stream process in it; `.room_id` names the room. Fails the module with the server's log if
    the stream does not get ready."""
    import pytest  # the helper is also run as a script, without pytest's plugins
    from admin_util import http as admin_http
    made = admin_http("POST", f"{server.http}/v1/rooms", {"name": room_name, "password": password, "keepWhenEmpty": True})
    assert made.status == 201, made
    room_id = made.json["room"]["id"]
    try:
        stream = StreamProcess(server.url, room_id, password, log_path)
    except RuntimeError as e:
        pytest.fail(f"{e}\n{server.tail()}", pytrace=False)
    stream.room_id = room_id
    return stream


def sendonly_offer(videos: int = 1) -> tuple[str, str]:
    """A real aiortc offer with `videos` sendonly video m-sections (VP8 first) and the first one's
    mid. Its pc is closed at once: publishing it makes a transport that never connects."""
    from media import SyntheticVideoTrack
    from minato_client import new_peer_connection, run_async

    async def make() -> tuple[str, str]:
        pc = new_peer_connection()
        try:
            first = [pc.addTransceiver(SyntheticVideoTrack(), direction="sendonly") for _ in range(videos)][0]
            await pc.setLocalDescription(await pc.createOffer())
            return pc.localDescription.sdp, first.mid
        finally:
            await pc.close()
    return run_async(make(), timeout=30)


# ---- the stream process (process side) ---------------------------------------------------------

def _percentile(values: list[float], p: float) -> Optional[float]:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


async def _stream_main(url: str, room_id: str, password: str) -> int:
    from media import SyntheticVideoTrack, VideoSink

    def say(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    pub, pub_secret = await join_member(url, room_id, "hostile-pub", password=password)
    sub, sub_secret = await join_member(url, room_id, "hostile-sub", password=password)
    video = SyntheticVideoTrack()
    published = await pub.publish(video, codec="video/VP8")
    subscribed = await sub.subscribe(published.id)
    sink = VideoSink(subscribed.track, "sub-video")
    if not await sink.wait_frames(10, 20):
        say({"ready": False, "error": f"the subscriber decoded {sink.frames} frames in 20 s"})
        return 1
    say({"ready": True, "pubMemberId": pub.id, "pubName": "hostile-pub", "pubSecret": pub_secret,
         "subMemberId": sub.id, "subName": "hostile-sub", "subSecret": sub_secret,
         "publicationId": published.id, "subscriptionId": subscribed.subscription["id"]})

    ka: dict[str, Any] = {"task": None, "rtts": [], "errors": []}

    async def keepalive_loop(period: float) -> None:
        while True:
            t0 = time.monotonic()
            try:
                resp = await pub.conn.call_raw("keepalive", {"memberId": pub.id}, timeout=10)
                if "error" in resp:
                    ka["errors"].append(str(resp["error"])[:200])
                else:
                    ka["rtts"].append(time.monotonic() - t0)
            except Exception as e:  # noqa: BLE001 - reported by ka_stop
                ka["errors"].append(repr(e)[:200])
            await asyncio.sleep(period)

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line:
            break
        try:
            cmd = json.loads(line)
            name = cmd.get("cmd")
            if name == "exit":
                break
            if name == "frames":
                say({"frames": sink.frames, "sent": video.frames_sent, "ended": sink.ended})
            elif name == "events":
                since = int(cmd.get("since", 0))
                evs = sub.conn.events
                say({"total": len(evs), "events": [
                    [e.get("version"), e.get("type"), ((e.get("data") or {}).get("member") or {}).get("id"),
                     e.get("reason")] for e in evs[since:]]})
            elif name == "keepalive":
                out = {}
                for m in (pub, sub):
                    out[m.label] = await m.conn.call("keepalive", {"memberId": m.id}, timeout=10)
                say({"ok": out})
            elif name == "ka_start":
                ka["rtts"], ka["errors"] = [], []
                ka["task"] = asyncio.ensure_future(keepalive_loop(float(cmd.get("period", 0.02))))
                say({"ok": "ka_start"})
            elif name == "ka_stop":
                if ka["task"]:
                    ka["task"].cancel()
                    ka["task"] = None
                rtts = ka["rtts"]
                say({"n": len(rtts), "errors": ka["errors"][:5], "error_count": len(ka["errors"]),
                     "p50": _percentile(rtts, 50), "p99": _percentile(rtts, 99), "max": max(rtts) if rtts else None})
            else:
                say({"error": f"unknown command {line!r}"})
        except (RpcError, Exception) as e:  # noqa: BLE001
            say({"error": repr(e)})
    sink.stop()
    for m in (sub, pub):
        await m.close()
    return 0


if __name__ == "__main__":
    import logging
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.exit(asyncio.run(_stream_main(sys.argv[1], sys.argv[2], sys.argv[3])))
