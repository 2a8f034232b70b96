"""Third-party WHIP and WHEP peers for the interop suite: Meetecho's simple-whip-client publishing
over WHIP (RFC 9725), and a GStreamer webrtcbin player receiving over WHEP.

Both are real, independently written stacks (GStreamer 1.22 webrtcbin + libnice, Debian bookworm
packages installed by scripts/interop-setup.sh) and work against whatever serves the URLs: Minato
or any stand-in. Both run in the current network namespace, which must be the suite's
loopback-only one (scripts/interop.sh: `unshare -n sh -c 'ip link set lo up; ...'`).

WhipClient: `whip-client` (Debian `simple-whip-client` 0.0~git20230131)
-------------------------------------------------------------------------
The command it runs (`WhipClient.command`; the log's first line shows it):

    LD_LIBRARY_PATH=.build-peers/gupnp-igd-stub \
    whip-client -o -l 5 -u http://127.0.0.1:PORT/whip/ROOM [-t TOKEN] [-n] \
      -A 'audiotestsrc is-live=true wave=sine freq=440 ! audioconvert ! audioresample ! queue !
          opusenc ! rtpopuspay pt=100 ssrc=1 ! queue ! application/x-rtp,media=audio,encoding-name=OPUS,payload=100' \
      -V 'videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 !
          videoconvert ! queue ! vp8enc deadline=1 keyframe-max-dist=60 ! rtpvp8pay pt=96 ssrc=2 ! queue !
          application/x-rtp,media=video,encoding-name=VP8,payload=96'

codec="h264" uses openh264enc (constrained baseline; the offer says profile-level-id=42c00d with
sprop-parameter-sets) and rtph264pay pt=102. Traps handled:
 1. As packaged on bookworm it aborts at start ("libsoup2 symbols detected"): it links libsoup2.4
    while libnice's UPnP helper libgupnp-igd pulls libsoup3. A 4-function stub
    `libgupnp-igd-1.0.so.4` on its LD_LIBRARY_PATH fixes it (UPnP is useless on loopback; the two
    "signal 'mapped-external-port' is invalid" GLib warnings in its log come from the stub and are
    harmless). The stub is compiled with `cc` on first use from GUPNP_STUB_C into
    .build-peers/gupnp-igd-stub/ (gitignored by `.build*/`), rebuilt only when the source changes.
 2. libnice skips interfaces flagged IFF_LOOPBACK, so with only `lo` its offer has no candidate at
    all. `LoopbackVeth` adds a veth pair (`wv<pid>a`/`wv<pid>b`, no IPv6 link-local) whose only
    address is 127.0.0.1/32, so it gathers 127.0.0.1; the pair is deleted when the last
    WhipClient of this process stops (and at interpreter exit). It refuses to act in a namespace
    that holds anything but `lo` (and such veths), i.e. outside the suite's `unshare -n`.
 3. Its DTLS certificate is RSA (the server must accept ECDHE-RSA suites) and it offers only the
    SRTP profile SRTP_AES128_CM_SHA1_80 (GStreamer 1.22's dtls element): servers' concerns.
What it sends: POST with `Content-Type: application/sdp` (and `Authorization: Bearer TOKEN` with
-t), no Accept header; the offer is sendonly, video first (mid video0, port 9) then audio (mid
audio1, port 0, a=bundle-only), BUNDLE, rtcp-mux-only, setup:actpass, `a=ice-options:trickle`,
fixed SSRCs (audio 1, video 2; `a=ssrc:N msid:` and `cname`), no a=extmap, no RTX, feedback
`nack pli`, `ccm fir`, `transport-cc`. Then (trickle, the default) two PATCHes with
`Content-Type: application/trickle-ice-sdpfrag` and `If-Match: <the POST's ETag>`: the
candidates (UDP 127.0.0.1 and two TCP host candidates, active port 9 and passive), then
`a=end-of-candidates`, each fragment being ice-ufrag, ice-pwd, an odd `m=audio 9 RTP/AVP 0`
line (whatever the media) and `a=mid:video0`. DELETE carries If-Match too. `trickle=False`
passes `-n`: the same candidates and end-of-candidates in the offer, no PATCH.
Exit: SIGINT (`stop()`) makes it DELETE the session and exit 0; when the server closes DTLS it
DELETEs the session itself and exits 0 ("PeerConnection closed"); a refused POST exits 0 too. So
the exit code says little: `errors` holds its `[ERR]`/`[WARN]` lines (a refused POST, a PATCH or
DELETE answered with an error), `delete_ok` whether its DELETE got a 2xx, `disconnect_reason`
why it ended. Output: artifacts/interop/<name>.log.

`start()` returns at once; `wait_connected()` returns the seconds from start to whip-client's
"[WHIP] PeerConnection connected" (ICE and DTLS up, media flowing; ~0.6-1.0 s here) and raises
WaitTimeout (an AssertionError, with the log's tail) if it exits or times out first.
`resource_url` is the session URL it logged from Location. `stop()` returns the exit code.
`wait_exit()` is for sessions that end by themselves.

WhepPlayer: GStreamer webrtcbin (Tests/interop/whep_gst_player.py)
-------------------------------------------------------------------
GStreamer's Python bindings (python3-gi) exist only for Debian's /usr/bin/python3, so the player
is a standalone script, run as a subprocess:

    /usr/bin/python3 Tests/interop/whep_gst_player.py --url http://127.0.0.1:PORT/whep/ROOM/MEMBER \
        --seconds 5 [--token TOKEN] [--video-codecs VP8,H264] [--no-audio|--no-video] [--keep]

It offers recvonly audio (mid audio0: OPUS/48000/2 pt 111) then video (mid video1, bundle-only:
VP8 pt 96 and H264 pt 102 packetization-mode=1 profile-level-id=42e01f, with nack, nack pli,
ccm fir, transport-cc, and RTX pt 97 for VP8) with every candidate in the offer (ICE gathering
awaited, no trickle; 127.0.0.1 set on the NiceAgent explicitly, so it needs no veth), POSTs it,
applies the 201 answer, decodes for `seconds`, DELETEs the Location and prints one JSON line.
`run()` (or `await run_async()`, which runs it in a thread) returns that dict, a `WhepResult`:

    status (of the POST), location (absolute), etag, video_frames, width, height, audio_buffers,
    first_frame_s, first_audio_s (seconds from sending the POST), errors (list), delete_status,
    video_codec, audio_codec (RTP encoding names), decoders (e.g. ["opusdec", "vp8dec"]),
    audio_rate, ice_connection_state, connection_state, offer, answer (SDP), exit_code

`run()` asserts only that the script printed its JSON (else AssertionError with the log's tail);
the test asserts on the numbers. A refused POST gives status 401/404/... and an error, no media.
Its stderr goes to artifacts/interop/<name>.log (with a RESULT line), the SDPs to
<name>.offer.sdp and <name>.answer.sdp.

In a test (`server` is the suite's Minato fixture; MEMBER is the WHIP publisher's member name):

    from whip_peers import WhipClient, WhepPlayer

    def test_whip_to_whep(server):
        with WhipClient(f"{server.http}/whip/room1", codec="vp8", name="whip-vp8") as pub:
            pub.wait_connected(timeout=15)
            r = WhepPlayer(f"{server.http}/whep/room1/{MEMBER}", seconds=5, name="whep-vp8").run()
        assert r["status"] == 201 and r["delete_status"] in (200, 204) and r["errors"] == []
        assert r["video_frames"] >= 100 and (r["width"], r["height"]) == (320, 240)
        assert r["audio_buffers"] >= 150 and r["first_frame_s"] < 3
        assert pub.exit_code == 0 and pub.delete_ok and pub.errors == []
"""
from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Optional

from waiting import WaitTimeout, wait_until

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "interop"
BUILD = REPO / ".build-peers"
PLAYER_SCRIPT = Path(__file__).resolve().parent / "whep_gst_player.py"
SYSTEM_PYTHON = "/usr/bin/python3"

# ---------------------------------------------------------------------------------------------
# Trap 1: the libgupnp-igd stub
# ---------------------------------------------------------------------------------------------
GUPNP_STUB_C = r"""
/* Stub libgupnp-igd-1.0.so.4 for whip-client on Debian bookworm: the real one pulls libsoup3 into
 * a process that links libsoup2.4, and GLib aborts ("libsoup2 symbols detected"). libnice only
 * needs these four symbols; UPnP port mapping is useless on loopback. */
typedef unsigned long GType;
typedef void *gpointer;
extern GType g_object_get_type(void);
extern gpointer g_object_new(GType, const char *, ...);
GType gupnp_simple_igd_get_type(void) { return g_object_get_type(); }
gpointer gupnp_simple_igd_thread_new(void) { return g_object_new(g_object_get_type(), (const char *)0); }
void gupnp_simple_igd_add_port(gpointer s, const char *p, unsigned short e, const char *ip,
                               unsigned short l, unsigned int lease, const char *d) {}
void gupnp_simple_igd_remove_port_local(gpointer s, const char *p, const char *ip, unsigned short l) {}
"""
_stub_lock = threading.Lock()


def gupnp_stub_dir() -> Path:
    """The directory holding the compiled stub `libgupnp-igd-1.0.so.4` (built with cc on first use,
    rebuilt when GUPNP_STUB_C changes)."""
    d = BUILD / "gupnp-igd-stub"
    lib = d / "libgupnp-igd-1.0.so.4"
    stamp = d / "source.sha256"
    digest = hashlib.sha256(GUPNP_STUB_C.encode()).hexdigest()
    with _stub_lock:
        if lib.exists() and stamp.exists() and stamp.read_text().strip() == digest:
            return d
        d.mkdir(parents=True, exist_ok=True)
        src = d / "gupnp_igd_stub.c"
        src.write_text(GUPNP_STUB_C)
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise RuntimeError("no C compiler (cc) to build the libgupnp-igd stub for whip-client")
        tmp = d / f".lib.{os.getpid()}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(tmp), str(src), "-l:libgobject-2.0.so.0"],
                       check=True, capture_output=True)
        os.replace(tmp, lib)
        stamp.write_text(digest + "\n")
    return d


# ---------------------------------------------------------------------------------------------
# Trap 2: a veth carrying 127.0.0.1/32, so libnice (which skips loopback interfaces) gathers it
# ---------------------------------------------------------------------------------------------
def _netns_interfaces() -> list[str]:
    """Interfaces of this process's network namespace (/proc/self/net/dev; /sys/class/net shows the
    namespace sysfs was mounted in)."""
    with open("/proc/self/net/dev") as f:
        return sorted(line.split(":")[0].strip() for line in f.read().splitlines()[2:] if ":" in line)


def _loopback_only_netns() -> bool:
    """True in a namespace holding only `lo` (plus veths of this module). /proc/1/ns/net cannot be
    compared here (PID 1's namespace link is unreadable even as root on these machines), so the
    test is the suite's own: the host has a real interface, the test namespace does not."""
    return all(i == "lo" or re.fullmatch(r"wv\d+[ab]", i) for i in _netns_interfaces())


class LoopbackVeth:
    """A veth pair `wv<pid>a`/`wv<pid>b` in this namespace; `wv<pid>a` carries 127.0.0.1/32 only.
    Reference-counted per process: `acquire()` creates it, the last `release()` deletes it (and
    an atexit hook deletes it if a test died in between)."""

    _lock = threading.Lock()
    _users = 0
    name = f"wv{os.getpid() % 10_000_000}a"
    peer = f"wv{os.getpid() % 10_000_000}b"

    @classmethod
    def _ip(cls, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)

    @classmethod
    def acquire(cls) -> None:
        with cls._lock:
            if cls._users == 0:
                if not _loopback_only_netns():
                    raise RuntimeError("refusing to add a 127.0.0.1/32 veth outside a loopback-only network "
                                       f"namespace (found {_netns_interfaces()}): run inside scripts/interop.sh "
                                       "(unshare -n)")
                cls._ip("link", "del", cls.name, check=False)  # leftover of a crashed run with our pid
                try:
                    cls._ip("link", "add", cls.name, "type", "veth", "peer", "name", cls.peer)
                    for dev in (cls.name, cls.peer):
                        cls._ip("link", "set", dev, "addrgenmode", "none")  # no fe80:: candidate
                        cls._ip("link", "set", dev, "up")
                    cls._ip("addr", "add", "127.0.0.1/32", "dev", cls.name)
                except subprocess.CalledProcessError as e:
                    cls._ip("link", "del", cls.name, check=False)
                    raise RuntimeError(f"could not set up veth {cls.name}: {e.stderr.strip()}") from e
                atexit.register(cls._delete)
            cls._users += 1

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            if cls._users == 0:
                return
            cls._users -= 1
            if cls._users == 0:
                cls._delete()

    @classmethod
    def _delete(cls) -> None:
        cls._ip("link", "del", cls.name, check=False)  # deletes the peer too

    @classmethod
    def exists(cls) -> bool:
        return cls._ip("link", "show", cls.name, check=False).returncode == 0


# ---------------------------------------------------------------------------------------------
# WhipClient
# ---------------------------------------------------------------------------------------------
AUDIO_PIPELINE = (
    "audiotestsrc is-live=true wave=sine freq=440 ! audioconvert ! audioresample ! queue ! "
    "opusenc ! rtpopuspay pt=100 ssrc=1 ! queue ! "
    "application/x-rtp,media=audio,encoding-name=OPUS,payload=100"
)
VIDEO_PIPELINES = {
    "vp8": (
        "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 ! "
        "videoconvert ! queue ! vp8enc deadline=1 keyframe-max-dist=60 ! rtpvp8pay pt=96 ssrc=2 ! queue ! "
        "application/x-rtp,media=video,encoding-name=VP8,payload=96"
    ),
    "h264": (
        "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 ! "
        "videoconvert ! video/x-raw,format=I420 ! queue ! openh264enc gop-size=60 ! "
        "video/x-h264,profile=constrained-baseline ! h264parse ! "
        "rtph264pay config-interval=-1 aggregate-mode=zero-latency pt=102 ssrc=2 ! queue ! "
        "application/x-rtp,media=video,encoding-name=H264,payload=102"
    ),
}

# whip-client's log lines (simple-whip-client 0.0~git20230131, log level >= 4)
_CONNECTED = re.compile(r"^\[WHIP\] PeerConnection connected", re.M)
_RESOURCE = re.compile(r"Resource URL:\s*(\S+)", re.I)
_DISCONNECT = re.compile(r"^\[WHIP\] Disconnecting from server \((.*)\)\s*$", re.M)
_PROBLEM = re.compile(r"^\[(?:ERR|WARN)\].*$", re.M)
# What whip-client reports about a trickle PATCH. At shutdown it may send its last candidates
# after its DELETE, and the server, which no longer has the session, answers 404, as it must
# (seen once in test_cluster: "[WARN]  [trickle] 404 Not Found"). That says nothing about the
# DELETE, so `delete_ok` skips it.
_TRICKLE = re.compile(r"^\[(?:ERR|WARN)\]\s+\[trickle\]")


class WhipClient:
    """simple-whip-client publishing a test pattern (VP8 or H264) and a tone to `url`.

    Use as a context manager (start on enter, stop on exit), or call start()/stop().
    """

    def __init__(self, url: str, codec: str = "vp8", *, token: Optional[str] = None, trickle: bool = True,
                 name: str = "whip-client", log_dir: Path = ARTIFACTS, audio: bool = True, video: bool = True,
                 log_level: int = 5, video_pipeline: Optional[str] = None, audio_pipeline: Optional[str] = None,
                 binary: str = "whip-client", loopback_veth: bool = True) -> None:
        """`loopback_veth`: give libnice a non-loopback interface holding 127.0.0.1 (needed in the
        suite's lo-only namespace); False where the namespace has a routable interface already
        (the cluster tests' client side)."""
        if codec not in VIDEO_PIPELINES and video_pipeline is None:
            raise ValueError(f"codec {codec!r}: one of {sorted(VIDEO_PIPELINES)} (or pass video_pipeline)")
        if not (audio or video):
            raise ValueError("need audio or video")
        self.url = url
        self.codec = codec
        self.token = token
        self.trickle = trickle
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        self.audio_pipeline = (audio_pipeline or AUDIO_PIPELINE) if audio else None
        self.video_pipeline = (video_pipeline or VIDEO_PIPELINES[codec]) if video else None
        self.log_level = log_level
        self.binary = binary
        self.proc: Optional[subprocess.Popen] = None
        self.exit_code: Optional[int] = None
        self.started_at: Optional[float] = None
        self._log = None
        self._veth = False
        self._wants_veth = loopback_veth

    @property
    def command(self) -> list[str]:
        cmd = [self.binary, "-o", "-l", str(self.log_level), "-u", self.url]
        if self.token:
            cmd += ["-t", self.token]
        if not self.trickle:
            cmd.append("-n")
        if self.audio_pipeline:
            cmd += ["-A", self.audio_pipeline]
        if self.video_pipeline:
            cmd += ["-V", self.video_pipeline]
        return cmd

    def start(self) -> "WhipClient":
        if shutil.which(self.binary) is None:
            raise RuntimeError(f"{self.binary} not found: apt-get install simple-whip-client (scripts/interop-setup.sh)")
        stub = gupnp_stub_dir()
        if self._wants_veth:
            LoopbackVeth.acquire()
            self._veth = True
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(stub) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            env.pop(k, None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        shown = [c if " " not in c else repr(c) for c in self.command]
        self._log.write(f"$ LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']} {' '.join(shown)}\n".encode())
        self._log.flush()
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=REPO)
        except BaseException:
            self._cleanup()
            raise
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _tail(self, n: int = 25) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    @property
    def resource_url(self) -> Optional[str]:
        m = _RESOURCE.search(self.log_text())
        return m.group(1) if m else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def errors(self) -> list[str]:
        """whip-client's `[ERR]`/`[WARN]` lines: a refused POST (`[ERR] ... [401] Unauthorized`,
        `[4] Could not connect: Connection refused`), a failed PATCH (`[WARN] [trickle] 412
        Precondition Failed`), a failed DELETE (`[WARN] [404] Not Found`). Its exit code is 0 in all
        of these cases, so this is where failures show."""
        return [m.group(0).strip() for m in _PROBLEM.finditer(self.log_text())]

    @property
    def disconnect_reason(self) -> Optional[str]:
        """Why whip-client ended the session: "Shutting down" (SIGINT, stop()), "PeerConnection
        closed" (the server closed DTLS; it still sends DELETE), "HTTP error" (POST refused)."""
        found = _DISCONNECT.findall(self.log_text())
        return found[-1] if found else None

    @property
    def delete_ok(self) -> Optional[bool]:
        """After it disconnected: True if its DELETE got a 2xx (whip-client logs nothing then), False
        if it logged a `[WARN]`/`[ERR]` after "Disconnecting from server" other than about a
        trickle PATCH (`_TRICKLE`); None before that."""
        text = self.log_text()
        found = list(_DISCONNECT.finditer(text))
        if not found or found[-1].group(1) == "HTTP error":
            return None
        return all(_TRICKLE.match(m.group(0)) for m in _PROBLEM.finditer(text, found[-1].end()))

    def wait_exit(self, timeout: float = 15.0) -> int:
        """Waits for whip-client to exit by itself (POST refused, server closed the session); returns
        its exit code (0 even then: see `errors`). Raises WaitTimeout if it is still running."""
        assert self.proc is not None, "start() first"
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {self.name} to exit; "
                              f"log {self.log_path}:\n{self._tail()}") from None
        return self.stop()

    def wait_connected(self, timeout: float = 20.0) -> float:
        """Waits for whip-client's 'PeerConnection state changed: connected'; returns seconds since
        start. Raises WaitTimeout if it exits first or the timeout passes (message: the log's tail)."""
        assert self.proc is not None, "start() first"

        def check() -> bool:
            if _CONNECTED.search(self.log_text()):
                return True
            if self.proc.poll() is not None:
                raise WaitTimeout(f"{self.name} exited with {self.proc.returncode} before connecting "
                                  f"({self.errors or 'no error logged'}); log {self.log_path}:\n{self._tail()}")
            return False

        try:
            wait_until(check, timeout, f"{self.name} to connect")
        except WaitTimeout as e:
            if "exited" in str(e):
                raise
            raise WaitTimeout(f"{e}; log {self.log_path}:\n{self._tail()}") from None
        return time.monotonic() - (self.started_at or 0.0)

    async def wait_connected_async(self, timeout: float = 20.0) -> float:
        return await asyncio.to_thread(self.wait_connected, timeout)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT (whip-client sends DELETE, then exits 0); SIGKILL after `timeout`. Returns the exit
        code (negative: killed by that signal). Idempotent; always removes the veth."""
        try:
            if self.proc is not None and self.exit_code is None:
                if self.proc.poll() is None:
                    self.proc.send_signal(signal.SIGINT)
                    try:
                        self.proc.wait(timeout)
                    except subprocess.TimeoutExpired:
                        self.proc.kill()
                        self.proc.wait()
                self.exit_code = self.proc.returncode
        finally:
            self._cleanup()
        return self.exit_code if self.exit_code is not None else -1

    async def stop_async(self, timeout: float = 10.0) -> int:
        return await asyncio.to_thread(self.stop, timeout)

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._veth:
            self._veth = False
            LoopbackVeth.release()

    def __enter__(self) -> "WhipClient":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------
# WhepPlayer
# ---------------------------------------------------------------------------------------------
WhepResult = dict  # the JSON object whep_gst_player.py prints (keys in the module docstring)


class WhepPlayer:
    """GStreamer webrtcbin WHEP player (whep_gst_player.py under /usr/bin/python3)."""

    def __init__(self, url: str, seconds: float = 5.0, *, token: Optional[str] = None,
                 video_codecs: str = "VP8,H264", audio: bool = True, video: bool = True, keep: bool = False,
                 name: str = "whep-player", log_dir: Path = ARTIFACTS, extra_args: tuple[str, ...] = ()) -> None:
        if not (audio or video):
            raise ValueError("need audio or video")
        self.url = url
        self.seconds = seconds
        self.token = token
        self.video_codecs = video_codecs
        self.audio, self.video, self.keep = audio, video, keep
        self.name = name
        self.log_dir = Path(log_dir)
        self.log_path = self.log_dir / f"{name}.log"
        self.extra_args = tuple(extra_args)
        self.proc: Optional[subprocess.Popen] = None
        self.result: Optional[WhepResult] = None

    @property
    def command(self) -> list[str]:
        cmd = [SYSTEM_PYTHON, str(PLAYER_SCRIPT), "--url", self.url, "--seconds", f"{self.seconds:g}",
               "--video-codecs", self.video_codecs]
        if self.token:
            cmd += ["--token", self.token]
        if not self.audio:
            cmd.append("--no-audio")
        if not self.video:
            cmd.append("--no-video")
        if self.keep:
            cmd.append("--keep")
        return cmd + list(self.extra_args)

    def start(self) -> "WhepPlayer":
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            raise RuntimeError(f"{SYSTEM_PYTHON} missing (python3-gi and GStreamer live there)")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
               and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        self._stderr = open(self.log_path, "wb")
        cmd = self.command
        shown = [("***" if i > 0 and cmd[i - 1] == "--token" else c) for i, c in enumerate(cmd)]
        self._stderr.write(("$ " + " ".join(shown) + "\n").encode())
        self._stderr.flush()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL,
                                     env=env, cwd=REPO)
        return self

    def wait(self, timeout: Optional[float] = None) -> WhepResult:
        """Waits for the player to finish and returns its JSON result. Raises AssertionError (with
        the log's tail) if it produced no JSON line."""
        assert self.proc is not None, "start() first"
        if timeout is None:
            timeout = self.seconds + 45
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        finally:
            self._stderr.close()
        lines = [l for l in out.decode(errors="replace").splitlines() if l.strip().startswith("{")]
        if not lines:
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-25:])
            raise AssertionError(f"{self.name}: no JSON result (exit {self.proc.returncode}); "
                                 f"log {self.log_path}:\n{tail}")
        self.result = json.loads(lines[-1])
        self.result["exit_code"] = self.proc.returncode
        for kind in ("offer", "answer"):
            if self.result.get(kind):
                (self.log_dir / f"{self.name}.{kind}.sdp").write_text(self.result[kind])
        with open(self.log_path, "a") as f:
            summary = {k: v for k, v in self.result.items() if k not in ("offer", "answer")}
            f.write("RESULT " + json.dumps(summary) + "\n")
        return self.result

    def run(self, timeout: Optional[float] = None) -> WhepResult:
        return self.start().wait(timeout)

    async def run_async(self, timeout: Optional[float] = None) -> WhepResult:
        """run() in a thread, so an asyncio test's own peers keep running meanwhile."""
        return await asyncio.to_thread(self.run, timeout)
