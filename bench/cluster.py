#!/usr/bin/env python3
"""The cluster benchmark (make bench-cluster): Redis and three Minato nodes, each on a "host" of
its own (network namespaces joined by a bridge, Tests/interop/cluster.py, `cluster.leaseMs` 2000),
aiortc clients (Tests/interop/minato_client.py, media.py) in this process's namespace.

  1. Join latency through the node hosting the room vs through another node: one room on n1 with
     one aiortc VP8 publisher (joined through n1); then --joins joins through n1 and as many
     through n2/n3 (interleaved, up to --concurrency at a time), each on a fresh WebSocket:
     join, subscribe to the publication, wait for the first decoded frame, leave, close.
  2. Relayed-request latency: --requests sequential `getRoom` and `keepalive` of a member joined
     through the host and of one joined through another node (relayed over the node link).
  3. Host SIGKILL -> decoding again: publisher socket on n1, subscriber socket on n2, room on n3;
     n3 is SIGKILLed and both bots do what an SDK does on `closed`/`nodeFailed`
     (findOrCreateRoom by name, retried on serviceUnavailable every 200 ms; join; re-publish /
     subscribe on `streamPublished`). --kill-runs runs, n3 restarted between them.
  4. Redis commands per second with the three nodes idle (no rooms), over 10 s.

Must run in a fresh loopback-only network namespace, as the interop suite does:
  unshare -n sh -c 'ip link set lo up; exec .venv-interop/bin/python bench/cluster.py [--quick]'
Server binary: $MINATO_BIN, else .build/release/minato if present, else .build/debug/minato.
Writes bench/results/cluster.{json,md}; node and Redis logs in artifacts/bench/cluster/.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "interop"))
LOG_DIR = REPO / "artifacts" / "bench" / "cluster"

DEFINITIONS = """\
- **join response**: from sending `join` (on a WebSocket already open) to its response.
  **first frame**: from sending `join` to the first video frame aiortc decoded on the new
  subscription (join, `subscribe`, the server's offer answered, ICE + DTLS with the hosting
  node, a keyframe: the server asks the publisher for one when a subscription starts, at most
  one per 500 ms per publication, so with several joins at once some wait for the next one).
  Through another node every request is relayed to the host over the node link; media always
  goes straight to the host. The joins of both paths are interleaved and run a few at a time
  (`concurrency`), so both see the same load.
- **relayed request**: one `getRoom` / `keepalive` round trip, sequential, on a member whose
  socket is on the host (direct) and on one whose socket is on another node (relayed).
- **kill -> decoding again**: from SIGKILL of the hosting node to the first frame decoded on
  the subscriber's new subscription. Both bots' sockets are on live nodes; they learn of the
  failure from `roomEvent {type: closed, reason: nodeFailed}` (sent once the host's lease,
  `cluster.leaseMs`, has lapsed), then `findOrCreateRoom` by name (retried every 200 ms on
  `serviceUnavailable`), `join`, the publisher re-publishes (new peer connection) and the
  subscriber subscribes on `streamPublished`. The intermediate columns are kill -> that step.
- **Redis ops/s at rest**: `total_commands_processed` (INFO stats) over 10 s with the three
  nodes registered and no room, less this script's own INFO commands; per node = total / 3.
- p50/p99: linear interpolation between the closest ranks. Everything (Redis, three nodes,
  every aiortc client) shares this machine's CPUs; a debug build costs several times the CPU
  of a release build, so quote numbers from a release build.
"""


# ---- small helpers ---------------------------------------------------------------------------------

def in_loopback_namespace() -> bool:
    with open("/proc/self/net/dev") as f:
        return sorted(ln.split(":")[0].strip() for ln in f.read().splitlines()[2:] if ":" in ln) == ["lo"]


def resolve_binary(arg: Optional[str]) -> tuple[Path, str]:
    """($MINATO_BIN | .build/release/minato if present | .build/debug/minato, where it came from)."""
    if arg:
        return Path(arg), "--minato-bin"
    if os.environ.get("MINATO_BIN"):
        return Path(os.environ["MINATO_BIN"]), "$MINATO_BIN"
    release = REPO / ".build" / "release" / "minato"
    if release.is_file() and os.access(release, os.X_OK):
        return release, "default"
    return REPO / ".build" / "debug" / "minato", "default; no .build/release/minato"


def build_kind(binary: Path) -> str:
    parts = binary.resolve().parts
    return "release" if "release" in parts else "debug" if "debug" in parts else "unknown"


def pct(xs: list[float], q: float) -> Optional[float]:
    """The q-th percentile (0..100), linear between closest ranks; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats_ms(xs_s: list[float]) -> dict:
    """{count, p50, p99, min, max} in milliseconds of samples in seconds."""
    ms = [x * 1000 for x in xs_s]
    r = lambda v: None if v is None else round(v, 2)  # noqa: E731
    return {"count": len(ms), "p50": r(pct(ms, 50)), "p99": r(pct(ms, 99)),
            "min": r(min(ms) if ms else None), "max": r(max(ms) if ms else None)}


def fmt(v: Optional[float], digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def host_index(room_id: str) -> int:
    prefix = room_id.split(".", 1)[0]
    if not (prefix.startswith("n") and prefix[1:].isdigit()):
        raise RuntimeError(f"room id {room_id!r} names no node")
    return int(prefix[1:])


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        nproc = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip())
    except (OSError, ValueError):
        nproc = os.cpu_count() or 0
    return {"nproc": nproc, "cpu": model, "kernel": platform.release()}


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


async def in_thread(fn, *args: Any, **kw: Any) -> Any:
    """A blocking harness call (process start, HTTP) off the event loop: aiortc keeps running."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kw))


async def room_on(url: str, want: int, prefix: str) -> dict:
    """A new named room created through `url`, placed on node `want` (rooms are created until
    placement puts one there; the others stay empty and close on their own)."""
    from minato_client import create_room, unique_name
    for _ in range(40):
        room = await create_room(url, unique_name(prefix))
        if host_index(room["id"]) == want:
            return room
    raise RuntimeError(f"40 rooms created through {url}, none placed on n{want}")


# ---- 4. Redis at rest ------------------------------------------------------------------------------

def redis_info(section: str) -> dict[str, str]:
    from cluster import redis_command
    text = redis_command("INFO", section)
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def commandstats(info: dict[str, str]) -> dict[str, int]:
    """{command: calls} of INFO commandstats."""
    out = {}
    for k, v in info.items():
        if k.startswith("cmdstat_"):
            fields = dict(x.split("=", 1) for x in v.split(",") if "=" in x)
            out[k[len("cmdstat_"):]] = int(fields.get("calls", 0))
    return out


def redis_at_rest(c: Any, nodes: int, window: float = 10.0) -> dict:
    from waiting import wait_until

    def all_listed() -> bool:
        for i in range(1, nodes + 1):
            status, _, body = c.admin(i, "GET", "/v1/nodes")
            if status != 200 or len(body.get("nodes", [])) != nodes:
                return False
            status, _, body = c.admin(i, "GET", "/v1/rooms")
            if status != 200 or body.get("rooms"):
                return False
        return True
    wait_until(all_listed, 20, "every node to list all nodes and no room", interval=0.2)
    time.sleep(2.0)     # settle: startup's registrations and the admin requests above are done
    a = int(redis_info("stats")["total_commands_processed"])
    ca = commandstats(redis_info("commandstats"))
    t0 = time.monotonic()
    time.sleep(window)  # the measurement window itself
    b = int(redis_info("stats")["total_commands_processed"])
    took = time.monotonic() - t0
    cb = commandstats(redis_info("commandstats"))
    ours = 2            # the two INFO commands between the readings (the first reading's own
                        # INFO is counted after its reply, so it falls in the window too)
    total = max(0, b - a - ours)
    per_cmd = {k: cb.get(k, 0) - ca.get(k, 0) for k in cb}
    per_cmd["info"] = per_cmd.get("info", 0) - ours
    per_cmd = {k: v for k, v in sorted(per_cmd.items(), key=lambda kv: -kv[1]) if v > 0}
    return {"windowSec": round(took, 2), "commands": total, "opsPerSec": round(total / took, 2),
            "opsPerSecPerNode": round(total / took / nodes, 2),
            "perCommandPerSec": {k: round(v / took, 2) for k, v in per_cmd.items()}}


# ---- 1. join latency --------------------------------------------------------------------------------

async def one_join(url: str, via: int, room_id: str, pub_id: str, label: str, timeout: float) -> dict:
    from media import VideoSink
    from minato_client import Connection, Member
    rec: dict = {"via": via, "ok": False}
    conn = None
    m: Optional[Member] = None
    sink = None
    try:
        t_open = time.monotonic()
        conn = await Connection(url, label=label).connect()
        m = Member(conn, label=label)
        t0 = time.monotonic()
        rec["connect"] = t0 - t_open
        res = await conn.call("join", {"roomId": room_id, "name": label}, timeout=timeout)
        rec["join"] = time.monotonic() - t0
        m.member, m.room = res["member"], res["room"]
        sub = await m.subscribe(pub_id)
        rec["subscribe"] = time.monotonic() - t0
        sink = VideoSink(sub.track, f"{label}-video")
        deadline = t0 + timeout
        while sink.first_frame_at is None and time.monotonic() < deadline and not sink.ended:
            await asyncio.sleep(0.01)   # polling only; the frame's own time is first_frame_at
        if sink.first_frame_at is None:
            rec["error"] = f"no decoded frame within {timeout:g} s"
        else:
            rec["firstFrame"] = sink.first_frame_at - t0
            rec["ok"] = True
        try:
            await m.leave()
        except Exception as e:  # noqa: BLE001 - a failed leave is recorded, the sample stands
            rec["leaveError"] = repr(e)
    except Exception as e:  # noqa: BLE001 - one failed join is a recorded failure, not the end
        rec["error"] = repr(e)
    finally:
        if sink:
            sink.stop()
        if m is not None:
            await m.close()
        elif conn is not None:
            await conn.close()
    return rec


async def join_bench(c: Any, joins: int, concurrency: int, requests: int, host: int, others: list[int],
                     log: Any) -> tuple[dict, dict]:
    from media import SyntheticVideoTrack
    from minato_client import Member
    room = await room_on(c.ws_url(host), host, "bench-join")
    rid = room["id"]
    publisher = await Member.join(c.ws_url(host), rid, "publisher")
    try:
        video = SyntheticVideoTrack()
        pub = await publisher.publish(video, codec="video/VP8")
        log(f"join: room {rid} on n{host}, publisher joined through n{host}, publication {pub.id}")
        # Warm-up (not counted): one join on each path, so first-use costs are out of the samples.
        for via in [host, *others]:
            r = await one_join(c.ws_url(via), via, rid, pub.id, f"warm{via}", 20)
            if not r["ok"]:
                raise RuntimeError(f"warm-up join through n{via} failed: {r}")
        plan: list[int] = []
        k_other = 0
        for _ in range(joins):
            plan.append(host)
            plan.append(others[k_other % len(others)])
            k_other += 1
        sem = asyncio.Semaphore(concurrency)
        done = [0]
        t_start = time.monotonic()

        async def run(k: int, via: int) -> dict:
            async with sem:
                r = await one_join(c.ws_url(via), via, rid, pub.id, f"j{k}", 20)
                done[0] += 1
                if done[0] % 50 == 0:
                    log(f"join: {done[0]}/{len(plan)} done ({time.monotonic() - t_start:.0f} s)")
                return r
        recs = list(await asyncio.gather(*(run(k, via) for k, via in enumerate(plan))))
        elapsed = time.monotonic() - t_start

        def summary(rs: list[dict]) -> dict:
            ok = [r for r in rs if r["ok"]]
            return {"attempts": len(rs), "failed": len(rs) - len(ok),
                    "joinResponseMs": stats_ms([r["join"] for r in ok]),
                    "subscribeResponseMs": stats_ms([r["subscribe"] for r in ok]),
                    "firstFrameMs": stats_ms([r["firstFrame"] for r in ok]),
                    "connectMs": stats_ms([r["connect"] for r in ok])}
        joins_out = {
            "room": rid, "host": f"n{host}", "concurrency": concurrency, "elapsedSec": round(elapsed, 1),
            "viaHost": summary([r for r in recs if r["via"] == host]),
            "viaOther": summary([r for r in recs if r["via"] != host]),
            "viaOtherByNode": {f"n{o}": summary([r for r in recs if r["via"] == o]) for o in others},
            "errors": [r.get("error") for r in recs if not r["ok"]][:10],
            "samples": [{k: (round(v * 1000, 2) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in recs],
        }

        # 2. relayed requests, on the same room (the publisher keeps sending meanwhile)
        direct = await Member.join(c.ws_url(host), rid, "direct", keepalive=False)
        relayed = await Member.join(c.ws_url(others[0]), rid, "relayed", keepalive=False)
        try:
            req_out = {"room": rid, "host": f"n{host}", "direct": f"n{host}", "relayedVia": f"n{others[0]}",
                       "requests": requests}
            for method in ("getRoom", "keepalive"):
                samples: dict[str, list[float]] = {"direct": [], "relayed": []}
                for n in range(requests + 20):         # the first 20 of each are warm-up
                    for key, m in (("direct", direct), ("relayed", relayed)):
                        params = {"roomId": rid} if method == "getRoom" else m.keepalive_params()
                        t0 = time.monotonic()
                        await m.conn.call(method, params, timeout=10)
                        if n >= 20:
                            samples[key].append(time.monotonic() - t0)
                d, r = stats_ms(samples["direct"]), stats_ms(samples["relayed"])
                req_out[method] = {"direct": d, "relayed": r,
                                   "differenceMs": {"p50": round(r["p50"] - d["p50"], 2),
                                                    "p99": round(r["p99"] - d["p99"], 2)}}
                log(f"requests: {method} x{requests}: direct p50 {d['p50']} ms p99 {d['p99']} ms, "
                    f"relayed p50 {r['p50']} ms p99 {r['p99']} ms")
        finally:
            for m in (direct, relayed):
                try:
                    await m.leave()
                except Exception:  # noqa: BLE001
                    pass
                await m.close()
        return joins_out, req_out
    finally:
        await publisher.close()


# ---- 3. kill -> decoding again ----------------------------------------------------------------------

RETRY_NAMES = ("serviceUnavailable", "roomNotFound", "roomClosed", "memberNotFound")


async def rejoin(conn: Any, name: str, member_name: str, t_kill: float, marks: dict, tag: str,
                 deadline: float) -> tuple[Any, dict]:
    """findOrCreateRoom {name} and join, as the SDK does: serviceUnavailable (and a room found
    that is already gone) is retried every 200 ms. Returns (Member, join result)."""
    from minato_client import Member, RpcError
    attempts = 0
    while True:
        attempts += 1
        try:
            room = (await conn.call("findOrCreateRoom", {"name": name}, timeout=10))["room"]
            found = time.monotonic() - t_kill
            m = Member(conn, label=member_name)
            start = len(conn.events)
            res = await conn.call("join", {"roomId": room["id"], "name": member_name}, timeout=10)
            m.member, m.room = res["member"], res["room"]
            marks[f"{tag}Found"] = found
            marks[f"{tag}Joined"] = time.monotonic() - t_kill
            marks[f"{tag}Attempts"] = attempts
            marks["newRoom"] = room["id"]
            return m, {"res": res, "eventsFrom": start}
        except RpcError as e:
            if e.name not in RETRY_NAMES or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)    # pacing: the retry period


async def known_to_others(c: Any, node: int, via: list[int], timeout: float = 10) -> None:
    """Waits until the nodes `via` relay requests for ids of `node` again. A node learns which
    nodes are live at its lease renewals (every leaseMs/3), so for a moment after `node`
    registered (/readyz 200) the others still answer a request for its ids with
    `roomNotFound: ... made by node n<node>, which is not in the cluster now` (seen in this
    benchmark: a join through n2 of a room just placed on a restarted n3). Probe: `getRoom` of
    an id of `node` that names no room, until the answer is a plain roomNotFound from `node`."""
    from minato_client import Connection
    from waiting import await_until
    conns = [await Connection(c.ws_url(i), f"probe{i}").connect() for i in via]
    last: list = [None]
    try:
        async def relayed() -> bool:
            for conn in conns:
                r = await conn.call_raw("getRoom", {"roomId": f"n{node}.00000000-0000-0000-0000-000000000000"},
                                        timeout=5)
                last[0] = (conn.url, r)
                if "not in the cluster now" in json.dumps(r):
                    return False
            return True
        await await_until(relayed, timeout, f"n{via} to relay requests for n{node}'s ids", interval=0.05,
                          state=lambda: last[0])
    finally:
        for conn in conns:
            await conn.close()


async def kill_run(c: Any, n: int, pub_via: int, sub_via: int, host: int, timeout: float, log: Any) -> dict:
    from media import SyntheticVideoTrack, VideoSink
    from minato_client import Member
    members: list[Any] = []
    sinks: list[Any] = []
    old_pcs: list[Any] = []
    pub_m: Optional[Member] = None
    sub_m: Optional[Member] = None
    marks: dict = {"run": n, "ok": False}
    try:
        room = await room_on(c.ws_url(pub_via), host, "bench-kill")
        rid, name = room["id"], room["name"]
        marks["room"] = rid
        pub_m = await Member.join(c.ws_url(pub_via), rid, "publisher")
        members.append(pub_m)
        sub_m = await Member.join(c.ws_url(sub_via), rid, "subscriber")
        members.append(sub_m)
        pub = await pub_m.publish(SyntheticVideoTrack(), codec="video/VP8")
        sub = await sub_m.subscribe(pub.id)
        sink0 = VideoSink(sub.track, "before")
        sinks.append(sink0)
        if not await sink0.wait_frames(10, 15):
            raise RuntimeError(f"run {n}: the subscriber decoded {sink0.frames} frames before the kill")
        t_kill = time.monotonic()
        c.kill_node(host)
        deadline = t_kill + timeout

        def closed_pred(e: dict) -> bool:
            return e.get("roomId") == rid and e.get("type") == "closed"

        async def publisher() -> None:
            ev = await pub_m.conn.wait_event(closed_pred, timeout=timeout)
            marks["pubClosed"] = time.monotonic() - t_kill
            marks["pubClosedReason"] = ev.get("reason")
            if pub_m._keepalive_task:
                pub_m._keepalive_task.cancel()
            old_pcs.extend(x for x in (pub_m.send_pc, pub_m.recv_pc) if x is not None)
            m, _ = await rejoin(pub_m.conn, name, "publisher", t_kill, marks, "pub", deadline)
            members.append(m)
            await m.publish(SyntheticVideoTrack(), codec="video/VP8")
            marks["republished"] = time.monotonic() - t_kill

        async def subscriber() -> None:
            ev = await sub_m.conn.wait_event(closed_pred, timeout=timeout)
            marks["subClosed"] = time.monotonic() - t_kill
            marks["subClosedReason"] = ev.get("reason")
            if sub_m._keepalive_task:
                sub_m._keepalive_task.cancel()
            sink0.stop()
            old_pcs.extend(x for x in (sub_m.send_pc, sub_m.recv_pc) if x is not None)
            m, j = await rejoin(sub_m.conn, name, "subscriber", t_kill, marks, "sub", deadline)
            members.append(m)
            new_rid = j["res"]["room"]["id"]
            pubs = [p for p in j["res"]["room"].get("publications", [])
                    if p.get("contentType") == "video" and p.get("publisherId") != m.id]
            if pubs:
                pub_id = pubs[0]["id"]
                marks["streamPublishedInJoin"] = True
            else:
                ev = await m.conn.wait_event(
                    lambda e: e.get("roomId") == new_rid and e.get("type") == "streamPublished"
                    and ((e.get("data") or {}).get("publication") or {}).get("contentType") == "video",
                    timeout=max(1.0, deadline - time.monotonic()), start=j["eventsFrom"])
                pub_id = ev["data"]["publication"]["id"]
            marks["streamPublished"] = time.monotonic() - t_kill
            s = await m.subscribe(pub_id)
            marks["subscribed"] = time.monotonic() - t_kill
            sink = VideoSink(s.track, "after")
            sinks.append(sink)
            while sink.first_frame_at is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)   # polling only; the frame's own time is first_frame_at
            if sink.first_frame_at is None:
                raise RuntimeError(f"run {n}: no frame decoded on the new subscription within {timeout:g} s")
            marks["firstFrame"] = sink.first_frame_at - t_kill
            marks["newHost"] = f"n{host_index(new_rid)}"

        await asyncio.wait_for(asyncio.gather(publisher(), subscriber()), timeout + 5)
        marks["ok"] = True
        log(f"kill run {n}: kill -> closed {marks['subClosed']:.2f}/{marks['pubClosed']:.2f} s (sub/pub), "
            f"-> room found {marks.get('subFound', 0):.2f} s, -> republished {marks['republished']:.2f} s, "
            f"-> first frame {marks['firstFrame']:.2f} s (new room on {marks['newHost']}, "
            f"reason {marks['subClosedReason']})")
    except Exception as e:  # noqa: BLE001 - the run is recorded as failed; the others go on
        marks["error"] = repr(e)
        log(f"kill run {n}: FAILED: {e!r}")
    finally:
        for s in sinks:
            s.stop()
        for m in members:
            m.conn.on_offer = None      # tearing down: no more renegotiation (a leave re-offers)
        for m in members:
            try:
                if m.member and m is not pub_m and m is not sub_m:
                    await m.leave()
            except Exception:  # noqa: BLE001
                pass
        for pc in old_pcs:
            try:
                await asyncio.wait_for(pc.close(), 5)
            except Exception:  # noqa: BLE001
                pass
        for m in reversed(members):
            await m.close()
        if not c.alive(host):
            t0 = time.monotonic()
            await in_thread(c.start_node, host)
            await in_thread(c.wait_ready, host)
            marks["restartReadySec"] = time.monotonic() - t0
            await known_to_others(c, host, [pub_via, sub_via])
            marks["restartKnownSec"] = time.monotonic() - t0
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in marks.items()}


# ---- report -----------------------------------------------------------------------------------------

def markdown(out: dict) -> str:
    meta = out["meta"]
    lines = [f"# Cluster benchmark ({meta['date']}{', --quick' if meta['quick'] else ''})", "",
             f"Redis + 3 Minato nodes, each in its own network namespace on one bridge "
             f"(Tests/interop/cluster.py), aiortc clients in a fourth. Server: `{meta['binary']}` "
             f"({meta['build']} build); `cluster.leaseMs` {meta['leaseMs']}; machine: {meta['nproc']} CPUs"
             f"{' (' + meta['cpu'] + ')' if meta['cpu'] else ''}; commit {meta['commit']}.", ""]
    j = out.get("joins")
    if j:
        lines += ["## Join through the hosting node vs another node", "",
                  f"Room on {j['host']}, one VP8 publisher; {j['viaHost']['attempts']} joins through the host and "
                  f"{j['viaOther']['attempts']} through n2/n3, interleaved, {j['concurrency']} at a time "
                  f"({j['elapsedSec']} s).", "",
                  "| path | joins ok | failed | join response p50 ms | p99 ms | first frame p50 ms | p99 ms |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for label, key in (("through the host", "viaHost"), ("through another node", "viaOther")):
            s = j[key]
            lines.append(f"| {label} | {s['joinResponseMs']['count']} | {s['failed']} | "
                         f"{fmt(s['joinResponseMs']['p50'])} | {fmt(s['joinResponseMs']['p99'])} | "
                         f"{fmt(s['firstFrameMs']['p50'])} | {fmt(s['firstFrameMs']['p99'])} |")
        lines.append("")
    r = out.get("requests")
    if r:
        lines += ["## Relayed requests", "",
                  f"{r['requests']} sequential requests each, member on {r['direct']} (the host) vs member on "
                  f"{r['relayedVia']} (relayed to {r['host']}).", "",
                  "| request | direct p50 ms | direct p99 ms | relayed p50 ms | relayed p99 ms | difference p50 ms | p99 ms |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for method in ("getRoom", "keepalive"):
            x = r[method]
            lines.append(f"| `{method}` | {fmt(x['direct']['p50'], 2)} | {fmt(x['direct']['p99'], 2)} | "
                         f"{fmt(x['relayed']['p50'], 2)} | {fmt(x['relayed']['p99'], 2)} | "
                         f"{fmt(x['differenceMs']['p50'], 2)} | {fmt(x['differenceMs']['p99'], 2)} |")
        lines.append("")
    k = out.get("kill")
    if k:
        lines += ["## Host SIGKILL -> decoding again", "",
                  "Room on n3, publisher's socket on n1, subscriber's on n2; n3 SIGKILLed. Seconds after the kill:", "",
                  "| run | closed (sub) | room found (sub) | republished | streamPublished | subscribed | first frame | new host |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for x in k["runs"]:
            if not x.get("ok"):
                lines.append(f"| {x['run']} | failed: {x.get('error', '?')[:80]} ||||||| ")
                continue
            lines.append(f"| {x['run']} | {x['subClosed']:.2f} | {x['subFound']:.2f} | {x['republished']:.2f} | "
                         f"{x['streamPublished']:.2f} | {x['subscribed']:.2f} | **{x['firstFrame']:.2f}** | "
                         f"{x['newHost']} |")
        odd = sorted({x.get(r) for x in k["runs"] if x.get("ok") for r in ("subClosedReason", "pubClosedReason")}
                     - {"nodeFailed"})
        if odd:
            lines += ["", f"Note: `closed` came with reason(s) {odd}, not only `nodeFailed`."]
        lines += ["", f"kill -> first frame: p50 **{fmt(k['firstFrameSec']['p50'], 2)} s**, "
                      f"max {fmt(k['firstFrameSec']['max'], 2)} s over {k['firstFrameSec']['count']} run{'s' if k['firstFrameSec']['count'] != 1 else ''} "
                      f"({k['failed']} failed).", ""]
    rd = out.get("redis")
    if rd:
        top = ", ".join(f"{c} {v:g}" for c, v in list(rd["perCommandPerSec"].items())[:6])
        lines += ["## Redis at rest", "",
                  f"3 nodes, no room, {rd['windowSec']} s: **{rd['opsPerSec']:g} commands/s** "
                  f"({rd['opsPerSecPerNode']:g} per node). By command (/s): {top or 'none'}.", ""]
    lines += ["## Definitions", "", DEFINITIONS]
    return "\n".join(lines)


def print_block(out: dict) -> None:
    meta = out["meta"]
    print("\n==== bench-cluster results " + "=" * 50)
    print(f"binary  {meta['binary']} ({meta['build']} build, {meta['binarySource']})")
    print(f"machine {meta['nproc']} CPUs {meta['cpu']}; lease cluster.leaseMs={meta['leaseMs']}; "
          f"commit {meta['commit']}; {'--quick' if meta['quick'] else 'full'}")
    j = out.get("joins")
    if j:
        print(f"joins   room on {j['host']}, {j['concurrency']} at a time, {j['elapsedSec']} s")
        for label, key in (("via host ", "viaHost"), ("via other", "viaOther")):
            s = j[key]
            print(f"  {label}: n={s['joinResponseMs']['count']} failed={s['failed']}  join response "
                  f"p50 {fmt(s['joinResponseMs']['p50'])} ms p99 {fmt(s['joinResponseMs']['p99'])} ms  "
                  f"first frame p50 {fmt(s['firstFrameMs']['p50'])} ms p99 {fmt(s['firstFrameMs']['p99'])} ms")
    r = out.get("requests")
    if r:
        for method in ("getRoom", "keepalive"):
            x = r[method]
            print(f"request {method:9s} x{r['requests']}: direct p50 {fmt(x['direct']['p50'], 2)} ms p99 "
                  f"{fmt(x['direct']['p99'], 2)} ms | relayed p50 {fmt(x['relayed']['p50'], 2)} ms p99 "
                  f"{fmt(x['relayed']['p99'], 2)} ms | diff p50 {fmt(x['differenceMs']['p50'], 2)} ms "
                  f"p99 {fmt(x['differenceMs']['p99'], 2)} ms")
    k = out.get("kill")
    if k:
        runs = [x.get("firstFrame") if x.get("ok") else "failed" for x in k["runs"]]
        print(f"kill    kill -> first frame (s): runs {runs}  p50 {fmt(k['firstFrameSec']['p50'], 2)} s")
    rd = out.get("redis")
    if rd:
        print(f"redis   at rest: {rd['opsPerSec']:g} ops/s total, {rd['opsPerSecPerNode']:g} ops/s per node "
              f"({rd['windowSec']} s; {', '.join(f'{c} {v:g}/s' for c, v in rd['perCommandPerSec'].items())})")
    print("=" * 77, flush=True)


# ---- main -------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--joins", type=int, default=200, help="joins per path (default 200)")
    ap.add_argument("--concurrency", type=int, default=8, help="joins at a time (default 8)")
    ap.add_argument("--requests", type=int, default=500, help="sequential requests per member and method")
    ap.add_argument("--kill-runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="20 joins per path, 1 kill run (checks the script)")
    ap.add_argument("--minato-bin", default=None)
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    if args.quick:
        args.joins, args.kill_runs = 20, 1
    if not in_loopback_namespace():
        sys.exit("bench/cluster.py: not in a loopback-only network namespace; use `make bench-cluster` "
                 "(unshare -n sh -c 'ip link set lo up; exec .venv-interop/bin/python bench/cluster.py ...')")
    binary, source = resolve_binary(args.minato_bin)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        sys.exit(f"bench/cluster.py: no server binary at {binary}: build it or set MINATO_BIN")
    os.environ["MINATO_BIN"] = str(binary)      # conftest.minato_binary(), read by Cluster.start_node

    import cluster as harness
    harness.ARTIFACTS = LOG_DIR                 # node and Redis logs here, not over the interop suite's
    from cluster import CLIENT_ADDR, LEASE_MS, Cluster, aioice_addresses

    shown_bin = str(binary.relative_to(REPO)) if binary.is_relative_to(REPO) else str(binary)
    mach = machine()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "binary": shown_bin, "binarySource": source, "build": build_kind(binary), "leaseMs": LEASE_MS,
            "nodes": 3, "quick": args.quick, "joinsPerPath": args.joins, "concurrency": args.concurrency,
            "requests": args.requests, "killRuns": args.kill_runs, "commit": git_commit(), **mach}
    t_begin = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t_begin:6.1f}s] {msg}", flush=True)

    log(f"bench-cluster: server {shown_bin} ({meta['build']} build, from {source}); "
        f"cluster.leaseMs={LEASE_MS}; {mach['nproc']} CPUs {mach['cpu']}")
    if meta["build"] != "release":
        log("bench-cluster: NOT a release build: quote numbers from a release build (swift build -c release)")
    out: dict = {"meta": meta, "definitions": DEFINITIONS}
    nodes = (1, 2, 3)
    c = Cluster(len(nodes))
    c.start()
    try:
        with aioice_addresses([CLIENT_ADDR]):
            c.start_redis()
            for i in nodes:
                c.start_node(i)
            for i in nodes:
                c.wait_ready(i)
            log("cluster up: redis + n1 n2 n3 ready; logs in " + str(LOG_DIR.relative_to(REPO)))

            log("redis: INFO stats twice, 10 s apart, nodes idle")
            out["redis"] = redis_at_rest(c, len(nodes))
            log(f"redis: {out['redis']['opsPerSec']} ops/s")

            async def body() -> None:
                log(f"join: {args.joins} through the host and {args.joins} through n2/n3, "
                    f"{args.concurrency} at a time")
                out["joins"], out["requests"] = await join_bench(c, args.joins, args.concurrency, args.requests,
                                                                 1, [2, 3], log)
                runs = []
                for n in range(1, args.kill_runs + 1):
                    runs.append(await kill_run(c, n, pub_via=1, sub_via=2, host=3, timeout=30, log=log))
                ok = [x["firstFrame"] for x in runs if x.get("ok")]
                s = stats_ms(ok)
                out["kill"] = {"runs": runs, "failed": len(runs) - len(ok),
                               "firstFrameSec": {k: (None if v is None else round(v / 1000, 3)) if k != "count" else v
                                                 for k, v in s.items()}}
            asyncio.run(asyncio.wait_for(body(), 1800))
            dead = [i for i in nodes if not c.alive(i)]
            if dead:
                log(f"warning: node(s) {dead} not running at the end\n{c.describe()}")
    except BaseException:
        print(c.describe(), file=sys.stderr)
        raise
    finally:
        c.stop()
    out["meta"]["totalSec"] = round(time.monotonic() - t_begin, 1)
    dest = Path(args.out_dir)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "cluster.json").write_text(json.dumps(out, indent=1) + "\n")
    (dest / "cluster.md").write_text(markdown(out) + "\n")
    print_block(out)
    log(f"wrote {dest / 'cluster.json'} and {dest / 'cluster.md'}")
    failed = (out["joins"]["viaHost"]["failed"] + out["joins"]["viaOther"]["failed"] + out["kill"]["failed"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
