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

One cluster for the module (Redis + n1..n3 in their namespaces, logs in
artifacts/interop/cascade-*.log).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

import pytest

from cluster import Cluster, node_addr, request, running_cluster, sdp_candidate_addresses
from media import SyntheticVideoTrack, VideoSink, measure_window
from minato_client import Member, create_room, run_async, unique_name
from waiting import await_until
from test_cluster import host_of, in_thread

NODES = (1, 2, 3)


@pytest.fixture(scope="module")
def cascade():
    with running_cluster(len(NODES), label="cascade", MINATO_CLUSTER_CASCADE="true",
                         MINATO_CLUSTER_RELAY_LINGER_MS="5000") as c:
        yield c
        dead = [i for i in NODES if not c.alive(i)]
        if dead:
            pytest.fail(f"node(s) {['n%d' % i for i in dead]} died while the module ran\n{c.describe()}",
                        pytrace=False)


def run(c: Cluster, coro: Any, timeout: float) -> None:
    try:
        run_async(coro, timeout=timeout)
    except BaseException:
        print(c.describe())
        raise
    dead = [i for i in NODES if not c.alive(i)]
    assert not dead, f"node(s) {['n%d' % i for i in dead]} died during the test\n{c.describe()}"


def counters(c: Cluster, i: int) -> dict[str, float]:
    """Node i's RTP packet counters (received from publishers, forwarded to subscribers)."""
    r = request("GET", c.node_url(i) + "/metrics", bearer=c.admin_secret)
    assert r.status == 200, f"n{i} /metrics: {r.status} {r.text[:200]}"
    out = {}
    for line in r.text.splitlines():
        for name in ("minato_rtp_packets_received_total", "minato_rtp_packets_forwarded_total"):
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    return out


async def packet_counts(c: Cluster) -> dict[int, dict[str, float]]:
    return {i: await in_thread(counters, c, i) for i in NODES}


def test_subscribers_served_where_they_connect_one_relay_stream_per_node(cascade):
    c = cascade

    async def body() -> None:
        room = await create_room(c.ws_url(1), unique_name("cascade"))
        rid = room["id"]
        h = await host_of(c, rid)
        others = [i for i in NODES if i != h]
        members: list[Member] = []
        sinks: list[VideoSink] = []
        try:
            a = await Member.join(c.ws_url(h), rid, "A"); members.append(a)
            video = SyntheticVideoTrack()
            pub = await a.publish(video, codec="video/VP8")
            subs: dict[str, Any] = {}
            by_node: dict[int, list[Member]] = {}
            for node in others:
                for k in range(3):
                    m = await Member.join(c.ws_url(node), rid, f"S{node}{k}"); members.append(m)
                    by_node.setdefault(node, []).append(m)
                    s = await m.subscribe(pub.id)
                    subs[m.label] = s
                    cands = sdp_candidate_addresses(m.recv_pc.remoteDescription.sdp)
                    assert set(cands) == {node_addr(node)}, \
                        f"{m.label} (socket on n{node}, room on n{h}): the server offer's candidates are {cands}, " \
                        f"expected only n{node}'s {node_addr(node)} (served where it connects)"
                    sinks.append(VideoSink(s.track, m.label))
            for s in sinks:
                if not await s.wait_frames(3, 10):
                    raise AssertionError(f"{s.name}: {s.frames} frames decoded within 10 s of subscribing; "
                                         f"A sent {video.frames_sent} (room on n{h})")

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

            # (b) Every subscriber on one node leaves; a new one there within relayLingerMs decodes.
            node = others[0]
            for m in by_node[node]:
                for s in [s for s in sinks if s.name == m.label]:
                    s.stop()
                    sinks.remove(s)
                await m.close()
                members.remove(m)
            await asyncio.sleep(1.0)
            late = await Member.join(c.ws_url(node), rid, "late"); members.append(late)
            t0 = time.monotonic()
            s = await late.subscribe(pub.id)
            sink = VideoSink(s.track, "late"); sinks.append(sink)
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
        finally:
            for s in sinks:
                s.stop()
            for m in members:
                await m.close()

    run(c, body(), timeout=90)
