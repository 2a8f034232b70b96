"""Hostile clients: while an aiortc publisher streams VP8 to an aiortc
subscriber in a password room, other sockets try every class of abuse — bad numbers in SDP,
member takeover without the reconnect secret, floods of candidates, requests, rooms and members,
a socket that never reads, oversized `encodings`, admin requests with a foreign Host or a
non-JSON body, transports that never connect, keepalive values over the caps, event paging.

For each probe the suite asserts the exact error name or close code of the contract
(docs/protocol.md), that the server process is alive, that the
subscriber kept decoding through the probe (> 0 frames and >= MIN_FPS on average), and that the
server's RSS after the probe is at most its RSS before plus the probe's stated bound. Every probe
prints one line `PROBE name rss_before_mb=… rss_after_mb=… frames_during=…` and the suite writes
them all to artifacts/interop/hostile.json.

One server for the whole module, with small limits from the environment (SERVER_ENV). The
publisher and the subscriber live in their own process (hostile_util.py) so that the floods made
here cannot starve their decoder: what the frame counts measure is the server.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import pytest
import websockets

from admin_util import assert_http_error, http
from conftest import ARTIFACTS, Server, minato_binary
from hostile_util import (
    StreamProcess, say, sendonly_offer, start_stream, close_evidence, drain, error_detail, error_name, join_member, log_size, pipelined,
    raw_call, raw_connect, request, rss_mb,
)
from media import SyntheticVideoTrack
from waiting import await_until
from minato_client import (
    Connection, assert_rpc_error, event_matcher, new_peer_connection, run_async,
)

# ---- the server and its limits ---------------------------------------------------------------------

MAX_OUTGOING_BYTES = 1 << 20            # server.maxOutgoingBytes (default 4 MiB)
MAX_ROOMS = 40                          # rooms.maxRooms (default 1000)
MAX_ROOMS_PER_CONNECTION = 5            # rooms.maxRoomsCreatedPerConnection (default 10)
MAX_MEMBERS_PER_CONNECTION = 4          # rooms.maxMembersPerConnection (default 8)
CONNECT_TIMEOUT_SEC = 5                 # media.connectTimeoutSec (default 20)
# Defaults the probes rely on (not set here):
MAX_IN_FLIGHT = 16                      # server.maxInFlightRequests
MAX_REMOTE_CANDIDATES = 64              # media.maxRemoteCandidates
MAX_PENDING_CANDIDATE_BYTES = 16384     # media.maxPendingCandidateBytes
MAX_CANDIDATE_LINE = 1024               # longest iceCandidate line accepted
MAX_ENCODINGS = 4                       # rooms.maxEncodings
MAX_EVENTS_PER_PAGE = 100               # rooms.maxEventsPerPage
MAX_KEEPALIVE_INTERVAL = 300            # rooms.maxKeepaliveIntervalSec
MAX_KEEPALIVE_GAP = 120                 # rooms.maxKeepaliveIntervalGapSec
MAX_PASSWORD_BYTES = 256

SERVER_ENV = {
    "MINATO_SERVER_MAX_OUTGOING_BYTES": str(MAX_OUTGOING_BYTES),
    "MINATO_ROOMS_MAX_ROOMS": str(MAX_ROOMS),
    "MINATO_ROOMS_MAX_ROOMS_CREATED_PER_CONNECTION": str(MAX_ROOMS_PER_CONNECTION),
    "MINATO_ROOMS_MAX_MEMBERS_PER_CONNECTION": str(MAX_MEMBERS_PER_CONNECTION),
    "MINATO_MEDIA_CONNECT_TIMEOUT_SEC": str(CONNECT_TIMEOUT_SEC),
}

# ---- what every probe must keep ---------------------------------------------------------------------

MIN_FPS = 10.0              # the subscriber's decoded frames per second over a probe (source: 30 fps)
MIN_WINDOW_SEC = 2.0        # a probe's window is at least this long (shorter ones are padded by waiting)
RSS_BOUND_MB = 32.0         # RSS after <= RSS before + this, unless a probe states its own bound
FLOOD_RSS_BOUND_MB = 100.0  # ... for the probes that push tens of MB at the server

PASSWORD = "hostile-room-password"
# HOSTILE_ARTIFACTS: another folder for the server log, the stream log and hostile.json (so two
# runs on one machine do not write into each other's files); CI uses artifacts/interop.
ART = Path(os.environ.get("HOSTILE_ARTIFACTS") or ARTIFACTS)
RESULTS = ART / "hostile.json"
RECORDS: dict[str, dict] = {}


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---- fixtures ---------------------------------------------------------------------------------------

# conftest's module-scoped `server` fixture starts the server with these variables.
MINATO_SERVER_ENV = SERVER_ENV


@dataclass
class Ctx:
    server: Server
    stream: StreamProcess
    room_id: str
    config: Any
    info: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pid(self) -> int:
        return self.server.proc.pid


@pytest.fixture(scope="module")
def ctx(server: Server, request: pytest.FixtureRequest):
    """The password room, with the publisher streaming VP8 to the subscriber for the whole module."""
    stream = start_stream(server, uid("hostile"), PASSWORD, ART / "test_hostile-stream.log")
    room_id = stream.room_id
    RECORDS.clear()
    c = Ctx(server, stream, room_id, request.config, stream.info)
    yield c
    stream.stop()


@pytest.fixture(scope="module")
def offer_sdp() -> tuple[str, str]:
    return sendonly_offer()


# ---- the per-probe bookkeeping ---------------------------------------------------------------------

def _write_results(c: Ctx) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    doc = {"server_env": SERVER_ENV, "min_fps": MIN_FPS, "rss_bound_mb": RSS_BOUND_MB,
           "flood_rss_bound_mb": FLOOD_RSS_BOUND_MB, "probes": RECORDS}
    RESULTS.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def run_probe(c: Ctx, name: str, body: Callable[[dict], Awaitable[Any]], *, rss_bound_mb: float = RSS_BOUND_MB,
              timeout: float = 60, min_window: float = MIN_WINDOW_SEC) -> Any:
    """Runs `body(record)` (a coroutine on a fresh loop; it may add fields to the record) as probe
    `name`: RSS and the subscriber's frame count before and after, one PROBE line, hostile.json;
    then the common assertions (server alive, frames, fps, RSS bound)."""
    rss_before = rss_mb(c.pid)
    frames_before = c.stream.frames()
    t0 = time.monotonic()
    record: dict[str, Any] = {}
    outcome = "passed"
    peak = [rss_before or 0.0]
    stop = threading.Event()

    def sample() -> None:      # the highest RSS during the probe (reported, not asserted)
        while not stop.wait(0.1):
            v = rss_mb(c.pid)
            if v is not None and v > peak[0]:
                peak[0] = v
    sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    sampler.start()
    try:
        return_value = run_async(body(record), timeout=timeout)
    except BaseException as e:
        outcome = f"failed: {type(e).__name__}"
        raise
    finally:
        stop.set()
        sampler.join(2)
        left = min_window - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
        duration = time.monotonic() - t0
        try:
            frames_after: Optional[int] = c.stream.frames()
        except Exception:  # noqa: BLE001 - the stream process is gone; the assertions below say so
            frames_after = None
        rss_after = rss_mb(c.pid)
        frames = None if frames_after is None else frames_after - frames_before
        rec = {"rss_before_mb": round(rss_before, 1) if rss_before is not None else None,
               "rss_after_mb": round(rss_after, 1) if rss_after is not None else None,
               "frames_during": frames, "rss_peak_mb": round(peak[0], 1), "duration_s": round(duration, 2),
               "fps": round(frames / duration, 1) if frames is not None else None,
               "rss_bound_mb": rss_bound_mb, "server_alive": c.server.alive(), "outcome": outcome, **record}
        RECORDS[name] = rec
        _write_results(c)
        extras = " ".join(f"{k}={v}" for k, v in rec.items()
                          if k not in ("rss_before_mb", "rss_after_mb", "frames_during") and not isinstance(v, (dict, list)))
        say(c.config, f"PROBE {name} rss_before_mb={rec['rss_before_mb']} rss_after_mb={rec['rss_after_mb']} "
                       f"frames_during={frames} {extras}")
    assert c.server.alive(), f"{name}: the server died\n{c.server.tail()}"
    assert frames is not None, f"{name}: the stream process is gone"
    assert frames > 0, f"{name}: the subscriber decoded no frame during the probe ({duration:.1f} s)"
    assert frames / duration >= MIN_FPS, (
        f"{name}: the subscriber decoded {frames} frames in {duration:.1f} s ({frames / duration:.1f} fps < {MIN_FPS})")
    assert rss_after is not None and rss_before is not None
    assert rss_after <= rss_before + rss_bound_mb, (
        f"{name}: server RSS grew from {rss_before:.1f} MB to {rss_after:.1f} MB (bound +{rss_bound_mb} MB)")
    return return_value


def assert_error(resp: dict, code: int, name: str, *, detail_has: Optional[str] = None, what: str = "") -> dict:
    err = assert_rpc_error(resp, code, name)
    detail = error_detail(resp)
    assert detail, f"{what}: error without a detail: {resp}"
    if detail_has is not None:
        assert detail_has in detail, f"{what}: the detail should name {detail_has!r}: {detail!r}"
    return err


def assert_result(resp: dict, what: str = "") -> dict:
    assert "result" in resp, f"{what}: expected a result, got {resp}"
    return resp["result"]


async def room_of(conn: Connection, room_id: str) -> dict:
    return (await conn.call("getRoom", {"roomId": room_id}))["room"]


async def close_quietly(*conns: Optional[Connection]) -> None:
    for conn in conns:
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001
                pass


# ---- 1. bad numbers in SDP ---------------------------------------------------------------------------

def _first_ssrc(sdp: str) -> str:
    m = re.search(r"^a=ssrc:(\d+) ", sdp, flags=re.M)
    assert m, "the aiortc offer has no a=ssrc line"
    return m.group(1)


def _after_mid(sdp: str, line: str) -> str:
    out, n = re.subn(r"^(a=mid:[^\r\n]*\r\n)", lambda m: m.group(1) + line + "\r\n", sdp, count=1, flags=re.M)
    assert n == 1
    return out


def _sub(pattern: str, repl: Any, sdp: str, count: int = 1) -> str:
    out, n = re.subn(pattern, repl, sdp, count=count, flags=re.M)
    assert n >= 1, f"mutation {pattern!r} matched nothing in the aiortc offer"
    return out


SDP_CASES: dict[str, tuple[Callable[[str], str], str]] = {
    # name: (mutation of the aiortc offer, expected error name; "fallback": published with another codec)
    # A clock rate that is a number but not the codec's (90000 for video) makes that codec unusable:
    # with none left the offer "offers no codec Minato forwards"; with VP8's alone, H264 is chosen.
    "clock-rate-99999999999-every-codec": (lambda s: _sub(r"^(a=rtpmap:\d+ [A-Za-z0-9-]+)/90000", r"\1/99999999999",
                                                          s, count=0), "invalidParameter"),
    "clock-rate-99999999999-vp8-only": (lambda s: _sub(r"^(a=rtpmap:\d+ VP8)/90000", r"\1/99999999999", s), "fallback"),
    "clock-rate-beyond-64-bits": (lambda s: _sub(r"^(a=rtpmap:\d+ VP8)/90000", r"\1/99999999999999999999999", s),
                                  "invalidSdp"),
    "payload-type-300": (lambda s: _sub(r"^(m=video \d+ \S+ )\d+", r"\g<1>300", s), "invalidSdp"),
    "port-70000": (lambda s: _sub(r"^m=video \d+ ", "m=video 70000 ", s), "invalidSdp"),
    "ssrc-99999999999": (lambda s: _sub(r"^(a=ssrc(?:-group:FID)?:?[^\r\n]*?)\b" + _first_ssrc(s) + r"\b",
                                        r"\g<1>99999999999", s, count=0), "invalidSdp"),
    "nul-in-line": (lambda s: _after_mid(s, "a=x-hostile:abc\x00def"), "invalidSdp"),
    "bare-cr-in-line": (lambda s: _after_mid(s, "a=x-hostile:abc\rdef"), "invalidSdp"),
    "no-forwardable-codec": (lambda s: _sub(r"^(a=rtpmap:\d+ )[A-Za-z0-9-]+/", r"\1XYZ/", s, count=0),
                             "invalidParameter"),
}


@pytest.mark.parametrize("case", list(SDP_CASES))
def test_sdp_bad_numbers(ctx: Ctx, offer_sdp: tuple[str, str], case: str):
    """publish with an out-of-range number (or a NUL / bare CR) in an otherwise real aiortc offer:
    the exact error, the member and the room unchanged, the socket still served."""
    mutate, expected = SDP_CASES[case]
    good, mid = offer_sdp
    bad = mutate(good)
    assert bad != good

    async def body(rec: dict) -> None:
        m, _ = await join_member(ctx.url, ctx.room_id, uid("sdp"), password=PASSWORD, keepalive=None)
        try:
            resp = await m.conn.call_raw("publish", {"memberId": m.id, "contentType": "video", "mid": mid,
                                                     "offer": {"type": "offer", "sdp": bad}})
            rec["answer"] = error_name(resp) or "result"
            room = await room_of(m.conn, ctx.room_id)          # the socket is still served
            assert m.id in [x["id"] for x in room["members"]], "the member was removed by a bad publish"
            if expected == "fallback":
                pub = assert_result(resp, f"publish with {case}")["publication"]
                mimes = [c["mimeType"] for c in pub["codecCapabilities"]]
                rec["codec"] = mimes
                assert mimes and "video/VP8" not in mimes, f"published with {mimes} although VP8's clock rate is bad"
            else:
                assert_error(resp, 400, expected, what=f"publish with {case}")
                assert not [p for p in room["publications"] if p["publisherId"] == m.id], room["publications"]
            await m.leave()
        finally:
            await m.close()

    run_probe(ctx, f"sdp-{case}", body, min_window=1.5)


# ---- 2. member takeover ------------------------------------------------------------------------------

SECRET_RE = re.compile(r"^[0-9a-f]{64}$")


def test_takeover_needs_the_secret(ctx: Ctx, offer_sdp: tuple[str, str]):
    info = ctx.info
    pub_id, sub_id = info["pubMemberId"], info["subMemberId"]
    sdp, mid = offer_sdp

    async def body(rec: dict) -> None:
        for who in ("pubSecret", "subSecret"):
            assert SECRET_RE.match(info.get(who) or ""), f"join result reconnectSecret: {info.get(who)!r}"
        t = await Connection(ctx.url, "takeover").connect()
        fresh: list[Connection] = []
        try:
            room = await room_of(t, ctx.room_id)
            by_name = {m["name"]: m for m in room["members"]}
            assert by_name[info["pubName"]]["id"] == pub_id, room["members"]
            assert "reconnectSecret" not in json.dumps(room) and info["pubSecret"] not in json.dumps(room), \
                "getRoom shows a reconnect secret"
            pub_before = next(p for p in room["publications"] if p["id"] == info["publicationId"])
            meta_before = by_name[info["pubName"]]["metadata"]
            ev0 = ctx.stream.event_count()

            # keepalive from a foreign socket: without, with a wrong, with another member's secret
            wrong = info["pubSecret"][:-1] + ("0" if info["pubSecret"][-1] != "0" else "1")
            for label, extra in [("no secret", {}), ("zeros", {"reconnectSecret": "0" * 64}),
                                 ("another member's secret", {"reconnectSecret": info["subSecret"]}),
                                 ("one digit off", {"reconnectSecret": wrong}),
                                 ("empty", {"reconnectSecret": ""})]:
                resp = await t.call_raw("keepalive", {"memberId": pub_id, **extra})
                assert_error(resp, 403, "insufficientPermissions", detail_has="reconnectSecret",
                             what=f"keepalive of the publisher with {label}")
            resp = await t.call_raw("keepalive", {"memberId": pub_id, "reconnectSecret": 12345})
            assert "error" in resp, f"keepalive with a numeric secret took the member over: {resp}"

            # member-scoped methods from the foreign socket: notJoined, nothing changes
            for method, params in [
                ("updateMemberMetadata", {"memberId": pub_id, "metadata": "pwned"}),
                ("leave", {"memberId": pub_id}),
                ("leave", {"memberId": sub_id}),
                ("publish", {"memberId": pub_id, "contentType": "video", "mid": mid,
                             "offer": {"type": "offer", "sdp": sdp}}),
                ("subscribe", {"memberId": sub_id, "publicationId": info["publicationId"]}),
                ("iceCandidate", {"memberId": pub_id, "direction": "send", "candidate": {
                    "candidate": "candidate:1 1 udp 2130706431 127.0.0.1 9 typ host", "sdpMid": mid, "sdpMLineIndex": 0}}),
            ]:
                assert_error(await t.call_raw(method, params), 409, "notJoined", what=f"{method} from a foreign socket")
            # publication-scoped: refused as before (the publisher's socket only)
            resp = await t.call_raw("disablePublication", {"publicationId": info["publicationId"]})
            assert error_name(resp) in ("insufficientPermissions", "notJoined"), resp

            # the real owners still own their members
            ctx.stream.owner_keepalive()
            room = await room_of(t, ctx.room_id)
            by_name = {m["name"]: m for m in room["members"]}
            assert by_name[info["pubName"]]["id"] == pub_id and by_name[info["subName"]]["id"] == sub_id
            assert by_name[info["pubName"]]["metadata"] == meta_before
            pub_now = next(p for p in room["publications"] if p["id"] == info["publicationId"])
            assert pub_now["state"] == pub_before["state"] == "enabled", pub_now
            touched = [e for e in ctx.stream.events(ev0)
                       if (e[1] in ("memberMetadataUpdated", "memberLeft") and e[2] in (pub_id, sub_id))
                       or e[1] in ("publicationDisabled", "streamUnpublished")]
            assert not touched, f"events about the streaming members during the takeover attempts: {touched}"

            # join with replace:true into the password room: no / wrong password -> wrongPassword
            for label, extra in [("no password", {}), ("wrong password", {"password": "not-" + PASSWORD})]:
                resp = await t.call_raw("join", {"roomId": ctx.room_id, "name": info["pubName"], "replace": True, **extra})
                assert_error(resp, 403, "wrongPassword", what=f"join replace:true with {label}")
            # wrong passwords are throttled per socket: after N in a row the next check waits
            # min(0.25 s * 2^(N-1), 4 s) -> 0, 0.25, 0.5, 1 s for the 1st..4th
            th = await Connection(ctx.url, "throttled").connect(); fresh.append(th)
            waits = []
            for _ in range(4):
                t0 = time.monotonic()
                resp = await th.call_raw("join", {"roomId": ctx.room_id, "name": info["pubName"], "replace": True,
                                                  "password": "still-wrong"})
                waits.append(time.monotonic() - t0)
                assert_error(resp, 403, "wrongPassword", what="a throttled wrong password")
            rec["wrong_password_waits_s"] = [round(w, 2) for w in waits]
            assert waits[2] >= 0.4 and waits[3] >= 0.85, f"wrong passwords 3 and 4 were not throttled: {waits}"
            # over-long passwords are refused as parameters (on a fresh socket: no throttle there)
            other = await Connection(ctx.url, "long-password").connect(); fresh.append(other)
            t0 = time.monotonic()
            resp = await other.call_raw("join", {"roomId": ctx.room_id, "name": uid("long"),
                                                 "password": "p" * (MAX_PASSWORD_BYTES + 1)})
            rec["fresh_socket_answer_s"] = round(time.monotonic() - t0, 3)
            assert_error(resp, 400, "invalidParameter", what="join with a 257-byte password")
            resp = await other.call_raw("createRoom", {"name": uid("longpw"), "password": "p" * (MAX_PASSWORD_BYTES + 1)})
            assert_error(resp, 400, "invalidParameter", what="createRoom with a 257-byte password")
            room = await room_of(t, ctx.room_id)
            assert {m["name"]: m["id"] for m in room["members"]}.get(info["pubName"]) == pub_id, "the publisher was replaced"

            # positive control on a throwaway member: the secret does move it
            victim_name = uid("victim")
            v = await Connection(ctx.url, "victim").connect(); fresh.append(v)
            res = await v.call("join", {"roomId": ctx.room_id, "name": victim_name, "password": PASSWORD})
            vid, vsecret = res["member"]["id"], res.get("reconnectSecret")
            assert SECRET_RE.match(vsecret or ""), f"join result reconnectSecret: {vsecret!r}"
            assert vsecret not in json.dumps(res["member"]) and vsecret not in json.dumps(res["room"])
            w = await Connection(ctx.url, "taker").connect(); fresh.append(w)
            assert_result(await w.call_raw("keepalive", {"memberId": vid, "reconnectSecret": vsecret}), "takeover with the secret")
            assert_result(await w.call_raw("updateMemberMetadata", {"memberId": vid, "metadata": "moved"}), "new owner")
            assert_error(await v.call_raw("updateMemberMetadata", {"memberId": vid, "metadata": "x"}), 409, "notJoined",
                         what="the old owner after the takeover")
            assert_error(await v.call_raw("keepalive", {"memberId": vid}), 403, "insufficientPermissions",
                         what="the old owner's keepalive without the secret")
            x = await Connection(ctx.url, "replacer").connect(); fresh.append(x)
            res = await x.call("join", {"roomId": ctx.room_id, "name": victim_name, "password": PASSWORD, "replace": True})
            await w.wait_event(event_matcher("memberLeft", member_id=vid, reason="replaced"), timeout=5)
            await x.call("leave", {"memberId": res["member"]["id"]})
        finally:
            await close_quietly(t, *fresh)

    run_probe(ctx, "takeover", body, timeout=60)


# ---- 3. candidate flood ------------------------------------------------------------------------------

def _candidate(i: int, pad_to: int = 0) -> str:
    line = f"candidate:{i} 1 udp 2130706431 127.0.0.1 {20000 + i % 40000} typ host"
    if pad_to > len(line):
        extra = " ufrag "
        line += extra + "u" * (pad_to - len(line) - len(extra))
    return line


def test_candidate_flood(ctx: Ctx):
    huge_count, huge_bytes = 600, 200 * 1024

    async def body(rec: dict) -> None:
        m, _ = await join_member(ctx.url, ctx.room_id, uid("cand"), password=PASSWORD, keepalive=None)
        try:
            def ice(direction: str, text: str) -> tuple[str, dict]:
                return "iceCandidate", {"memberId": m.id, "direction": direction,
                                        "candidate": {"candidate": text, "sdpMid": "0", "sdpMLineIndex": 0}}
            t0 = time.monotonic()
            huge = _candidate(0, huge_bytes)
            resps = await pipelined(m.conn, (ice("send", huge) for _ in range(huge_count)), window=8, timeout=60)
            rec["huge_s"] = round(time.monotonic() - t0, 2)
            names = {}
            for r in resps:
                names[error_name(r) or "result"] = names.get(error_name(r) or "result", 0) + 1
            rec["huge_answers"] = names
            assert_error(resps[0], 400, "invalidParameter", what=f"a {huge_bytes}-byte candidate")
            assert names == {"invalidParameter": huge_count}, f"answers to {huge_count} huge candidates: {names}"
            # the length boundary
            assert_error((await pipelined(m.conn, [ice("send", _candidate(1, MAX_CANDIDATE_LINE + 1))]))[0],
                         400, "invalidParameter", what="a 1025-byte candidate")
            # many small ones: 64 held (no transport yet), then limitExceeded naming the key
            # (requests in flight together may be handled in any order: count the outcomes)
            resps = await pipelined(m.conn, (ice("send", _candidate(i)) for i in range(MAX_REMOTE_CANDIDATES + 36)))
            accepted = [r for r in resps if "result" in r]
            assert len(accepted) == MAX_REMOTE_CANDIDATES, f"{len(accepted)} of {len(resps)} small candidates accepted"
            for r in resps:
                if "result" not in r:
                    assert_error(r, 429, "limitExceeded", detail_has="media.maxRemoteCandidates",
                                 what=f"candidate {MAX_REMOTE_CANDIDATES + 1}+")
            # bytes held before the transport exists: 16 x 1000 bytes fit in 16384, the 17th does not
            per = 1000
            fits = MAX_PENDING_CANDIDATE_BYTES // per
            resps = await pipelined(m.conn, (ice("recv", _candidate(i, per)) for i in range(fits + 4)))
            accepted = [r for r in resps if "result" in r]
            assert len(accepted) == fits, f"{len(accepted)} of {len(resps)} {per}-byte recv candidates accepted"
            for r in resps:
                if "result" not in r:
                    assert_error(r, 429, "limitExceeded", detail_has="media.maxPendingCandidateBytes",
                                 what=f"{per}-byte recv candidate over {MAX_PENDING_CANDIDATE_BYTES} bytes")
            room = await room_of(m.conn, ctx.room_id)      # still served, still a member
            assert m.id in [x["id"] for x in room["members"]]
            await m.leave()
        finally:
            await m.close()

    run_probe(ctx, "candidate-flood", body, rss_bound_mb=64.0, timeout=150)


# ---- 4. request flood and the in-flight limit ---------------------------------------------------------

def test_request_flood(ctx: Ctx):
    count = 20_000

    async def in_flight(rec: dict) -> None:
        """16 slow requests (throttled wrong passwords) unanswered: more are refused at once."""
        ws = await raw_connect(ctx.url, max_queue=64)
        try:
            for i in range(3):   # builds the throttle: the next wrong password waits >= 1 s
                assert error_name(await raw_call(ws, f"w{i}", "join", {"roomId": ctx.room_id, "name": uid("fl"),
                                                                       "password": "wrong"})) == "wrongPassword"
            t0 = time.monotonic()
            burst = MAX_IN_FLIGHT + 8
            for i in range(burst):
                await ws.send(request(f"b{i}", "join", {"roomId": ctx.room_id, "name": uid("fl"), "password": "wrong"}))
            answers: list[tuple[float, str]] = []
            deadline = t0 + 0.9
            while time.monotonic() < deadline:
                try:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic())))
                except asyncio.TimeoutError:
                    break
                if str(msg.get("id", "")).startswith("b"):
                    answers.append((time.monotonic() - t0, error_name(msg) or "result"))
                    if error_name(msg) == "limitExceeded":
                        assert "server.maxInFlightRequests" in error_detail(msg), msg
            limited = [a for a in answers if a[1] == "limitExceeded"]
            rec["in_flight_refused"] = len(limited)
            rec["in_flight_answers_first_0_9s"] = sorted({n for _, n in answers})
            assert len(limited) == burst - MAX_IN_FLIGHT, (
                f"{burst} requests behind a >= 1 s throttle: expected {burst - MAX_IN_FLIGHT} limitExceeded "
                f"at once, got within 0.9 s: {answers}")
        finally:
            await ws.close()

    async def body(rec: dict) -> None:
        t_start = time.monotonic()
        await in_flight(rec)
        rec["in_flight_s"] = round(time.monotonic() - t_start, 2)
        log0 = log_size(ctx.server.log_path)
        ws = await raw_connect(ctx.url, max_queue=1, rcvbuf=16 * 1024)
        ctx.stream.keepalive_probe_start(0.02)
        sent, stalled, send_error = 0, False, None
        try:
            params = {"roomId": ctx.room_id}
            t0 = time.monotonic()
            try:
                async def send_all() -> None:
                    nonlocal sent
                    for i in range(count):
                        await ws.send(request(i + 1, "getRoom", params))
                        sent += 1
                await asyncio.wait_for(send_all(), 30)
            except asyncio.TimeoutError:
                stalled = True
            except websockets.ConnectionClosed as e:
                send_error = repr(e)
            rec["flood_sent"] = sent
            rec["flood_send_s"] = round(time.monotonic() - t0, 2)
            # the server works through the flood while the test reads it: keep measuring meanwhile
            t_drain = time.monotonic()
            d = await drain(ws, quiet=3.0)
            await ws.close()
            rec["drain_s"] = round(time.monotonic() - t_drain, 2)
        finally:
            ka = ctx.stream.keepalive_probe_stop()
        rec["keepalive_n"] = ka["n"]
        rec["keepalive_p50_ms"] = round(ka["p50"] * 1000, 1) if ka["p50"] is not None else None
        rec["keepalive_p99_ms"] = round(ka["p99"] * 1000, 1) if ka["p99"] is not None else None
        rec["keepalive_max_ms"] = round(ka["max"] * 1000, 1) if ka["max"] is not None else None
        say(ctx.config, f"NOTE request-flood: another socket's keepalive round trip during the flood: "
                         f"n={ka['n']} p50={rec['keepalive_p50_ms']} ms p99={rec['keepalive_p99_ms']} ms "
                         f"max={rec['keepalive_max_ms']} ms errors={ka['error_count']}")
        rec["flood_drained"] = d.summary()
        rec["flood_errors"] = d.errors
        ok_close, how = close_evidence(d, ctx.server.log_path, log0)
        rec["flood_close"] = how
        assert not stalled, f"sending {count} requests stalled after {sent}: the server stopped reading the socket"
        assert set(d.errors) <= {"limitExceeded"}, f"flood answers other than results and limitExceeded: {d.errors} {d.error_details}"
        closed_4008 = ok_close
        refused = d.errors.get("limitExceeded", 0) > 0
        assert closed_4008 or refused, (
            f"{sent} requests never read: expected close 4008 outgoingQueueFull and/or limitExceeded; "
            f"got {d.summary()}; {how}")
        if d.closed:
            assert closed_4008, f"the flooding socket was closed, but not with 4008 outgoingQueueFull: {how}"
        assert ka["error_count"] == 0, f"keepalive errors on another socket during the flood: {ka['errors']}"
        assert ka["n"] >= 10 and ka["p99"] is not None and ka["p99"] < 1.0, (
            f"another socket's keepalive p99 {ka['p99']} s during the flood (n={ka['n']})")

    run_probe(ctx, "request-flood", body, rss_bound_mb=FLOOD_RSS_BOUND_MB, timeout=120)


# ---- 5. room flood, member flood ------------------------------------------------------------------------

def test_room_and_member_flood(ctx: Ctx):
    async def body(rec: dict) -> None:
        conns: list[Connection] = []
        created: list[str] = []

        async def connect(label: str) -> Connection:
            c = await Connection(ctx.url, label).connect()
            conns.append(c)
            return c
        try:
            f = await connect("room-flood")
            before = len((await f.call("listRooms"))["rooms"])
            rec["rooms_before"] = before
            for i in range(MAX_ROOMS_PER_CONNECTION):
                created.append((await f.call("createRoom", {"name": uid(f"flood{i}")}))["room"]["id"])
            names = []
            for i in range(3):
                resp = await f.call_raw("createRoom", {"name": uid("over")})
                assert_error(resp, 429, "limitExceeded", detail_has="rooms.maxRoomsCreatedPerConnection",
                             what=f"createRoom {MAX_ROOMS_PER_CONNECTION + 1 + i} from one socket")
            over_name = uid("over-foc")
            assert_error(await f.call_raw("findOrCreateRoom", {"name": over_name}), 429, "limitExceeded",
                         detail_has="rooms.maxRoomsCreatedPerConnection", what="findOrCreateRoom that would create")
            # finding an existing room is not creating one
            own = (await f.call("getRoom", {"roomId": created[0]}))["room"]
            assert_result(await f.call_raw("findOrCreateRoom", {"name": own["name"]}), "findOrCreateRoom of an existing room")
            listed = {r["name"] for r in (await f.call("listRooms"))["rooms"]}
            assert not any(n and n.startswith("over-") for n in listed), f"a refused room exists: {sorted(filter(None, listed))}"

            # the server-wide cap, from sockets that each stay under their own cap
            hit = None
            for s in range(MAX_ROOMS // MAX_ROOMS_PER_CONNECTION + 2):
                g = await connect(f"room-flood-{s}")
                for i in range(MAX_ROOMS_PER_CONNECTION):
                    resp = await g.call_raw("createRoom", {"name": uid(f"cap{s}")})
                    if "error" in resp:
                        hit = resp
                        break
                    created.append(resp["result"]["room"]["id"])
                if hit:
                    break
            assert hit is not None, f"{len(created)} rooms created without reaching rooms.maxRooms={MAX_ROOMS}"
            assert_error(hit, 429, "limitExceeded", detail_has="rooms.maxRooms", what="createRoom over rooms.maxRooms")
            total = len((await f.call("listRooms"))["rooms"])
            rec["rooms_at_cap"] = total
            assert total == MAX_ROOMS, f"{total} rooms on the server when rooms.maxRooms={MAX_ROOMS} refused one"
            r = http("POST", ctx.server.http + "/v1/rooms", {"name": uid("admin-over")})
            assert_http_error(r, 429, "limitExceeded")
            assert len((await f.call("listRooms"))["rooms"]) == MAX_ROOMS
            for rid in created:
                await f.call("closeRoom", {"roomId": rid})
            created.clear()
            h = await connect("after-cap")
            rid = (await h.call("createRoom", {"name": uid("after")}))["room"]["id"]
            await h.call("closeRoom", {"roomId": rid})

            # members per connection: across rooms, live members only
            z = await connect("member-room-maker")
            mroom = (await z.call("createRoom", {"name": uid("members")}))["room"]["id"]
            created.append(mroom)
            j = await connect("member-flood")
            ids = []
            for i in range(MAX_MEMBERS_PER_CONNECTION):
                ids.append((await j.call("join", {"roomId": mroom, "name": f"mf-{i}"}))["member"]["id"])
            for target, extra in [(mroom, {}), (ctx.room_id, {"password": PASSWORD})]:
                resp = await j.call_raw("join", {"roomId": target, "name": uid("mf-over"), **extra})
                assert_error(resp, 429, "limitExceeded", detail_has="rooms.maxMembersPerConnection",
                             what=f"join {MAX_MEMBERS_PER_CONNECTION + 1} from one socket")
            room = await room_of(j, mroom)
            assert len(room["members"]) == MAX_MEMBERS_PER_CONNECTION, room["members"]
            # a takeover counts too: j is full, so it cannot take over k's member even with the secret
            k = await connect("member-owner")
            res = await k.call("join", {"roomId": mroom, "name": "mf-k"})
            resp = await j.call_raw("keepalive", {"memberId": res["member"]["id"], "reconnectSecret": res.get("reconnectSecret")})
            assert_error(resp, 429, "limitExceeded", detail_has="rooms.maxMembersPerConnection",
                         what="a takeover by a socket at its member cap")
            assert_error(await j.call_raw("updateMemberMetadata", {"memberId": res["member"]["id"], "metadata": "x"}),
                         409, "notJoined", what="after a refused takeover")
            await j.call("leave", {"memberId": ids[0]})
            assert_result(await j.call_raw("join", {"roomId": mroom, "name": "mf-again"}), "join after a leave")
            rec["members_per_connection"] = MAX_MEMBERS_PER_CONNECTION
        finally:
            if created and conns:
                for rid in created:
                    try:
                        await conns[0].call_raw("closeRoom", {"roomId": rid})
                    except Exception:  # noqa: BLE001
                        pass
            await close_quietly(*conns)

    run_probe(ctx, "room-member-flood", body, timeout=60)


# ---- 6. a socket that never reads ------------------------------------------------------------------------

def test_socket_that_never_reads(ctx: Ctx):
    """A member's socket stops reading while another member makes 4 KB room events: once more than
    server.maxOutgoingBytes wait for it (beyond what the kernel buffers hold), the server closes it
    with 4008 outgoingQueueFull. The close frame queues behind the unread data, so the test sees
    it when it reads again; then the member (keepaliveIntervalGapSec 0) leaves at once."""
    meta = "m" * 4090           # + 6 digits: 4096 bytes, the most metadata may have
    events = 2000               # 2000 x ~4.35 KB = ~8.7 MB: over ~4 MB of socket buffers + 1 MiB

    async def body(rec: dict) -> None:
        maker = await Connection(ctx.url, "silent-room-maker").connect()
        trigger = None
        silent = None
        rid = (await maker.call("createRoom", {"name": uid("silent")}))["room"]["id"]
        try:
            trigger = await Connection(ctx.url, "trigger").connect()
            tid = (await trigger.call("join", {"roomId": rid, "name": "trigger"}))["member"]["id"]
            silent = await raw_connect(ctx.url, max_queue=1, rcvbuf=16 * 1024)
            res = await raw_call(silent, 1, "join", {"roomId": rid, "name": "silent", "keepaliveIntervalGapSec": 0})
            sid = res["result"]["member"]["id"]
            start = len(trigger.events)
            t0 = time.monotonic()
            resps = await pipelined(trigger, (("updateMemberMetadata", {"memberId": tid, "metadata": f"{meta}{i:06d}"})
                                              for i in range(events)), window=8)
            bad = [r for r in resps if "error" in r]
            assert not bad, f"updateMemberMetadata failed ({len(bad)}x): {bad[0]}"
            rec["events_sent"] = events
            rec["event_mb_sent"] = round(events * (len(meta) + 256) / 1e6, 1)
            rec["events_s"] = round(time.monotonic() - t0, 2)
            # The server has been sending into a zero window for seconds: its kernel probes the
            # window with a backoff that doubles (0.2, 0.4 ... 3.2 s, 6.4 s), and reading does
            # not always send a window update (the freed space is under two segments of
            # loopback's 64 KB MSS), so the next bytes can take as long as the wait was: here
            # up to ~6 s. 3 s of quiet read that stall as the end (8 messages, "still open").
            d = await drain(silent, quiet=8.0)
            rec["silent_drained"] = d.summary()
            assert d.closed and d.close_code == 4008 and (d.close_reason or "").startswith("outgoingQueueFull"), (
                f"a socket that never read {events} events of 4 KB (server.maxOutgoingBytes={MAX_OUTGOING_BYTES}): "
                f"expected close 4008 outgoingQueueFull…, got {d.summary()}")
            assert d.notifications < events, "the never-reading socket got every event: nothing was dropped"
            gone = event_matcher("memberLeft", member_id=sid)
            left = await await_until(lambda: next((e for e in trigger.events[start:] if gone(e)), None), 5,
                                     "the closed socket's member (keepaliveIntervalGapSec 0) to leave")
            rec["silent_left_reason"] = left.get("reason")
            # the trigger socket was not hurt
            room = await room_of(trigger, rid)
            assert [m["id"] for m in room["members"]] == [tid], room["members"]
        finally:
            if silent is not None:
                await silent.close()
            await maker.call_raw("closeRoom", {"roomId": rid})
            await close_quietly(trigger, maker)

    run_probe(ctx, "never-reading-socket", body, rss_bound_mb=FLOOD_RSS_BOUND_MB, timeout=120)


# ---- 7. oversized encodings ------------------------------------------------------------------------------

def test_oversized_encodings(ctx: Ctx, offer_sdp: tuple[str, str]):
    sdp, mid = offer_sdp
    cases: list[tuple[str, Any, int, str]] = [
        ("1000 entries", [{"id": f"e{i}"} for i in range(1000)], 429, "limitExceeded"),
        (f"{MAX_ENCODINGS + 1} entries", [{"id": f"e{i}"} for i in range(MAX_ENCODINGS + 1)], 429, "limitExceeded"),
        ("a 100 kB id", [{"id": "h" * 100_000}], 400, "invalidParameter"),
        ("a 65-char id", [{"id": "h" * 65}], 400, "invalidParameter"),
        ("an empty id", [{"id": ""}], 400, "invalidParameter"),
        ("an id that is not a name", [{"id": "h i"}], 400, "invalidParameter"),
        ("no id", [{"maxBitrate": 1000}], 400, "invalidParameter"),
        ("an unknown key", [{"id": "h", "foo": 1}], 400, "invalidParameter"),
        ("a duplicate id", [{"id": "h"}, {"id": "h"}], 400, "invalidParameter"),
        ("a string entry", ["h"], 400, "invalidParameter"),
        ("maxBitrate 0", [{"id": "h", "maxBitrate": 0}], 400, "invalidParameter"),
        ("maxBitrate 1e9+1", [{"id": "h", "maxBitrate": 1_000_000_001}], 400, "invalidParameter"),
        ("maxBitrate 1.5", [{"id": "h", "maxBitrate": 1.5}], 400, "invalidParameter"),
        ("scaleResolutionDownBy 0.5", [{"id": "h", "scaleResolutionDownBy": 0.5}], 400, "invalidParameter"),
        ("scaleResolutionDownBy 65", [{"id": "h", "scaleResolutionDownBy": 65}], 400, "invalidParameter"),
        ("maxFramerate 0", [{"id": "h", "maxFramerate": 0}], 400, "invalidParameter"),
        ("maxFramerate 241", [{"id": "h", "maxFramerate": 241}], 400, "invalidParameter"),
    ]

    async def body(rec: dict) -> None:
        e, _ = await join_member(ctx.url, ctx.room_id, uid("enc"), password=PASSWORD, keepalive=None)
        e2, _ = await join_member(ctx.url, ctx.room_id, uid("enc-sub"), password=PASSWORD, keepalive=None)
        try:
            def publish(encodings: Any) -> dict:
                return {"memberId": e.id, "contentType": "video", "mid": mid, "offer": {"type": "offer", "sdp": sdp},
                        "encodings": encodings}
            for label, encodings, code, name in cases:
                assert_error(await e.conn.call_raw("publish", publish(encodings)), code, name,
                             detail_has="rooms.maxEncodings" if name == "limitExceeded" else None,
                             what=f"publish with encodings: {label}")
            resp = await e.conn.call_raw("publish", publish({"id": "h"}))
            assert error_name(resp) in ("invalidParameter", "invalidParams"), f"encodings as an object: {resp}"
            room = await room_of(e.conn, ctx.room_id)
            assert not [p for p in room["publications"] if p["publisherId"] == e.id], "a refused publish published"
            # a valid one (boundary values) is accepted and kept as given
            good = [{"id": "h", "maxBitrate": 1_000_000_000, "scaleResolutionDownBy": 1, "maxFramerate": 240},
                    {"id": "m.m-1_%*", "maxBitrate": 1, "scaleResolutionDownBy": 64, "maxFramerate": 1},
                    {"id": "l" * 64}, {"id": "q"}]
            res = (await e.conn.call("publish", publish(good)))["publication"]
            assert [x["id"] for x in res["encodings"]] == [x["id"] for x in good], res["encodings"]
            # preferredEncodingId must name one of the publication's encodings
            for bad in ("zz", "bad name!", "x" * 100_000):
                resp = await e2.conn.call_raw("subscribe", {"memberId": e2.id, "publicationId": res["id"],
                                                            "preferredEncodingId": bad})
                assert_error(resp, 400, "invalidParameter", what=f"subscribe with preferredEncodingId {bad[:12]!r}")
            sub = await e2.conn.call("subscribe", {"memberId": e2.id, "publicationId": res["id"], "preferredEncodingId": "h"})
            sid = sub["subscription"]["id"]
            assert_error(await e2.conn.call_raw("changePreferredEncoding", {"subscriptionId": sid, "preferredEncodingId": "zz"}),
                         400, "invalidParameter", what="changePreferredEncoding to an unknown id")
            assert_result(await e2.conn.call_raw("changePreferredEncoding", {"subscriptionId": sid, "preferredEncodingId": "q"}),
                          "changePreferredEncoding to a known id")
            await e2.leave()
            await e.leave()
        finally:
            await e2.close()
            await e.close()

    run_probe(ctx, "oversized-encodings", body)


# ---- 8. the admin API from a hostile page ------------------------------------------------------------

def test_admin_host_content_type_cors(ctx: Ctx):
    base = ctx.server.http
    port = ctx.server.port

    def room_names() -> set[str]:
        r = http("GET", base + "/v1/rooms")
        assert r.status == 200, f"GET /v1/rooms: {r}"
        return {x.get("name") for x in r.json["rooms"]}

    async def body(rec: dict) -> None:
        # a throwaway room (made with a proper Host) is the target of the state-changing requests
        r = http("POST", base + "/v1/rooms", {"name": uid("admin-target")})
        assert r.status == 201, f"POST /v1/rooms: {r}"
        target = r.json["room"]["id"]
        try:
            evil = uid("evil")
            for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}",
                         "localhost.evil.example"):
                for method, path, payload in [("GET", "/v1/rooms", None), ("POST", "/v1/rooms", {"name": evil}),
                                              ("GET", f"/v1/rooms/{ctx.room_id}", None),
                                              ("PATCH", f"/v1/rooms/{target}", {"metadata": "pwned"}),
                                              ("DELETE", f"/v1/rooms/{target}", None)]:
                    r = http(method, base + path, payload, headers={"Host": host})
                    err = assert_http_error(r, 403, "insufficientPermissions")
                    assert "Host" in err["detail"], f"{method} {path} Host {host}: the detail should say Host: {err}"
            assert evil not in room_names(), "a request with a foreign Host created a room"
            r = http("GET", f"{base}/v1/rooms/{target}")
            assert r.status == 200, f"a foreign-Host DELETE closed the room: {r}"
            assert r.json["room"]["metadata"] != "pwned", "a foreign-Host PATCH changed the room"
            for host in (f"localhost:{port}", "localhost", f"127.0.0.1:{port}", "127.0.0.1", f"[::1]:{port}", "[::1]"):
                r = http("GET", base + "/v1/rooms", headers={"Host": host})
                assert r.status == 200, f"GET /v1/rooms with Host {host}: {r}"

            plain = uid("plain")
            for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x"):
                r = http("POST", base + "/v1/rooms", {"name": plain}, headers={"Content-Type": ctype})
                assert_http_error(r, 415, "unsupportedMediaType")
                r = http("PATCH", f"{base}/v1/rooms/{target}", {"metadata": "pwned"}, headers={"Content-Type": ctype})
                assert_http_error(r, 415, "unsupportedMediaType")
                r = http("POST", f"{base}/v1/rooms/{target}/members/evict", {"name": "nobody"},
                         headers={"Content-Type": ctype})
                assert_http_error(r, 415, "unsupportedMediaType")
            assert plain not in room_names(), "a text/plain POST created a room"
            r = http("GET", f"{base}/v1/rooms/{target}")
            assert r.json["room"]["metadata"] != "pwned", "a text/plain PATCH changed the room"
            ok = uid("json-charset")
            r = http("POST", base + "/v1/rooms", {"name": ok}, headers={"Content-Type": "application/json; charset=utf-8"})
            assert r.status == 201, f"POST with application/json; charset=utf-8: {r}"
            assert http("DELETE", f"{base}/v1/rooms/{r.json['room']['id']}").status == 200

            origin = {"Origin": "http://evil.example"}
            cors_seen = {}
            for method, path, payload, headers in [
                ("GET", "/v1/rooms", None, origin),
                ("OPTIONS", "/v1/rooms", None, {**origin, "Access-Control-Request-Method": "POST",
                                               "Access-Control-Request-Headers": "content-type"}),
                ("POST", "/v1/rooms", {"name": uid("cors")}, origin),
            ]:
                r = http(method, base + path, payload, headers=headers)
                cors_seen[f"{method} {path}"] = r.status
                acao = {k: v for k, v in r.headers.items() if k.startswith("access-control-")}
                assert not acao, f"{method} {path} from Origin http://evil.example: CORS headers {acao}"
                if method == "POST" and r.status == 201:
                    http("DELETE", f"{base}/v1/rooms/{r.json['room']['id']}")
                if method != "OPTIONS":   # docs/protocol.md: an Origin of another site gets 403
                    assert_http_error(r, 403, "insufficientPermissions")
            assert not any(n and n.startswith("cors-") for n in room_names()), "a cross-origin POST created a room"
            r = http("GET", base + "/v1/rooms", headers={"Origin": f"http://127.0.0.1:{port}"})
            assert r.status == 200, f"GET /v1/rooms from the server's own origin: {r}"
            rec["cors_statuses"] = cors_seen
        finally:
            http("DELETE", f"{base}/v1/rooms/{target}")

    run_probe(ctx, "admin-host-content-type-cors", body)


# ---- 9. transports that never connect ---------------------------------------------------------------------

def test_transport_that_never_connects(ctx: Ctx):
    async def body(rec: dict) -> None:
        n, _ = await join_member(ctx.url, ctx.room_id, uid("noice-pub"), password=PASSWORD, keepalive=None)
        s, _ = await join_member(ctx.url, ctx.room_id, uid("noice-sub"), password=PASSWORD, keepalive=None)
        try:
            # a real aiortc offer, published, then the pc is closed before it could do ICE
            pc = new_peer_connection()
            tr = pc.addTransceiver(SyntheticVideoTrack(), direction="sendonly")
            await pc.setLocalDescription(await pc.createOffer())
            offer = pc.localDescription
            await pc.close()
            t0 = time.monotonic()
            res = await n.conn.call("publish", {"memberId": n.id, "contentType": "video", "mid": tr.mid,
                                                "offer": {"type": offer.type, "sdp": offer.sdp}})
            # a subscriber that never answers its server offer: its receive transport never connects either
            await s.conn.call("subscribe", {"memberId": s.id, "publicationId": ctx.info["publicationId"]})
            t1 = time.monotonic()
            wait = CONNECT_TIMEOUT_SEC + 6
            left_n = await n.conn.wait_event(event_matcher("memberLeft", member_id=n.id), timeout=wait)
            dt_n = time.monotonic() - t0
            left_s = await s.conn.wait_event(event_matcher("memberLeft", member_id=s.id), timeout=wait)
            dt_s = time.monotonic() - t1
            rec["publisher_removed_after_s"] = round(dt_n, 2)
            rec["subscriber_removed_after_s"] = round(dt_s, 2)
            assert left_n.get("reason") == "transportClosed", left_n
            assert left_s.get("reason") == "transportClosed", left_s
            assert dt_n >= CONNECT_TIMEOUT_SEC - 0.5, f"removed after {dt_n:.1f} s, before media.connectTimeoutSec"
            check = await Connection(ctx.url, "check").connect()
            try:
                room = await room_of(check, ctx.room_id)
            finally:
                await check.close()
            ids = [m["id"] for m in room["members"]]
            assert n.id not in ids and s.id not in ids, room["members"]
            assert res["publication"]["id"] not in [p["id"] for p in room["publications"]]
            assert ctx.info["publicationId"] in [p["id"] for p in room["publications"]]
        finally:
            await s.close()
            await n.close()

    run_probe(ctx, "transport-never-connects", body, timeout=60)


# ---- 10. keepalive caps, event paging ---------------------------------------------------------------------

def test_keepalive_caps_and_event_paging(ctx: Ctx):
    async def body(rec: dict) -> None:
        c = await Connection(ctx.url, "caps").connect()
        r = None
        try:
            for extra, key in [({"keepaliveIntervalGapSec": MAX_KEEPALIVE_GAP + 1}, "rooms.maxKeepaliveIntervalGapSec"),
                               ({"keepaliveIntervalSec": MAX_KEEPALIVE_INTERVAL + 1}, "rooms.maxKeepaliveIntervalSec"),
                               ({"keepaliveIntervalGapSec": 3600}, "rooms.maxKeepaliveIntervalGapSec")]:
                resp = await c.call_raw("join", {"roomId": ctx.room_id, "name": uid("ka"), "password": PASSWORD, **extra})
                assert_error(resp, 429, "limitExceeded", detail_has=key, what=f"join with {extra}")
            for extra in ({"keepaliveIntervalSec": 0}, {"keepaliveIntervalGapSec": -1}):
                resp = await c.call_raw("join", {"roomId": ctx.room_id, "name": uid("ka"), "password": PASSWORD, **extra})
                assert_error(resp, 400, "invalidParameter", what=f"join with {extra}")
            res = await c.call("join", {"roomId": ctx.room_id, "name": uid("ka-max"), "password": PASSWORD,
                                        "keepaliveIntervalSec": MAX_KEEPALIVE_INTERVAL,
                                        "keepaliveIntervalGapSec": MAX_KEEPALIVE_GAP})
            await c.call("leave", {"memberId": res["member"]["id"]})

            # paging: a room with 1 + 250 events
            rid = (await c.call("createRoom", {"name": uid("paging")}))["room"]["id"]
            mid = (await c.call("join", {"roomId": rid, "name": "pager"}))["member"]["id"]
            resps = await pipelined(c, (("updateMemberMetadata", {"memberId": mid, "metadata": f"v{i}"}) for i in range(250)))
            assert all("result" in x for x in resps)
            r = await Connection(ctx.url, "pager-reader").connect()
            page = await r.call("subscribeRoomEvents", {"roomId": rid, "offset": 0})
            assert len(page["events"]) == MAX_EVENTS_PER_PAGE, f"default page: {len(page['events'])} events"
            assert page.get("nextOffset") == page["events"][-1]["version"], page.get("nextOffset")
            versions: list[int] = []
            offset: Any = 0
            pages = 0
            while offset is not None:
                page = await r.call("subscribeRoomEvents", {"roomId": rid, "offset": offset, "limit": 40})
                pages += 1
                evs = page["events"]
                assert 1 <= len(evs) <= 40, f"page of {len(evs)} events with limit 40"
                versions += [e["version"] for e in evs]
                nxt = page.get("nextOffset", "missing")
                assert nxt == "missing" or nxt is None or nxt == evs[-1]["version"], page
                assert nxt != "missing", "subscribeRoomEvents result has no nextOffset"
                offset = nxt
                assert pages < 20
            rec["pages_of_40"] = pages
            total = len(versions)
            assert total >= 251 and versions == list(range(1, total + 1)), (
                f"paged versions: {versions[:5]}…{versions[-5:]} ({total})")
            last = await r.call("subscribeRoomEvents", {"roomId": rid, "offset": total - 3, "limit": 3})
            assert [e["version"] for e in last["events"]] == [total - 2, total - 1, total] and last["nextOffset"] is None, last
            for bad in (0, -1, MAX_EVENTS_PER_PAGE + 1, 10 ** 9):
                resp = await r.call_raw("subscribeRoomEvents", {"roomId": rid, "offset": 0, "limit": bad})
                assert_error(resp, 400, "invalidParameter", what=f"subscribeRoomEvents limit {bad}")
            await c.call("closeRoom", {"roomId": rid})
        finally:
            await close_quietly(c, r)

    run_probe(ctx, "keepalive-caps-and-paging", body)
