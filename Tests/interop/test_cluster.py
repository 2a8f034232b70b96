"""Cluster mode (docs/architecture.md "Cluster"): three Minato nodes sharing one Redis, each on a host of its own
(cluster.py), clients (aiortc, HTTP) on a fourth.

(a) `GET /v1/nodes` on every node lists n1, n2, n3, serving, with their advertised URLs.
(b) A room created through n1; A joined through n1 publishes VP8, B (through n2) and C (through
    n3) subscribe and decode >= 90% of A's frames; the server's SDP names only the hosting
    node's address (media goes straight to the host, whichever node the socket is on); every
    member's socket sees the same roomEvent sequence from its join on.
(c) 50 concurrent `findOrCreateRoom` of one new name, spread over the three nodes: one room,
    listed exactly once by `GET /v1/rooms` on every node.
(d) WHIP to a node that does not host the room: 307 to the host; the offer posted there
    publishes, and a subscriber through a node that does not host the room decodes it; WHEP
    through a node that does not host the room is redirected to the host too; Debian's
    simple-whip-client follows the redirect, publishes, and trickles to and DELETEs on the host.
(e) A member reconnecting through another node takes itself over with its reconnectSecret
    (not without it), keeps decoding, and gets the room's events on its new socket.
(f) Large frames (a 250 KB request, a 650 KB answer once escaped) cross the node link; a frame
    over server.maxFrameBytes closes only its own socket (1009).

One cluster for the module (Redis + n1..n3 in their namespaces, logs in
artifacts/interop/cluster-*.log). A failing test prints each process's state and log tail.
"""
from __future__ import annotations

import asyncio
import json
import collections
import urllib.parse
from typing import Any, Optional

import pytest
from aiortc import RTCRtpSender, RTCSessionDescription

from cluster import Cluster, node_addr, request, running_cluster, sdp_candidate_addresses
from media import SineAudioTrack, SyntheticVideoTrack, VideoSink, measure_window
from whip_peers import WhipClient
from minato_client import Connection, Member, create_room, new_peer_connection, run_async, unique_name
from waiting import WaitTimeout, await_until, wait_until

NODES = (1, 2, 3)
NODE_IDS = {f"n{i}": i for i in NODES}


@pytest.fixture(scope="module")
def cluster():
    with running_cluster(len(NODES)) as c:
        yield c
        dead = [i for i in NODES if not c.alive(i)]
        if dead:
            pytest.fail(f"node(s) {['n%d' % i for i in dead]} died while the module ran\n{c.describe()}",
                        pytrace=False)


def run(c: Cluster, coro: Any, timeout: float = 30) -> None:
    """Runs a test body; on failure prints every process's state and log tail (pytest shows it
    with the failure), and fails if a node died during the test."""
    try:
        run_async(coro, timeout=timeout)
    except BaseException:
        print(c.describe())
        raise
    dead = [i for i in NODES if not c.alive(i)]
    if dead:
        print(c.describe())
        raise AssertionError(f"node(s) {['n%d' % i for i in dead]} died during the test")


async def in_thread(fn, *args: Any, **kw: Any) -> Any:
    """Blocking HTTP off the event loop (aiortc's media keeps running meanwhile)."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kw))


async def rooms_on(c: Cluster, i: int) -> list[dict]:
    status, _, body = await in_thread(c.admin, i, "GET", "/v1/rooms")
    assert status == 200 and isinstance(body, dict) and isinstance(body.get("rooms"), list), \
        f"GET /v1/rooms on n{i}: {status} {body}"
    return body["rooms"]


async def host_of(c: Cluster, room_id: str, via: int = 1, timeout: float = 5) -> int:
    """The node hosting the room, from `GET /v1/rooms` (its `nodeId`) on node `via`."""
    seen: list = [None]

    async def listed() -> Optional[int]:
        rooms = await rooms_on(c, via)
        mine = [r for r in rooms if r.get("id") == room_id]
        seen[0] = mine or [(r.get("id"), r.get("nodeId")) for r in rooms]
        if not mine:
            return None
        node = mine[0].get("nodeId")
        assert node in NODE_IDS, f"room {room_id} on n{via}'s GET /v1/rooms has nodeId {node!r}, " \
                                 f"not one of {sorted(NODE_IDS)}: {mine[0]}"
        return NODE_IDS[node]
    return await await_until(listed, timeout, f"room {room_id} in n{via}'s GET /v1/rooms with a nodeId",
                             interval=0.1, state=lambda: seen[0])


def assert_candidates_on(sdp: str, host: int, what: str) -> None:
    cands = sdp_candidate_addresses(sdp)
    assert cands, f"{what}: no a=candidate line in the SDP:\n{sdp}"
    assert set(cands) == {node_addr(host)}, \
        f"{what}: candidates {cands}, expected only the hosting node n{host}'s {node_addr(host)} " \
        "(media goes straight to the host)"


# ---- (a) ------------------------------------------------------------------------------------------

def test_nodes_listed(cluster):
    c = cluster
    want = {f"n{i}": c.node_url(i) for i in NODES}
    for i in NODES:
        last: list = [None]

        def listing_complete() -> bool:
            status, _, body = c.admin(i, "GET", "/v1/nodes")
            last[0] = (status, body)
            if status != 200 or not isinstance(body, dict) or not isinstance(body.get("nodes"), list):
                return False
            nodes = {n.get("id"): n for n in body["nodes"] if isinstance(n, dict)}
            return set(nodes) == set(want) and all(nodes[k].get("state") == "serving" for k in want)
        try:
            wait_until(listing_complete, 5, f"n{i}'s GET /v1/nodes to list n1, n2, n3 serving", interval=0.1)
        except WaitTimeout:
            print(c.describe())
            raise AssertionError(f"GET /v1/nodes on n{i}: expected exactly n1, n2, n3 with state serving; "
                                 f"last answer {last[0]}") from None
        for n in last[0][1]["nodes"]:
            assert n.get("url") == want[n["id"]], f"n{i}'s GET /v1/nodes: {n['id']} has url {n.get('url')!r}, " \
                                                  f"expected its advertise URL {want[n['id']]}: {n}"
            assert "load" in n, f"n{i}'s GET /v1/nodes: {n['id']} has no load: {n}"


# ---- (b) ------------------------------------------------------------------------------------------

def test_member_on_one_node_subscribers_on_others(cluster):
    c = cluster

    async def body() -> None:
        room = await create_room(c.ws_url(1), unique_name("cl-fanout"))
        rid = room["id"]
        host = await host_of(c, rid)
        members: list[Member] = []
        sinks: list[VideoSink] = []
        try:
            a = await Member.join(c.ws_url(1), rid, "A"); members.append(a)
            b = await Member.join(c.ws_url(2), rid, "B"); members.append(b)
            m3 = await Member.join(c.ws_url(3), rid, "C"); members.append(m3)
            joined_at = {m.label: m.room["version"] for m in members}

            video = SyntheticVideoTrack()
            pub = await a.publish(video, codec="video/VP8")
            mimes = [x["mimeType"].lower() for x in pub.publication.get("codecCapabilities", [])]
            assert "video/vp8" in mimes, f"publication codecCapabilities {mimes}"
            assert_candidates_on(a.send_pc.remoteDescription.sdp, host,
                                 f"A (socket on n1, room on n{host}): the publish answer")
            for m, node in ((b, 2), (m3, 3)):
                s = await m.subscribe(pub.id)
                assert_candidates_on(m.recv_pc.remoteDescription.sdp, host,
                                     f"{m.label} (socket on n{node}, room on n{host}): the subscribe offer")
                sinks.append(VideoSink(s.track, f"{m.label}-video"))
            for s in sinks:
                if not await s.wait_frames(3, 10):
                    raise AssertionError(f"{s.name}: {s.frames} frames decoded within 10 s of subscribing; "
                                         f"A sent {video.frames_sent} (room on n{host})")
            result = await measure_window(video, sinks, window=3.0)
            print(f"room on n{host}: decoded/sent {result}")
            for s in sinks:
                decoded, sent = result[s.name]
                assert sent >= 60, f"A sent only {sent} frames in 3 s (is the machine overloaded?)"
                assert decoded >= 0.9 * sent, f"{s.name}: decoded {decoded}/{sent} of A's frames (< 90%)"

            # Every socket has received every event up to the room's version now ...
            now = (await a.conn.call("getRoom", {"roomId": rid}))["room"]["version"]

            def last_versions() -> dict:
                return {m.label: m.conn.events[-1]["version"] if m.conn.events else None for m in members}
            await await_until(lambda: all(v is not None and v >= now for v in last_versions().values()), 5,
                              f"A, B and C to receive every roomEvent up to version {now}", state=last_versions)

            # ... and they are the same events, from each one's join on.
            def seen(m: Member) -> list[tuple[int, str]]:
                return [(e["version"], e["type"]) for e in m.conn.events
                        if e.get("roomId") == rid and joined_at[m.label] <= e["version"] <= now]
            ref = seen(a)
            versions = [v for v, _ in ref]
            assert versions and versions == list(range(versions[0], versions[0] + len(versions))), \
                f"A (on n1) missed or repeated roomEvents since its join: {ref}"
            types = [t for _, t in ref]
            for t in ("memberJoined", "streamPublished"):
                assert t in types, f"A (on n1) saw no {t}: {ref}"
            for m in (b, m3):
                want = [x for x in ref if x[0] >= joined_at[m.label]]
                got = seen(m)
                assert got == want, f"{m.label} saw roomEvents {got} since its join (version " \
                                    f"{joined_at[m.label]}), A saw {want} over the same versions"
            for m in members:
                assert not m.offer_errors, f"{m.label}: answering a server offer failed: {m.offer_errors!r}"
        finally:
            for s in sinks:
                s.stop()
            for m in members:
                await m.close()

    run(c, body(), timeout=30)


# ---- (c) ------------------------------------------------------------------------------------------

def test_find_or_create_one_room_across_nodes(cluster):
    c = cluster
    count = 50

    async def body() -> None:
        name = unique_name("cl-foc")
        conns: list[Connection] = []
        try:
            conns = list(await asyncio.gather(*(Connection(c.ws_url(NODES[k % len(NODES)]), f"foc{k}").connect()
                                                for k in range(count))))
            replies = await asyncio.gather(*(conn.call_raw("findOrCreateRoom", {"name": name}, timeout=20)
                                             for conn in conns))
            errors = [(conns[k].url, r["error"]) for k, r in enumerate(replies) if "error" in r]
            assert not errors, f"{len(errors)} of {count} findOrCreateRoom {{name: {name}}} failed: {errors[:5]}"
            ids = collections.Counter(r["result"]["room"]["id"] for r in replies)
            per_node = collections.defaultdict(set)
            for conn, r in zip(conns, replies):
                per_node[conn.url].add(r["result"]["room"]["id"])
            assert len(ids) == 1, f"{count} concurrent findOrCreateRoom of one name made {len(ids)} rooms: " \
                                  f"{dict(ids)}; ids by node: {dict(per_node)}"
            room_id = next(iter(ids))
            assert all(r["result"]["room"]["name"] == name for r in replies)

            hosts = set()
            for i in NODES:
                last: list = [None]

                async def listed(i: int = i) -> bool:
                    rooms = await rooms_on(c, i)
                    named = [r for r in rooms if r.get("name") == name]
                    last[0] = named
                    assert len(named) <= 1, f"GET /v1/rooms on n{i} lists {name} {len(named)} times: {named}"
                    return len(named) == 1
                await await_until(listed, 5, f"n{i}'s GET /v1/rooms to list {name}", interval=0.1,
                                  state=lambda: last[0])
                (entry,) = last[0]
                assert entry.get("id") == room_id, f"n{i} lists {name} as {entry}, the requests got {room_id}"
                assert entry.get("nodeId") in NODE_IDS, f"n{i} lists {name} with nodeId {entry.get('nodeId')!r}: {entry}"
                hosts.add(entry["nodeId"])
            assert len(hosts) == 1, f"the nodes disagree on where {name} is hosted: {hosts}"
        finally:
            await asyncio.gather(*(conn.close() for conn in conns), return_exceptions=True)

    run(c, body(), timeout=30)


# ---- (d) ------------------------------------------------------------------------------------------

async def whip_offer() -> tuple[Any, SyntheticVideoTrack]:
    """aiortc as a WHIP client (test_whip_whep.py's way): sendonly Opus + VP8 (with RTX), one
    offer with all its candidates."""
    pc = new_peer_connection()
    video = SyntheticVideoTrack()
    pc.addTransceiver(SineAudioTrack(), direction="sendonly")
    tv = pc.addTransceiver(video, direction="sendonly")
    caps = RTCRtpSender.getCapabilities("video").codecs
    tv.setCodecPreferences([x for x in caps if x.mimeType.lower() == "video/vp8"]
                           + [x for x in caps if x.mimeType.lower() == "video/rtx"])
    await pc.setLocalDescription(await pc.createOffer())
    return pc, video


async def whip_client_follows_redirect(c: Cluster, room: str, host: int, other: int) -> None:
    """Debian's simple-whip-client (libsoup) POSTed to a node that does not host the room follows
    the 307, publishes on the host, and its trickle PATCHes and its DELETE reach the host too
    (the session URL is absolute in a cluster: libsoup resolves a relative one against the URL it
    first asked)."""
    w = WhipClient(f"{c.node_url(other)}/whip/{room}?name=swc", name="cluster-whip-client", loopback_veth=False)
    with w:
        await w.wait_connected_async(20)
        session = w.resource_url
        assert session and session.startswith(c.node_url(host) + "/whip/session/"), \
            f"simple-whip-client's session URL {session!r} is not on the host n{host}"

        async def published() -> bool:
            rooms = await rooms_on(c, other)
            mine = [r for r in rooms if r.get("name") == room]
            return bool(mine) and mine[0].get("publicationCount", 0) >= 2
        await await_until(published, 10, f"simple-whip-client's two publications in {room}", interval=0.1)
        assert not w.errors, f"simple-whip-client logged errors (a trickle PATCH that missed the host?): {w.errors}"
    assert w.delete_ok, f"simple-whip-client's DELETE of {w.resource_url} failed:\n{w.log_text()[-1500:]}"


def test_whip_redirects_to_host(cluster):
    c = cluster

    async def body() -> None:
        room = await create_room(c.ws_url(1), unique_name("cl-whip"))
        rid, name = room["id"], room["name"]
        host = await host_of(c, rid)
        other = next(i for i in NODES if i != host)
        pc, video = await whip_offer()
        watcher: Optional[Member] = None
        sink: Optional[VideoSink] = None
        session: Optional[str] = None
        try:
            offer = pc.localDescription.sdp
            first_url = f"{c.node_url(other)}/whip/{name}"
            r = await in_thread(request, "POST", first_url, offer, content_type="application/sdp")
            assert r.status == 307, f"POST /whip/{name} to n{other} (room on n{host}): expected 307, got {r}"
            loc = r.header("location")
            assert loc, f"307 without Location: {r.headers}"
            target = urllib.parse.urljoin(first_url, loc)
            parts = urllib.parse.urlsplit(target)
            assert f"{parts.scheme}://{parts.netloc}" == c.node_url(host) and parts.path == f"/whip/{name}", \
                f"307 Location {loc!r} should be {c.node_url(host)}/whip/{name} (the hosting node n{host})"

            r = await in_thread(request, "POST", target, offer, content_type="application/sdp")
            assert r.status == 201, f"POST {target} (the Location): expected 201, got {r}"
            assert_candidates_on(r.text, host, f"the WHIP answer from n{host}")
            await pc.setRemoteDescription(RTCSessionDescription(sdp=r.text, type="answer"))
            assert r.header("location"), f"201 without a session Location: {r.headers}"
            session = urllib.parse.urljoin(target, r.header("location"))

            # A subscriber through a node that does not host the room decodes the WHIP video.
            watcher = await Member.join(c.ws_url(other), rid, "watcher")
            pubs: list = [None]

            async def video_published() -> Optional[dict]:
                rm = (await watcher.conn.call("getRoom", {"roomId": rid}))["room"]
                pubs[0] = rm["publications"]
                return next((p for p in rm["publications"] if p["contentType"] == "video"
                             and p["publisherId"] != watcher.id), None)
            pub = await await_until(video_published, 5, "the WHIP session's video publication", interval=0.1,
                                    state=lambda: pubs[0])
            # WHEP for that member through the other node is redirected to the host as well.
            publisher = next(m for m in (await watcher.conn.call("getRoom", {"roomId": rid}))["room"]["members"]
                             if m["id"] == pub["publisherId"])
            w = await in_thread(request, "POST", f"{c.node_url(other)}/whep/{name}/{publisher['name']}", offer,
                                content_type="application/sdp")
            assert w.status == 307 and w.header("location") == f"{c.node_url(host)}/whep/{name}/{publisher['name']}", \
                f"POST /whep to n{other} (room on n{host}): {w} {w.headers}"
            sub = await watcher.subscribe(pub["id"])
            assert_candidates_on(watcher.recv_pc.remoteDescription.sdp, host,
                                 f"watcher (socket on n{other}, room on n{host}): the subscribe offer")
            sink = VideoSink(sub.track, "watcher-video")
            assert await sink.wait_frames(30, 15), \
                f"the watcher (through n{other}) decoded {sink.frames} frames of the WHIP publisher " \
                f"(sent {video.frames_sent}, room on n{host})"
            d = await in_thread(request, "DELETE", session)
            assert d.status == 200, f"DELETE {session}: {d}"
            session = None
            await whip_client_follows_redirect(c, name, host, other)
        finally:
            if sink:
                sink.stop()
            if watcher:
                await watcher.close()
            if session:
                await in_thread(request, "DELETE", session)
            await pc.close()

    run(c, body(), timeout=30)


# ---- (e) ------------------------------------------------------------------------------------------

def test_reconnect_takeover_through_another_node(cluster):
    """A member joined through one node reconnects through another (its socket moved, as after a
    network change behind a load balancer): `keepalive {memberId, reconnectSecret}` there takes
    it over on the host, its subscription keeps decoding, and events reach the new socket."""
    c = cluster

    async def body() -> None:
        room = await create_room(c.ws_url(1), unique_name("cl-take"))
        rid = room["id"]
        host = await host_of(c, rid)
        first, second = [i for i in NODES if i != host][:2] if host != 1 else (2, 3)
        pub_m = await Member.join(c.ws_url(host), rid, "P")
        sub_m = await Member.join(c.ws_url(first), rid, "S")
        sink = None
        try:
            video = SyntheticVideoTrack()
            pub = await pub_m.publish(video, codec="video/VP8")
            s = await sub_m.subscribe(pub.id)
            sink = VideoSink(s.track, "S-video")
            assert await sink.wait_frames(10, 10), f"S decoded {sink.frames} frames before moving"
            # Without the secret another socket cannot take the member.
            thief = await Connection(c.ws_url(second), "thief").connect()
            r = await thief.call_raw("keepalive", {"memberId": sub_m.id})
            assert r.get("error", {}).get("data", {}).get("name") == "insufficientPermissions", r
            await thief.close()
            res = await sub_m.take_over(c.ws_url(second), label="S-moved")
            assert res["ttlSec"] > 0
            frames = sink.frames
            assert await sink.wait_frames(frames + 30, 10), \
                f"S stopped decoding after moving from n{first} to n{second} (room on n{host})"
            await pub_m.conn.call("updateMemberMetadata", {"memberId": pub_m.id, "metadata": "moved"})
            ev = await sub_m.conn.wait_event(lambda e: e.get("type") == "memberMetadataUpdated", timeout=5)
            assert ev["data"]["member"]["metadata"] == "moved", ev
        finally:
            if sink:
                sink.stop()
            await pub_m.close()
            await sub_m.close()

    run(c, body(), timeout=30)


# ---- (f) ------------------------------------------------------------------------------------------

def test_large_frames_cross_the_node_link(cluster):
    """The node link carries a client's largest frame and a large answer, each escaped inside the
    link's envelope (quotes double), without the link closing: a 240 KB request through another
    node, and getRoom of a room whose 40 members each carry 4 KB of quotes as metadata (about
    650 KB once escaped for the link). Other connections through the same link keep working, and
    a client's frame over server.maxFrameBytes still closes only its own socket with 1009."""
    c = cluster

    async def body() -> None:
        room = await create_room(c.ws_url(1), unique_name("cl-big"))
        rid = room["id"]
        host = await host_of(c, rid)
        via = next(i for i in NODES if i != host)
        conns: list[Connection] = []
        try:
            for k in range(5):   # rooms.maxMembersPerConnection is 8
                conn = await Connection(c.ws_url(host), f"big{k}").connect()
                conns.append(conn)
                for j in range(8):
                    await conn.call("join", {"roomId": rid, "name": f"m{k}-{j}", "metadata": '"' * 4096})
            probe = await Connection(c.ws_url(via), "probe").connect()
            conns.append(probe)
            pad = '"' * 120_000   # 240 KB as the client's JSON, about 480 KB inside the link's envelope
            text = json.dumps({"jsonrpc": "2.0", "id": "big", "method": "getRoom", "params": {"roomId": rid, "pad": pad}})
            assert len(text) < 256 * 1024, len(text)
            r = await probe.request_text(text, "big", timeout=15)
            assert len(r["result"]["room"]["members"]) == 40, f"getRoom through n{via}: {str(r)[:300]}"
            other = await Connection(c.ws_url(via), "other").connect()
            conns.append(other)
            r = await other.call("getRoom", {"roomId": rid})
            assert len(r["room"]["members"]) == 40
            # Over the client limit: that socket closes with 1009, the link and the others go on.
            big = await Connection(c.ws_url(via), "too-big").connect()
            await big.send_text(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "getRoom",
                                            "params": {"roomId": rid, "pad": "x" * (300 * 1024)}}))
            await asyncio.wait_for(big.closed, 10)
            assert big.ws.close_code == 1009, f"close code {big.ws.close_code}"
            r = await other.call("getRoom", {"roomId": rid})
            assert len(r["room"]["members"]) == 40
        finally:
            for conn in conns:
                await conn.close()

    run(c, body(), timeout=60)
