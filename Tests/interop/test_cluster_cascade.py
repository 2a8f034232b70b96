"""One room across nodes (`cluster.cascade: true`, docs/architecture.md "Rooms across nodes"):
three Minato nodes sharing one Redis, each on a host of its own (cluster.py), aiortc clients on
a fourth.

(a) A room on node h; A joins through h and publishes VP8; three subscribers join through each
    of the two other nodes. Every subscriber decodes >= 90% of A's frames; each subscriber's
    server offer names only its own node's address (it is served where it connects); h sends
    A's stream once to each other node: over a measured window h forwards about 2 packets per
    packet A sends (its two relays), not 6, and each other node forwards about 3 per packet it
    receives (its three subscribers).
(b) The last subscriber on a node leaves and a new one subscribes there within
    `cluster.relayLingerMs`: it decodes (the relayed stream was kept), and the time from its
    subscribe to its first decoded frame is printed.
(c) The publisher unpublishes: every subscriber's subscription ends (publicationUnsubscribed
    events), and the nodes' forwarded-packet counters stop growing.

(d)-(l): a publisher served by another node, loss on a relay, a serving node killed, a relay cut
    off and made again, active speakers, a recording and a plain RTP egress across nodes, the
    room's node killed, a node over its load limit: each test's docstring says what it proves.

One cluster for the module (Redis + n1..n3 in their namespaces, logs in
artifacts/interop/cascade-*.log).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster, node_addr, request, running_cluster, sdp_candidate_addresses
from impair import drop_rate_problem
from media import ScheduledToneTrack, SyntheticVideoTrack, VideoSink, measure_window
from minato_client import Member, create_room, run_async, unique_name
from waiting import await_until
# One body runner for the cluster modules: prints every process's state on failure and fails
# if a node died meanwhile.
from test_cluster import host_of, in_thread, run

NODES = (1, 2, 3)
# media.transportTimeoutSec 4 (default 10): a relay cut off is noticed sooner in (g).
RECORDINGS = Path(__file__).resolve().parents[2] / "artifacts/interop/cascade-recordings"
NODE_ENV = {"MINATO_CLUSTER_CASCADE": "true", "MINATO_CLUSTER_RELAY_LINGER_MS": "5000",
            "MINATO_MEDIA_TRANSPORT_TIMEOUT_SEC": "4",
            "MINATO_RECORDING_DIRECTORY": str(RECORDINGS), "MINATO_RECORDING_MIN_FREE_BYTES": "0"}


@pytest.fixture(scope="module")
def cascade():
    with running_cluster(len(NODES), label="cascade", **NODE_ENV) as c:
        yield c
        dead = [i for i in NODES if not c.alive(i)]
        if dead:
            pytest.fail(f"node(s) {['n%d' % i for i in dead]} died while the module ran\n{c.describe()}",
                        pytrace=False)


RTP_COUNTERS = ("minato_rtp_packets_received_total", "minato_rtp_packets_forwarded_total",
                "minato_relay_rtp_packets_sent_total", "minato_relay_rtp_packets_received_total")


def counters(c: Cluster, i: int, names: tuple[str, ...] = RTP_COUNTERS) -> dict[str, float]:
    """Node i's counters `names` (by default RTP packets received from publishers and forwarded
    to subscribers); a counter not exported yet is 0."""
    r = request("GET", c.node_url(i) + "/metrics", bearer=c.admin_secret)
    assert r.status == 200, f"n{i} /metrics: {r.status} {r.text[:200]}"
    out = {name: 0.0 for name in names}
    for line in r.text.splitlines():
        for name in names:
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    return out


async def packet_counts(c: Cluster) -> dict[int, dict[str, float]]:
    return {i: await in_thread(counters, c, i) for i in NODES}


def elsewhere(h: int) -> int:
    """The first node that is not `h` (where a test serves a member that is not the room's node's)."""
    return [i for i in NODES if i != h][0]


class Call:
    """A room made through n1 (`rid`, on node `h`) with A publishing VP8 (`video`, `pub`), and
    the subscribers a test adds (`subscriber`); `members` and `sinks` are closed on exit of
    `publishing_room`."""

    def __init__(self, c: Cluster, rid: str, h: int) -> None:
        self.c, self.rid, self.h = c, rid, h
        self.members: list[Member] = []
        self.sinks: list[VideoSink] = []
        self.a: Any = None
        self.video: Any = None
        self.pub: Any = None

    async def join(self, node: int, label: str) -> Member:
        m = await Member.join(self.c.ws_url(node), self.rid, label)
        self.members.append(m)
        return m

    async def subscriber(self, node: int, label: str) -> tuple[Member, VideoSink]:
        """A member joined through `node`, subscribed to A's publication, with a sink."""
        m = await self.join(node, label)
        s = await m.subscribe(self.pub.id)
        sink = VideoSink(s.track, label)
        self.sinks.append(sink)
        return m, sink

    async def decoding(self, frames: int = 3, timeout: float = 10) -> None:
        for s in self.sinks:
            if not await s.wait_frames(frames, timeout):
                raise AssertionError(f"{s.name}: {s.frames} frames decoded within {timeout} s of subscribing; "
                                     f"A sent {self.video.frames_sent} (room on n{self.h})")

    async def leave(self, m: Member) -> None:
        for s in [s for s in self.sinks if s.name == m.label]:
            s.stop()
            self.sinks.remove(s)
        await m.close()
        self.members.remove(m)


@contextlib.asynccontextmanager
async def publishing_room(c: Cluster, prefix: str, publisher_node: Any = None):
    """`Call` in a new room; A joins through `publisher_node(h)` (default: the room's node h)."""
    room = await create_room(c.ws_url(1), unique_name(prefix))
    call = Call(c, room["id"], await host_of(c, room["id"]))
    try:
        call.a = await call.join(publisher_node(call.h) if publisher_node else call.h, "A")
        call.video = SyntheticVideoTrack()
        call.pub = await call.a.publish(call.video, codec="video/VP8")
        yield call
    finally:
        for s in call.sinks:
            s.stop()
        for m in call.members:
            with contextlib.suppress(Exception):
                await m.close()


def test_subscribers_served_where_they_connect_one_relay_stream_per_node(cascade):
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade") as call:
            rid, h, a, video, pub, sinks, members = call.rid, call.h, call.a, call.video, call.pub, call.sinks, call.members
            others = [i for i in NODES if i != h]
            by_node: dict[int, list[Member]] = {}
            for node in others:
                for k in range(3):
                    m, _ = await call.subscriber(node, f"S{node}{k}")
                    by_node.setdefault(node, []).append(m)
                    cands = sdp_candidate_addresses(m.recv_pc.remoteDescription.sdp)
                    assert set(cands) == {node_addr(node)}, \
                        f"{m.label} (socket on n{node}, room on n{h}): the server offer's candidates are {cands}, " \
                        f"expected only n{node}'s {node_addr(node)} (served where it connects)"
            await call.decoding()

            before = await packet_counts(c)
            sent_before = video.frames_sent
            result = await measure_window(video, sinks, window=3.0)
            after = await packet_counts(c)
            print(f"room on n{h}: decoded/sent {result}")
            for s in sinks:
                decoded, sent = result[s.name]
                assert sent >= 45, f"A sent only {sent} frames in 3 s (is the machine overloaded?)"
                assert decoded >= 0.9 * sent, f"{s.name}: decoded {decoded}/{sent} of A's frames (< 90%)"
            delta = {i: {k: after[i].get(k, 0) - before[i].get(k, 0) for k in after[i]} for i in NODES}
            print(f"packets over the window (A sent {video.frames_sent - sent_before} frames): {delta}")
            rx_h = delta[h]["minato_rtp_packets_received_total"]
            fw_h = delta[h]["minato_rtp_packets_forwarded_total"]
            assert rx_h >= 45, f"n{h} received {rx_h} RTP packets from A in 3 s"
            assert 1.7 * rx_h <= fw_h <= 2.4 * rx_h, \
                f"n{h} (the room's node, A's publisher) forwarded {fw_h} packets for {rx_h} received: " \
                f"expected about 2x (one stream to each other node), not 6x (one per subscriber)"
            for node in others:
                rx, fw = delta[node]["minato_rtp_packets_received_total"], delta[node]["minato_rtp_packets_forwarded_total"]
                assert 0.8 * rx_h <= rx <= 1.25 * rx_h, \
                    f"n{node} received {rx} packets over the relay, n{h} received {rx_h} from A: expected one stream"
                assert 2.6 * rx <= fw <= 3.5 * rx, \
                    f"n{node} forwarded {fw} packets for {rx} received: expected about 3x (its three subscribers)"
            # The relay counters tell the same: n{h} sends to other nodes only over relays (every
            # subscriber is elsewhere), and what each other node receives comes over its relay.
            relay_out = delta[h]["minato_relay_rtp_packets_sent_total"]
            assert relay_out == fw_h, f"n{h}: {relay_out} packets sent over relays, {fw_h} forwarded in all"
            for node in others:
                relay_in, rx = delta[node]["minato_relay_rtp_packets_received_total"], delta[node]["minato_rtp_packets_received_total"]
                assert relay_in == rx and delta[node]["minato_relay_rtp_packets_sent_total"] == 0, \
                    f"n{node}: {relay_in} packets received over relays of {rx} in all; " \
                    f"{delta[node]['minato_relay_rtp_packets_sent_total']} sent over relays (expected 0)"

            # The admin API on the room's node: its nodes, who serves whom, the two relays.
            status, _, stats = await in_thread(c.admin, h, "GET", f"/v1/rooms/{rid}/stats")
            assert status == 200, f"GET /v1/rooms/{rid}/stats on n{h}: {status} {stats}"
            print(f"admin room stats: nodes {stats.get('nodes')}, relays {stats.get('relays')}")
            assert stats.get("nodes") == sorted(f"n{i}" for i in NODES), f"room stats nodes: {stats.get('nodes')}"
            served = {m["memberId"]: m["nodeId"] for m in stats.get("memberNodes", [])}
            want = {a.id: f"n{h}", **{m.id: f"n{node}" for node, ms in by_node.items() for m in ms}}
            assert served == want, f"room stats memberNodes {served}, expected {want}"
            relays = stats.get("relays", [])
            assert sorted(tuple(sorted(r["nodes"])) for r in relays) == \
                sorted(tuple(sorted((f"n{h}", f"n{o}"))) for o in others), f"room stats relays: {relays}"
            for r in relays:
                assert r["state"] == "open", f"relay {r['nodes']} is {r['state']}"
                out = [d for d in r["directions"] if d["from"] == f"n{h}"]
                assert len(out) == 1 and out[0]["streams"] == 1 and out[0].get("packetsSent", 0) > 0, \
                    f"relay {r['nodes']}: expected one stream from n{h} with packets sent: {r['directions']}"
            subs_stats = {x["subscriptionId"] for x in stats.get("subscriptionStats", [])}
            assert len(subs_stats) == 6, f"subscriptionStats lists {len(subs_stats)} subscriptions (served on other nodes), not 6"

            # (b) Every subscriber on one node leaves; a new one there within relayLingerMs decodes.
            node = others[0]
            for m in by_node[node]:
                await call.leave(m)
            await asyncio.sleep(1.0)
            t0 = time.monotonic()
            late, sink = await call.subscriber(node, "late")
            if not await sink.wait_frames(1, 10):
                raise AssertionError(f"late subscriber on n{node}: no frame decoded within 10 s")
            print(f"late subscriber on n{node}: first decoded frame {sink.first_frame_at - t0:.3f} s after subscribe")

            # (c) Unpublish: every subscription ends, and no node forwards anything more.
            await a.unpublish(pub)
            remaining = [m for m in members if m is not a]

            def ended(m: Member) -> bool:
                return any(e.get("type") == "publicationUnsubscribed" and
                           (e.get("data") or {}).get("subscription", {}).get("publicationId") == pub.id
                           and (e.get("data") or {}).get("subscription", {}).get("subscriberId") == m.id
                           for e in a.conn.events)
            await await_until(lambda: all(ended(m) for m in remaining), 5,
                              "publicationUnsubscribed for every subscriber after the unpublish")
            await asyncio.sleep(0.5)
            quiet_before = await packet_counts(c)
            await asyncio.sleep(1.5)
            quiet_after = await packet_counts(c)
            for i in NODES:
                grew = quiet_after[i]["minato_rtp_packets_forwarded_total"] - quiet_before[i]["minato_rtp_packets_forwarded_total"]
                assert grew == 0, f"n{i} forwarded {grew} packets in the 1.5 s after A unpublished"
            # With no stream left to carry, the room's relays are closed (the room itself stays).
            status, _, stats = await in_thread(c.admin, h, "GET", f"/v1/rooms/{rid}/stats")
            assert status == 200 and stats.get("relays") == [], f"relays after the unpublish: {status} {stats.get('relays')}"

    run(c, body(), timeout=90)


def test_publisher_served_by_another_node(cascade):
    """(d) A joins through a node that is not the room's and publishes there: subscribers
    through the room's node and through the third node decode >= 90% of its frames."""
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade-pub", publisher_node=elsewhere) as call:
            h, o1 = call.h, elsewhere(call.h)
            o2 = [i for i in NODES if i not in (h, o1)][0]
            cands = sdp_candidate_addresses(call.a.send_pc.remoteDescription.sdp)
            assert set(cands) == {node_addr(o1)}, \
                f"A (socket on n{o1}, room on n{h}): the publish answer's candidates are {cands}, expected n{o1}'s"
            for node in (h, o2):
                await call.subscriber(node, f"S{node}")
            await call.decoding()
            result = await measure_window(call.video, call.sinks, window=3.0)
            print(f"A on n{o1}, room on n{h}: decoded/sent {result}")
            for s in call.sinks:
                decoded, sent = result[s.name]
                assert sent >= 45, f"A sent only {sent} frames in 3 s"
                assert decoded >= 0.9 * sent, f"{s.name}: decoded {decoded}/{sent} of A's frames (< 90%)"

    run(c, body(), timeout=60)


def test_loss_on_one_relay_is_repaired_per_hop(cascade):
    """(e) 2% random loss each way between the room's node and another (nftables on both ends
    of that link): the three subscribers on the far node decode >= 99% of A's frames (NACK/RTX
    on the relay hop)."""
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade-loss") as call:
            h = call.h
            far = [i for i in NODES if i != h][-1]
            for k in range(3):
                await call.subscriber(far, f"L{k}")
            await call.decoding()
            repair = ("minato_rtcp_nacks_sent_total", "minato_rtp_packets_retransmitted_total",
                      "minato_relay_rtp_packets_missing_total", "minato_relay_rtp_packets_retransmitted_total",
                      "minato_relay_rtp_packets_received_total")
            before = {i: await in_thread(counters, c, i, repair) for i in (h, far)}
            c.lossy_link(h, far, 2.0)
            try:
                await asyncio.sleep(1.0)
                result = await measure_window(call.video, call.sinks, window=8.0)
                counted = {i: c.loss_counters(i) for i in (h, far)}
            finally:
                c.heal_link(h, far)
            after = {i: await in_thread(counters, c, i, repair) for i in (h, far)}
            nacks = after[far][repair[0]] - before[far][repair[0]]
            resent = after[h][repair[1]] - before[h][repair[1]]
            print(f"2% loss n{h}<->n{far}: decoded/sent {result}; nft {counted}; "
                  f"NACKs sent by n{far} {nacks:.0f}, packets resent by n{h} {resent:.0f}")
            assert nacks > 0 and resent > 0, \
                f"the relay hop repaired nothing: n{far} sent {nacks} NACKs, n{h} resent {resent} packets"
            # The relay metrics count that hop's loss and repair apart from the clients'.
            missing = after[far][repair[2]] - before[far][repair[2]]
            relay_resent = after[h][repair[3]] - before[h][repair[3]]
            relayed = after[far][repair[4]] - before[far][repair[4]]
            print(f"relay metrics: n{far} found {missing:.0f} of {relayed:.0f} relayed packets missing, "
                  f"n{h} resent {relay_resent:.0f} over the relay")
            assert relay_resent == resent, f"n{h} resent {resent} packets, {relay_resent} of them over relays"
            assert 0 < missing <= 0.06 * relayed, \
                f"n{far}: {missing} packets missing of {relayed} relayed with 2% loss on the relay"
            both = {k: sum(x[k] for x in counted.values()) for k in ("seen", "dropped")}
            problem = drop_rate_problem(both, 0.02)
            assert not problem, f"the loss rules n{h}<->n{far}: {problem} ({counted})"
            for s in call.sinks:
                decoded, sent = result[s.name]
                assert sent >= 120, f"A sent only {sent} frames in 8 s"
                assert decoded >= 0.99 * sent, f"{s.name}: decoded {decoded}/{sent} of A's frames (< 99%) " \
                                               f"with 2% loss on the relay n{h}<->n{far}"

    run(c, body(), timeout=60)


def test_node_serving_part_of_a_room_killed(cascade):
    """(f) SIGKILL a node that serves subscribers of a room homed elsewhere: the subscriber on
    the third node keeps decoding with no gap over 1 s, and the room sees the killed node's
    member leave with reason nodeFailed. The node is started again afterwards."""
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade-kill") as call:
            h, a = call.h, call.a
            keep, doomed = [i for i in NODES if i != h]
            _, watch = await call.subscriber(keep, "survivor")
            lost, _ = await call.subscriber(doomed, "lost")
            await call.decoding()
            gaps: list[float] = []
            last = [watch.frames, time.monotonic()]

            async def watch_gaps() -> None:
                while True:
                    await asyncio.sleep(0.05)
                    now = time.monotonic()
                    if watch.frames != last[0]:
                        gaps.append(now - last[1])
                        last[0], last[1] = watch.frames, now
            watcher = asyncio.ensure_future(watch_gaps())
            try:
                killed_at = time.monotonic()
                await in_thread(c.kill_node, doomed)

                def left() -> bool:
                    return any(e.get("type") == "memberLeft" and e.get("reason") == "nodeFailed"
                               and (e.get("data") or {}).get("member", {}).get("id") == lost.id for e in a.conn.events)
                await await_until(left, 10, f"memberLeft (nodeFailed) for the member served by killed n{doomed}")
                print(f"memberLeft nodeFailed {time.monotonic() - killed_at:.2f} s after SIGKILL of n{doomed}")
                frames_then = watch.frames
                await asyncio.sleep(2.0)
            finally:
                watcher.cancel()
            assert watch.frames >= frames_then + 40, \
                f"survivor on n{keep}: {watch.frames - frames_then} frames in the 2 s after n{doomed}'s members left"
            worst = max(gaps) if gaps else None
            print(f"survivor on n{keep}: longest gap between decoded frames {worst:.3f} s")
            assert worst is not None and worst < 1.0, f"survivor on n{keep}: a {worst} s gap in decoded frames"

    try:
        try:
            run_async(body(), timeout=60)
        except BaseException:
            print(c.describe())
            raise
    finally:
        for i in NODES:
            if not c.alive(i):
                c.start_node(i, **NODE_ENV)
                c.wait_ready(i)


def test_relay_cut_off_is_made_again(cascade):
    """(g) All UDP between the room's node and the node serving a subscriber is dropped until
    the relay's transports time out (media.transportTimeoutSec, 4 s here) and the room's node
    counts the relay failed; then the link heals: the subscription is attached to a new relay
    (backoff from 1 s) and the subscriber decodes again. The time from the heal to 10 more
    decoded frames is printed."""
    c = cascade
    names = ("minato_cluster_relay_failures_total", "minato_cluster_relays_created_total",
             "minato_cluster_relay_reattached_total")

    async def body() -> None:
        async with publishing_room(c, "cascade-cut") as call:
            h = call.h
            far = [i for i in NODES if i != h][0]
            _, sink = await call.subscriber(far, "S")
            await call.decoding()
            before = await in_thread(counters, c, h, names)
            c.lossy_link(h, far, 100.0)
            try:
                await asyncio.sleep(1.0)
                frozen = sink.frames
                deadline = time.monotonic() + 15
                while True:
                    now = await in_thread(counters, c, h, names)
                    if now[names[0]] > before[names[0]]:
                        break
                    assert time.monotonic() < deadline, f"n{h} did not count the cut relay failed within 15 s: {now}"
                    await asyncio.sleep(0.25)
                assert sink.frames <= frozen + 2, f"S decoded {sink.frames - frozen} frames while the relay was cut"
            finally:
                c.heal_link(h, far)
            healed = time.monotonic()
            resumed = sink.frames
            if not await sink.wait_frames(resumed + 10, 30):
                raise AssertionError(f"S decoded {sink.frames - resumed} frames in 30 s after the link healed")
            after = await in_thread(counters, c, h, names)
            print(f"relay cut n{h}<->n{far}: decoding again {time.monotonic() - healed:.2f} s after the heal; "
                  f"counters before {before}, after {after}")
            assert after[names[1]] > before[names[1]], f"no new relay was made: {before} -> {after}"
            assert after[names[2]] > before[names[2]], f"no subscription was reattached: {before} -> {after}"

    run(c, body(), timeout=90)


# (j): B speaks from VOICE[0] to VOICE[1] s after t0. A speaker is listed after about 200 ms of
# voice and dropped after 300 ms of silence, and events come at most every 300 ms
# (docs/protocol.md "Active speakers"); on one node test_speakers.py holds the list to 500 ms.
# Here the audio crosses a relay first. Measured (6 runs): listed 0.19-0.21 s after the voice
# began, the list empty 0.31-0.33 s after it ended.
VOICE = (1.0, 3.0)
SPEAKER_BOUND = 1.0


def test_speaker_served_by_another_node_is_heard(cascade):
    """(j) Active speakers across nodes: B joins through a node that is not the room's and
    publishes speech-like audio (aiortc puts the RFC 6464 level in each packet); nobody
    subscribes to it. An observer joined through the room's node gets `activeSpeakersChanged`
    listing B's publication within SPEAKER_BOUND of B's voice starting and an empty list within
    SPEAKER_BOUND of it stopping: B's audio is relayed to the room's node for its speaker
    detector, whoever subscribes."""
    c = cascade

    async def body() -> None:
        room = await create_room(c.ws_url(1), unique_name("cascade-speaker"))
        rid = room["id"]
        h = await host_of(c, rid)
        o = [i for i in NODES if i != h][0]
        members: list[Member] = []
        try:
            observer = await Member.join(c.ws_url(h), rid, "observer")
            members.append(observer)
            b = await Member.join(c.ws_url(o), rid, "B")
            members.append(b)
            clock: dict = {"t0": None}
            pub = await b.publish(ScheduledToneTrack(clock, [VOICE]))
            await await_until(lambda: b.send_pc and b.send_pc.connectionState == "connected", 15,
                              "B's send connection to be connected")
            status, _, stats = await in_thread(c.admin, h, "GET", f"/v1/rooms/{rid}/stats")
            assert status == 200, f"GET /v1/rooms/{rid}/stats on n{h}: {status} {stats}"
            served = {m["memberId"]: m["nodeId"] for m in stats.get("memberNodes", [])}
            assert served.get(b.id) == f"n{o}", f"B joined through n{o} but is served by {served.get(b.id)}"
            t0 = time.monotonic()
            clock["t0"] = t0

            def listed(e: dict) -> list[str]:
                return [s["publicationId"] for s in e["data"]["speakers"]]

            def first(pred: Any) -> Any:
                return next((e for e in observer.conn.speaker_events if e["receivedAt"] >= t0 and pred(e)), None)
            await await_until(lambda: first(lambda e: pub.id in listed(e)), VOICE[0] + SPEAKER_BOUND + 2,
                              "activeSpeakersChanged listing B (served by another node)",
                              state=lambda: observer.conn.speaker_events[-3:])
            on = first(lambda e: pub.id in listed(e))
            speaker = next(s for s in on["data"]["speakers"] if s["publicationId"] == pub.id)
            assert speaker["memberId"] == b.id, f"B's publication listed with member {speaker['memberId']}, not B's {b.id}"
            await await_until(lambda: first(lambda e: e["receivedAt"] > on["receivedAt"] and not listed(e)),
                              VOICE[1] - VOICE[0] + SPEAKER_BOUND + 2, "an empty speaker list after B stopped")
            off = first(lambda e: e["receivedAt"] > on["receivedAt"] and not listed(e))
            listed_after = on["receivedAt"] - (t0 + VOICE[0])
            empty_after = off["receivedAt"] - (t0 + VOICE[1])
            print(f"B served by n{o}, room on n{h}: listed {listed_after:.2f} s after its voice began, "
                  f"empty list {empty_after:.2f} s after it ended (level {speaker['level']})")
            assert listed_after <= SPEAKER_BOUND, f"B listed {listed_after:.2f} s after its voice began"
            assert -0.1 <= empty_after <= SPEAKER_BOUND, f"the list emptied {empty_after:.2f} s after B's voice ended"
        finally:
            for m in members:
                with contextlib.suppress(Exception):
                    await m.close()

    run(c, body(), timeout=60)


@pytest.mark.skipif(shutil.which("gst-launch-1.0") is None or shutil.which("ffprobe") is None,
                    reason="gst-launch-1.0 and ffprobe are installed by the test command")
def test_recording_of_a_publisher_served_by_another_node(cascade):
    """(k) A publisher served by a node that is not the room's is recorded on the room's node
    (where the recorder runs) from its stream relayed there, though nobody subscribes: the
    admin API starts it, the relay from the publisher's node to the room's node carries one
    stream, and the finished file holds at least 80% of the frames A sent in the 3 s after it
    started (those before the stop request; the file may hold a few more)."""
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade-rec", publisher_node=elsewhere) as call:
            h, o = call.h, elsewhere(call.h)
            await await_until(lambda: call.a.send_pc and call.a.send_pc.connectionState == "connected", 15,
                              "A's send connection to be connected")
            status, _, body = await in_thread(c.admin, h, "POST", f"/v1/rooms/{call.rid}/recordings", {"memberId": call.a.id})
            assert status == 201, f"POST recordings on n{h} for A served by n{o}: {status} {body}"
            rec = body["recording"]
            sent_at_start = call.video.frames_sent
            await asyncio.sleep(3.0)
            sent = call.video.frames_sent - sent_at_start
            status, _, stats = await in_thread(c.admin, h, "GET", f"/v1/rooms/{call.rid}/stats")
            relays = [r for r in stats.get("relays", []) if sorted(r["nodes"]) == sorted((f"n{h}", f"n{o}"))]
            out = [d for r in relays for d in r["directions"] if d["from"] == f"n{o}"]
            assert len(out) == 1 and out[0]["streams"] == 1, f"relay n{o}->n{h} while recording: {relays}"
            status, _, body = await in_thread(c.admin, h, "DELETE", f"/v1/rooms/{call.rid}/recordings/{rec['id']}", timeout=30)
            assert status == 200 and body["recording"]["state"] == "stopped", f"stop: {status} {body}"
            out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v",
                                  "-show_entries", "stream=codec_name,nb_read_frames", "-of", "json", rec["file"]],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, f"ffprobe failed on {rec['file']}: {out.stderr}"
            streams = json.loads(out.stdout)["streams"]
            frames = int(streams[0]["nb_read_frames"]) if streams else 0
            print(f"recording on n{h} of A served by n{o}: {frames} frames in the file, A sent {sent} in its first 3 s")
            assert streams and streams[0]["codec_name"] == "vp8", f"the file's video: {streams}"
            assert frames >= 0.8 * sent, f"the file holds {frames} frames of the {sent} A sent while it was recorded"

    try:
        run(c, body(), timeout=60)
    finally:
        shutil.rmtree(RECORDINGS, ignore_errors=True)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is installed by the test command")
def test_plain_egress_of_a_publisher_served_by_another_node(cascade):
    """(l) Plain RTP egress of a publication served by another node: the room's node sends it
    from the stream relayed there to FFmpeg listening on its loopback (in the room's node's
    namespace, where media.plain.allowedAddresses lets it go), which decodes 60 frames."""
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade-plain", publisher_node=elsewhere) as call:
            h, o = call.h, elsewhere(call.h)
            port = 5004
            sdp = (f"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                   f"m=video {port} RTP/AVP 96\r\na=rtpmap:96 VP8/90000\r\na=rtcp:{port + 1}\r\na=recvonly\r\n")
            ffmpeg = await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", c.node_ns[h], "ffmpeg", "-nostdin", "-v", "error",
                "-protocol_whitelist", "file,udp,rtp,pipe", "-f", "sdp", "-i", "pipe:0",
                "-frames:v", "60", "-f", "null", "-", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            try:
                assert ffmpeg.stdin is not None
                ffmpeg.stdin.write(sdp.encode())
                ffmpeg.stdin.close()
                # FFmpeg listens once the SDP is read; a stream sent before would miss its keyframe
                # only until the next one the server asks for.
                await asyncio.sleep(0.5)
                status, _, body = await in_thread(c.admin, h, "POST", f"/v1/rooms/{call.rid}/plain-transports",
                                                  {"publicationId": call.pub.id, "address": "127.0.0.1",
                                                   "rtpPort": port, "payloadType": 96})
                assert status == 201, f"plain egress on n{h} of A served by n{o}: {status} {body}"
                _, err = await asyncio.wait_for(ffmpeg.communicate(), 20)
            finally:
                if ffmpeg.returncode is None:
                    ffmpeg.kill()
                    await ffmpeg.wait()
            print(f"plain egress on n{h} of A served by n{o}: FFmpeg exit {ffmpeg.returncode}, "
                  f"stderr {err.decode(errors='replace').strip()[:300]!r}")
            assert ffmpeg.returncode == 0, f"FFmpeg: {err.decode(errors='replace')[:500]}"
            egress = body["plainTransport"]
            status, _, _ = await in_thread(c.admin, h, "DELETE", f"/v1/rooms/{call.rid}/plain-transports/{egress['id']}")
            assert status == 200

    run(c, body(), timeout=60)


def test_room_node_killed_closes_the_room_and_frees_its_media_elsewhere(cascade):
    """(i) SIGKILL the room's node while two other nodes serve its subscribers: each subscriber's
    client gets the room `closed` with reason nodeFailed, and each serving node frees what it
    held for the room (its `minato_transports` gauge back to at most what it was before the
    room's members came). The node is started again afterwards."""
    c = cascade
    gauge = ("minato_transports",)

    async def body() -> None:
        async with publishing_room(c, "cascade-home") as call:
            h = call.h
            others = [i for i in NODES if i != h]
            # The previous test's members may still be leaving: the baseline is taken once each
            # serving node's count held still for 1 s.
            last: dict[int, float] = {}

            async def settled() -> bool:
                now = {i: (await in_thread(counters, c, i, gauge))[gauge[0]] for i in others}
                same = now == last
                last.clear()
                last.update(now)
                return same
            await await_until(settled, 15, "the serving nodes' transport counts to hold still", interval=1.0,
                              state=lambda: dict(last))
            baseline = dict(last)
            subs = {i: (await call.subscriber(i, f"S{i}"))[0] for i in others}
            await call.decoding()
            held = {i: (await in_thread(counters, c, i, gauge))[gauge[0]] for i in others}
            for i in others:
                assert held[i] >= baseline[i] + 2, f"n{i} holds {held[i]} transports (before the room's members: {baseline[i]})"
            killed_at = time.monotonic()
            await in_thread(c.kill_node, h)
            for i, m in subs.items():
                ev = await m.conn.wait_event(lambda e: e.get("roomId") == call.rid and e.get("type") == "closed", timeout=15)
                assert ev.get("reason") == "nodeFailed", f"S{i} (served by n{i}): closed event {ev}"
            print(f"room's node n{h} killed: closed nodeFailed at every subscriber {time.monotonic() - killed_at:.2f} s later")

            async def freed() -> bool:
                now = {i: (await in_thread(counters, c, i, gauge))[gauge[0]] for i in others}
                return all(now[i] <= baseline[i] for i in others)
            await await_until(freed, 10, f"the serving nodes to free the room's transports (before {baseline}, held {held})")
            print(f"transports on the serving nodes: before {baseline}, with the room {held}, freed "
                  f"{time.monotonic() - killed_at:.2f} s after the kill")

    try:
        run_async(body(), timeout=60)
    finally:
        for i in NODES:
            if not c.alive(i):
                c.start_node(i, **NODE_ENV)
                c.wait_ready(i)


async def nodes_seen(c: Cluster, h: int, far: int, want: Any) -> dict[str, Any]:
    """Waits until n`far`'s record (GET /v1/nodes on n`h`) satisfies `want` and n`h` renewed
    its lease (reading the live nodes again) at least 0.2 s after n`far` wrote that record:
    then n`h` places members by it. Returns n`far`'s record."""
    seen: dict[str, Any] = {}
    since: list[float] = []   # when n`far` first wrote a record that satisfies `want`

    def ok() -> bool:
        status, _, body = c.admin(h, "GET", "/v1/nodes")
        assert status == 200, f"GET /v1/nodes on n{h}: {status} {body}"
        now = time.time() * 1000
        rec = {n["id"]: n for n in body["nodes"]}
        if f"n{far}" not in rec or f"n{h}" not in rec:
            return False
        seen.clear()
        seen.update(rec[f"n{far}"])
        if not since and want(seen):
            since.append(now - seen["leaseAgeMs"])
        return bool(since) and now - rec[f"n{h}"]["leaseAgeMs"] > since[0] + 200
    await await_until(ok, 10, f"n{h} to see a record of n{far} that satisfies the test", interval=0.1,
                      state=lambda: dict(seen))
    return seen


def test_node_over_its_load_limit_is_given_no_members(cascade):
    """(h) A node over its load limit (cluster.loadLimitPercent of its media.maxTransports, as
    it judges at each lease renewal) is not given members of rooms homed elsewhere: they are
    served by the room's node instead, and decode. The far node is restarted with
    media.maxTransports 2 (loadLimitPercent 80: under the limit below 1.6 transports; its CPU
    limit stays 80% of its cores): its first subscriber is served there (it is at 0), which
    with the relay makes 2 transports; the second subscriber through it is served by the
    room's node. The last test of the module: the far node keeps that configuration."""
    c = cascade

    async def body() -> None:
        async with publishing_room(c, "cascade-load") as call:
            h = call.h
            far = [i for i in NODES if i != h][-1]
            await in_thread(c.kill_node, far)
            await in_thread(c.start_node, far, **NODE_ENV, MINATO_MEDIA_MAX_TRANSPORTS="2")
            await in_thread(c.wait_ready, far)
            await nodes_seen(c, h, far, lambda n: n["load"]["underLimit"] and n["load"]["transports"] == 0)
            first, _ = await call.subscriber(far, "first")
            full = await nodes_seen(c, h, far, lambda n: not n["load"]["underLimit"])
            second, _ = await call.subscriber(far, "second")
            await call.decoding()
            status, _, stats = await in_thread(c.admin, h, "GET", f"/v1/rooms/{call.rid}/stats")
            assert status == 200, f"GET /v1/rooms/{call.rid}/stats on n{h}: {status} {stats}"
            served = {m["memberId"]: m["nodeId"] for m in stats.get("memberNodes", [])}
            print(f"n{far} over its limit: {full['load']}; members served by {served}")
            assert served.get(first.id) == f"n{far}", f"the first subscriber (n{far} under its limit) served by {served.get(first.id)}"
            assert served.get(second.id) == f"n{h}", \
                f"the second subscriber (n{far} over its limit: {full['load']}) served by {served.get(second.id)}, not the room's n{h}"
            cands = sdp_candidate_addresses(second.recv_pc.remoteDescription.sdp)
            assert set(cands) == {node_addr(h)}, f"the second subscriber's offer names {cands}, not n{h}'s {node_addr(h)}"

    run(c, body(), timeout=60)
