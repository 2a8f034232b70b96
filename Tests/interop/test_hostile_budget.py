"""Hostile clients II (issue "Safe to expose II"): requests that cost the attacker little must
cost the server little. While an aiortc publisher streams VP8 to an aiortc subscriber (the
victim; hostile_util.StreamProcess, its own process), other peers:

(a) send bursts of transport-wide feedback packets that claim 65,535 packet statuses each (40
    bytes on the wire), from a subscriber of the same stream and from a publisher: the victim
    keeps at least 90% of its frame rate, the server's CPU over the burst stays bounded, and the
    server's drop counters show each packet was refused (`invalid_feedback`) or over its
    transport's RTCP budget (`rtcp_over_budget`), not walked;
(b) POST 2,000 WHIP offers from one address: all but the first few are refused 429 with
    Retry-After (whip.maxNewSessionsPerSecPerAddress), the server holds no more media ports
    than the sessions it accepted, and a member then publishes over the WebSocket and the
    victim still decodes;
(c) POST WHIP offers from many addresses until whip.maxSessions: the next gets 503 naming it;
(d) POST 1,000 invalid WHIP offers (950 malformed, 50 that fail only after their room was
    made: nine video m-sections, one over rooms.maxPublicationsPerMember): each gets a 4xx
    naming why (none is the rate limit) and no room is left behind;
(e) an empty room goes away after rooms.emptyTimeoutSec (3 s here), with `closed` (reason
    `emptyTimeout`) to a listener; a room the admin API made with keepWhenEmpty stays.

Each probe prints one `PROBE name key=value …` line; all are written to
artifacts/interop/hostile-budget.json.
"""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import struct
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import pytest

from admin_util import http as admin_http, metric, scrape, server_udp_ports
from conftest import ARTIFACTS, Server
from hostile_util import StreamProcess, rss_mb, say, sendonly_offer, start_stream
from media import SineAudioTrack, SyntheticVideoTrack
from minato_client import Connection, Member, new_peer_connection, run_async
from waiting import await_until, wait_until

EMPTY_TIMEOUT_SEC = 3
MAX_SESSIONS = 12
SESSIONS_PER_SEC = 5
PASSWORD = "budget-room-password"
MINATO_SERVER_ENV = {
    "MINATO_ROOMS_EMPTY_TIMEOUT_SEC": str(EMPTY_TIMEOUT_SEC),
    "MINATO_WHIP_MAX_SESSIONS": str(MAX_SESSIONS),
    "MINATO_WHIP_MAX_NEW_SESSIONS_PER_SEC_PER_ADDRESS": str(SESSIONS_PER_SEC),
    # Sessions that never connect hold their port for this long, not the default 20 s.
    "MINATO_MEDIA_CONNECT_TIMEOUT_SEC": "5",
}
RTCP_PACKETS_PER_SEC = 1000           # media.rtcp.maxPacketsPerSec (default)
VICTIM_SHARE = 0.9                    # the victim keeps >= 90% of its frame rate
CPU_BOUND = 0.6                       # server CPU (cores) over a feedback burst, debug build
RSS_BOUND_MB = 32.0                   # server RSS after a probe <= before + this
RESULTS = ARTIFACTS / "hostile-budget.json"
RECORDS: dict[str, dict] = {}


def record(config: Any, name: str, **values: Any) -> None:
    RECORDS[name] = values
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"server_env": MINATO_SERVER_ENV, "probes": RECORDS}, indent=2) + "\n")
    say(config, f"PROBE {name} " + " ".join(f"{k}={v}" for k, v in values.items() if not isinstance(v, (dict, list))))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def stream(server: Server):
    s = start_stream(server, f"budget-{uuid.uuid4().hex[:8]}", PASSWORD, ARTIFACTS / "test_hostile_budget-stream.log")
    yield s
    s.stop()


def fps_over(stream: StreamProcess, seconds: float) -> float:
    f0, t0 = stream.frames(), time.monotonic()
    time.sleep(seconds)  # a measurement window
    return (stream.frames() - f0) / (time.monotonic() - t0)


# ---- (a) maximal-claim feedback ---------------------------------------------------------------

def maximal_claim(base: int = 0) -> bytes:
    """Transport-wide feedback (PT 205, FMT 15) claiming 65,535 lost packets in 8 run-length
    chunks of 8191 and one of 7: valid on the wire, 40 bytes."""
    count = 0xFFFF
    chunks = b"".join(struct.pack("!H", min(0x1FFF, count - i)) for i in range(0, count, 0x1FFF))
    body = struct.pack("!IIHHI", 0xABCD, 0x5000, base & 0xFFFF, count, 1) + chunks
    body += b"\x00" * (-len(body) % 4)
    return struct.pack("!BBH", 0x8F, 205, (len(body) + 4) // 4 - 1) + body


async def burst(transport: Any, packets: int, seconds: float) -> int:
    """Sends `packets` maximal claims through an aiortc DTLS transport (SRTCP-protected by its
    own keys, so the server authenticates them) spread over `seconds`."""
    sent = 0
    start = time.monotonic()
    for i in range(packets):
        await transport._send_rtp(maximal_claim(i * 7))
        sent += 1
        if i % 50 == 49:
            ahead = start + seconds * (i + 1) / packets - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing of the burst
    return sent


def drops(server: Server, reason: str) -> float:
    return metric(scrape(server.http), "minato_packets_dropped_total", reason=reason) or 0.0


@pytest.mark.parametrize("side", ["subscriber", "publisher"])
def test_maximal_claim_feedback_burst(server: Server, stream: StreamProcess, side: str, request: pytest.FixtureRequest):
    info = stream.info
    baseline = fps_over(stream, 3.0)
    assert baseline > 10, f"the victim decodes only {baseline:.1f} fps before the probe"
    attacker: Optional[Member] = None
    loop_box: dict = {}

    async def setup() -> Any:
        nonlocal attacker
        attacker = await Member.join(server.url, stream.room_id, f"attacker-{side}-{uuid.uuid4().hex[:6]}",
                                     password=PASSWORD)
        if side == "subscriber":
            sub = await attacker.subscribe(info["publicationId"])
            tr = next(t for t in attacker.recv_pc.getTransceivers() if t.mid == sub.mid)
            transport = tr.receiver.transport
        else:
            # Audio: the attacker's own encoder must not take the CPU the victim decodes with.
            await attacker.publish(SineAudioTrack())
            transport = attacker.send_pc.getSenders()[0].transport
        await await_until(lambda: transport.state == "connected", 20, f"the attacking {side}'s DTLS to connect")
        return transport

    invalid0, over0 = drops(server, "invalid_feedback"), drops(server, "rtcp_over_budget")
    rss0 = rss_mb(server.proc.pid)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        transport = asyncio.run_coroutine_threadsafe(setup(), loop).result(60)
        packets, seconds = 4500, 3.0   # 1.5 times media.rtcp.maxPacketsPerSec
        f0, c0, t0 = stream.frames(), cpu_seconds(server.proc.pid), time.monotonic()
        sent = asyncio.run_coroutine_threadsafe(burst(transport, packets, seconds), loop).result(60)
        elapsed = time.monotonic() - t0
        frames, cpu = stream.frames() - f0, cpu_seconds(server.proc.pid) - c0
        # The counters are copied from the workers at each scrape; wait for the last packets.
        invalid = over = 0.0

        def counted() -> bool:
            nonlocal invalid, over
            invalid = drops(server, "invalid_feedback") - invalid0
            over = drops(server, "rtcp_over_budget") - over0
            return invalid + over >= sent if side == "subscriber" else over >= 1
        wait_until(counted, 10, "the server to count every feedback packet as refused",
                   state=lambda: f"invalid_feedback +{invalid}, rtcp_over_budget +{over}, sent {sent}")
    finally:
        async def close() -> None:
            if attacker is not None:
                await attacker.close()
        asyncio.run_coroutine_threadsafe(close(), loop).result(20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    fps = frames / elapsed
    record(request.config, f"feedback_burst_{side}", packets=sent, seconds=round(elapsed, 2),
           packets_per_sec=round(sent / elapsed), victim_fps_before=round(baseline, 1), victim_fps_during=round(fps, 1),
           server_cpu_cores=round(cpu / elapsed, 3), invalid_feedback=int(invalid), rtcp_over_budget=int(over),
           rss_before_mb=rss0, rss_after_mb=rss_mb(server.proc.pid))
    assert server.alive(), server.tail()
    assert rss_mb(server.proc.pid) <= rss0 + RSS_BOUND_MB
    assert fps >= VICTIM_SHARE * baseline, f"the victim fell from {baseline:.1f} to {fps:.1f} fps during the burst"
    assert cpu / elapsed <= CPU_BOUND, f"the server used {cpu / elapsed:.2f} cores during the burst"
    if side == "subscriber":
        # More than the budget admits went out: some were over it, the rest refused unwalked.
        assert over >= sent - RTCP_PACKETS_PER_SEC * (elapsed + 1.5), (invalid, over, sent)
        assert invalid >= 1


# ---- WHIP -----------------------------------------------------------------------------------

_OFFERS: dict[int, str] = {}


def whip_offer(videos: int = 1) -> str:
    """A real aiortc offer with `videos` sendonly VP8 m-sections (made once per count)."""
    if videos not in _OFFERS:
        _OFFERS[videos] = sendonly_offer(videos)[0]
    return _OFFERS[videos]


def post(server: Server, path: str, body: str, source: str = "127.0.0.1",
         method: str = "POST") -> tuple[int, dict[str, str], str]:
    c = http.client.HTTPConnection(server.host, server.port, timeout=30, source_address=(source, 0))
    try:
        c.request(method, path, body=body.encode() if body else None,
                  headers={"Content-Type": "application/sdp"} if body else {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(errors="replace")
    finally:
        c.close()


def admin_rooms(server: Server) -> list[dict]:
    return admin_http("GET", f"{server.http}/v1/rooms").json["rooms"]


def end_sessions(server: Server, locations: list[tuple[str, str]]) -> None:
    for loc, source in locations:
        post(server, loc, "", source=source, method="DELETE")


def test_whip_flood_from_one_address(server: Server, stream: StreamProcess, request: pytest.FixtureRequest):
    offer = whip_offer()
    ports0 = len(server_udp_ports(server.proc.pid))
    rss0 = rss_mb(server.proc.pid)
    f0, t0 = stream.frames(), time.monotonic()
    room = f"flood-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(32) as pool:
        replies = list(pool.map(lambda i: post(server, f"/whip/{room}?name=f{i}", offer), range(2000)))
    elapsed = time.monotonic() - t0
    created = [(h["location"], "127.0.0.1") for s, h, _ in replies if s == 201]
    limited = [(s, h, t) for s, h, t in replies if s == 429]
    ports = len(server_udp_ports(server.proc.pid)) - ports0
    full = [s for s, _, _ in replies if s == 503]
    try:
        statuses = sorted({s for s, _, _ in replies})
        # 429 past the address's rate; 503 once whip.maxSessions are live (a flood of some seconds).
        assert set(statuses) <= {201, 429, 503}, statuses
        # A bucket of SESSIONS_PER_SEC, refilled at that rate while the flood lasted.
        # (Sessions that never connect end after the connect timeout, so more than
        # whip.maxSessions may be made over a long flood, never more than that at once.)
        assert 1 <= len(created) <= SESSIONS_PER_SEC * (elapsed + 1) + 1, (len(created), elapsed)
        # The address's rate is checked first: only posts within it can meet the server's cap.
        assert len(full) + len(created) <= SESSIONS_PER_SEC * (elapsed + 1) + 1, (len(full), len(created))
        assert len(limited) == 2000 - len(created) - len(full)
        s, h, text = limited[0]
        assert h.get("retry-after") == "1" and "whip.maxNewSessionsPerSecPerAddress" in text, (h, text)
        assert ports <= len(created), f"{ports} media ports held for {len(created)} sessions"

        # A legitimate member publishes and its stream reaches a subscriber; the victim decodes on.
        async def legit() -> int:
            pub = await Member.join(server.url, stream.room_id, f"legit-{uuid.uuid4().hex[:6]}", password=PASSWORD)
            sub = await Member.join(server.url, stream.room_id, f"legit-sub-{uuid.uuid4().hex[:6]}", password=PASSWORD)
            try:
                published = await pub.publish(SyntheticVideoTrack())
                got = await sub.subscribe(published.id)
                frame = await asyncio.wait_for(got.track.recv(), 20)
                return frame.width
            finally:
                await sub.close()
                await pub.close()
        width = run_async(legit(), timeout=60)
    finally:
        end_sessions(server, created)
    frames = stream.frames() - f0
    fps = frames / (time.monotonic() - t0)
    record(request.config, "whip_flood_one_address", posts=2000, seconds=round(elapsed, 2), created=len(created),
           refused_429=len(limited), media_ports_held=ports, legit_publish_frame_width=width, victim_fps=round(fps, 1),
           rss_before_mb=rss0, rss_after_mb=rss_mb(server.proc.pid))
    assert width > 0
    assert rss_mb(server.proc.pid) <= rss0 + RSS_BOUND_MB
    assert fps >= 10, f"the victim decoded {fps:.1f} fps during the flood"


def test_whip_sessions_are_capped_server_wide(server: Server, request: pytest.FixtureRequest):
    offer = whip_offer()
    created: list[tuple[str, str]] = []
    refused: Optional[tuple[int, dict, str]] = None
    room = f"cap-{uuid.uuid4().hex[:6]}"
    try:
        for i in range(MAX_SESSIONS + 5):
            source = f"127.0.2.{i + 1}"   # one address per session: the rate limit is not what stops them
            s, h, t = post(server, f"/whip/{room}?name=c{i}", offer, source=source)
            if s == 201:
                created.append((h["location"], source))
            else:
                refused = (s, h, t)
                break
        assert refused is not None, f"{len(created)} sessions and none refused"
        s, h, t = refused
        assert s == 503 and "whip.maxSessions" in t and h.get("retry-after") == "1", refused
        assert len(created) == MAX_SESSIONS
    finally:
        end_sessions(server, created)
    # Ended sessions free their places.
    s, h, _ = post(server, f"/whip/{room}?name=again", offer, source="127.0.2.200")
    assert s == 201, s
    end_sessions(server, [(h["location"], "127.0.2.200")])
    record(request.config, "whip_max_sessions", created=len(created), refused_status=refused[0])


def test_invalid_whip_posts_leave_no_room(server: Server, request: pytest.FixtureRequest):
    nine = whip_offer(9)   # nine video m-sections: the ninth publish is over the limit of 8
    malformed = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n"
    before = {r["id"] for r in admin_rooms(server)}
    t0 = time.monotonic()

    def one(i: int) -> tuple[int, str]:
        body = nine if i % 20 == 0 else malformed
        # 4 posts per address: the rate limit is not what refuses them.
        s, _, t = post(server, f"/whip/bad-{i}?name=x", body, source=f"127.0.{3 + i // 1000}.{1 + (i // 4) % 250}")
        return s, t
    # 8 at once: fewer than whip.maxSessions sessions exist at any moment.
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(one, range(1000)))
    elapsed = time.monotonic() - t0
    statuses: dict[int, int] = {}
    for s, _ in replies:
        statuses[s] = statuses.get(s, 0) + 1
    after = {r["id"] for r in admin_rooms(server)}
    record(request.config, "invalid_whip_posts", posts=1000, seconds=round(elapsed, 2),
           statuses=statuses, rooms_left=len(after - before))
    assert all(400 <= s < 500 for s, _ in replies), statuses
    assert not any("whip.maxNewSessionsPerSecPerAddress" in t for _, t in replies), "the rate limit refused some"
    late = [(s, t) for s, t in replies[::20]]
    assert all(s == 429 and "rooms.maxPublicationsPerMember" in t for s, t in late), late[:3]
    assert after - before == set(), f"{len(after - before)} rooms left behind"


# ---- empty rooms ------------------------------------------------------------------------------

def test_empty_rooms_close_after_their_timeout(server: Server, request: pytest.FixtureRequest):
    kept = admin_http("POST", f"{server.http}/v1/rooms", {"name": f"kept-{uuid.uuid4().hex[:6]}", "keepWhenEmpty": True})
    assert kept.status == 201, kept.text
    kept_id = kept.json["room"]["id"]

    async def run() -> dict:
        listener = await Connection(server.url, "listener").connect()
        member_conn = await Connection(server.url, "member").connect()
        try:
            room = (await listener.call("findOrCreateRoom", {"name": f"empty-{uuid.uuid4().hex[:6]}"}))["room"]
            await listener.call("subscribeRoomEvents", {"roomId": room["id"]})
            t0 = time.monotonic()
            # A member keeps it: joined for longer than the timeout, then leaves.
            joined = await member_conn.call("join", {"roomId": room["id"], "name": "m"})
            await asyncio.sleep(EMPTY_TIMEOUT_SEC + 1)  # the room must outlive its timeout while a member is in it
            assert any(r["id"] == room["id"] for r in admin_rooms(server)), "a room with a member was closed"
            await member_conn.call("leave", {"memberId": joined["member"]["id"]})
            left_at = time.monotonic()
            ev = await listener.wait_event(lambda e: e.get("type") == "closed", timeout=EMPTY_TIMEOUT_SEC + 10)
            closed_after = time.monotonic() - left_at
            return {"reason": ev.get("reason"), "closed_after_s": round(closed_after, 2), "room": room["id"],
                    "lived_s": round(time.monotonic() - t0, 2)}
        finally:
            await listener.close()
            await member_conn.close()
    out = run_async(run(), timeout=60)
    ids = {r["id"] for r in admin_rooms(server)}
    record(request.config, "empty_room_timeout", timeout_s=EMPTY_TIMEOUT_SEC, **out, kept_room_stays=kept_id in ids)
    assert out["reason"] == "emptyTimeout"
    assert out["room"] not in ids
    assert EMPTY_TIMEOUT_SEC - 0.5 <= out["closed_after_s"] <= EMPTY_TIMEOUT_SEC + 5
    assert kept_id in ids, "the keepWhenEmpty room was closed"
    admin_http("DELETE", f"{server.http}/v1/rooms/{kept_id}")
