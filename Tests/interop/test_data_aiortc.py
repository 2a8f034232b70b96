"""Data through the SFU with aiortc peers (their SCTP and DCEP are aiortc's own):
  - a publisher's 10,000 reliable messages reach every subscriber complete and in order, also
    with 5% loss on one subscriber's link (nftables);
  - lossy messages ({ordered:false, maxRetransmits:0}) under 5% loss on the subscriber's link
    arrive with about 5% missing and none later than 100 ms;
  - a reliable subscriber whose link goes dead (it reads nothing) is cut off with
    `dataBufferOverflow` while another keeps receiving everything, and the server's RSS stays
    bounded;
  - an oversized message and an unknown DCEP message are refused with a `dataChannelError`
    notification naming the reason."""
from __future__ import annotations

import asyncio
import struct
import time

from data_peers import publish_data, subscribe_data, wait_notification
from impair import UdpLoss
from loss_pair import candidate_port
from minato_client import Member, create_room, event_matcher, run_async, unique_name
from waiting import await_until

# The 10,000 messages go out as fast as aiortc sends them: the per-member rate limit is raised
# for this module (its default, 1000/s, is tested by the counters in test_data_limits).
MINATO_SERVER_ENV = {"MINATO_ROOMS_DATA_MAX_MESSAGES_PER_SEC": "1000000"}

COUNT = 10_000


async def reliable(url: str) -> None:
    room = await create_room(url, unique_name("data"))
    members: list[Member] = []
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        c = await Member.join(url, room["id"], "C"); members.append(c)
        pub, ch = await publish_data(a, "chat")
        assert pub["contentType"] == "data" and pub["dataChannel"] == {"label": "chat", "ordered": True}, pub
        _, rb = await subscribe_data(b, pub["id"])
        _, rc = await subscribe_data(c, pub["id"])
        t0 = time.monotonic()
        for i in range(COUNT):
            # strings and binary alternate: both PPIDs are forwarded as they came
            ch.send(f"{i:05d}" + "x" * 95 if i % 2 == 0 else struct.pack("!I", i) + bytes(96))
            if i % 500 == 499:
                await asyncio.sleep(0)   # let aiortc's sender run
        for r in (rb, rc):
            await await_until(lambda: len(r.messages) >= COUNT, 60, f"{COUNT} messages at a subscriber",
                              state=lambda: f"{len(rb.messages)} at B, {len(rc.messages)} at C")
        took = time.monotonic() - t0
        for name, r in (("B", rb), ("C", rc)):
            assert len(r.messages) == COUNT, f"{name} got {len(r.messages)} messages"
            for i, m in enumerate(r.messages):
                if i % 2 == 0:
                    assert m == f"{i:05d}" + "x" * 95, f"{name}: message {i} is {m!r:.40}"
                else:
                    assert isinstance(m, bytes) and struct.unpack("!I", m[:4])[0] == i and len(m) == 100, \
                        f"{name}: message {i} is {m!r:.40}"
        print(f"data reliable: {COUNT} messages x 2 subscribers complete and in order in {took:.2f} s "
              f"({COUNT / took:.0f} msg/s per subscriber)")
    finally:
        for m in members:
            await m.close()


def _metrics(http: str) -> list[str]:
    import urllib.request
    text = urllib.request.urlopen(http + "/metrics", timeout=5).read().decode()
    return [l for l in text.splitlines() if l.startswith("minato_data")]


async def refused(url: str, http: str) -> None:
    room = await create_room(url, unique_name("data-err"))
    members: list[Member] = []
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        pub, ch = await publish_data(a, "big")
        _, rb = await subscribe_data(b, pub["id"])
        # aiortc honours the server's a=max-message-size (65536): a peer that ignores it is made
        # by lifting aiortc's own check.
        sctp = a.send_pc.sctp
        assert sctp._remote_max_message_size == 65536, sctp._remote_max_message_size
        sctp._remote_max_message_size = 0
        ch.send(b"z" * 70_000)
        ch.send("after")
        err = await wait_notification(a, "dataChannelError")
        assert err["reason"] == "messageTooLarge", err
        assert err["publicationId"] == pub["id"] and err["label"] == "big", err
        assert "65536" in err["detail"], err
        await await_until(lambda: rb.messages == ["after"], 5, "B to get only the message after the oversized one",
                          state=lambda: [len(m) for m in rb.messages])
        assert 'minato_data_messages_dropped_total{reason="message_too_large"} 1' in _metrics(http)

        # An unknown DCEP message type (0x07) on the channel's stream.
        a.conn.notifications.clear()
        await sctp._send(ch.id, 50, b"\x07\x00\x00\x00")
        err = await wait_notification(a, "dataChannelError")
        assert err["reason"] == "unknownDcepMessage" and "0x7" in err["detail"], err
        # The channel still works.
        ch.send("still here")
        await await_until(lambda: rb.messages[-1:] == ["still here"], 5, "B to get a message after the bad DCEP one")
    finally:
        for m in members:
            await m.close()


async def lossy_links(url: str) -> None:
    room = await create_room(url, unique_name("data-loss"))
    members: list[Member] = []
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        c = await Member.join(url, room["id"], "C"); members.append(c)
        pub, ch = await publish_data(a, "state")
        lpub, lch = await publish_data(a, "cursor", ordered=False, max_retransmits=0)
        assert lpub["dataChannel"] == {"label": "cursor", "ordered": False, "maxRetransmits": 0}, lpub
        _, rb = await subscribe_data(b, pub["id"])
        _, lb = await subscribe_data(b, lpub["id"])
        _, rc = await subscribe_data(c, pub["id"])
        b_port = candidate_port(b.recv_pc.localDescription.sdp)
        with UdpLoss(5.0, dport=b_port) as loss:
            # Reliable: complete and in order at B (lossy link) and C.
            t0 = time.monotonic()
            for i in range(COUNT):
                ch.send(f"{i:05d}" + "r" * 95)
                if i % 500 == 499:
                    await asyncio.sleep(0)
            await await_until(lambda: len(rb.messages) >= COUNT and len(rc.messages) >= COUNT, 90,
                              f"{COUNT} reliable messages at B (5% loss) and C",
                              state=lambda: f"{len(rb.messages)} at B, {len(rc.messages)} at C")
            took = time.monotonic() - t0
            for name, r in (("B", rb), ("C", rc)):
                assert r.messages == [f"{i:05d}" + "r" * 95 for i in range(COUNT)], f"{name}: not complete and in order"
            # Lossy: one message every 4 ms; each carries its index; its send time is kept here.
            sent: list[float] = []
            n = 1000
            for i in range(n):
                sent.append(time.monotonic())
                lch.send(f"{i}")
                await asyncio.sleep(0.004)
            await await_until(lambda: lb.arrivals and time.monotonic() - lb.arrivals[-1] > 0.3, 10,
                              "the lossy messages to stop arriving at B")
            problem = loss.check()
        assert not problem, problem
        got = [int(m) for m in lb.messages]
        assert len(set(got)) == len(got), "a lossy message arrived twice"
        missing = 100.0 * (n - len(got)) / n
        late = [(i, t - sent[i]) for i, t in zip(got, lb.arrivals) if t - sent[i] > 0.100]
        assert 1.0 <= missing <= 12.0, f"{missing:.1f}% of the lossy messages missing at 5% loss"
        assert not late, f"{len(late)} lossy messages later than 100 ms: {late[:5]}"
        worst = max(t - sent[i] for i, t in zip(got, lb.arrivals))
        print(f"data under 5% loss: {COUNT} reliable messages complete and in order in {took:.2f} s; "
              f"lossy: {missing:.1f}% missing, worst latency {worst * 1000:.1f} ms")
    finally:
        for m in members:
            await m.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


async def overflow(url: str, pid: int) -> None:
    room = await create_room(url, unique_name("data-slow"))
    members: list[Member] = []
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        c = await Member.join(url, room["id"], "C"); members.append(c)
        pub, ch = await publish_data(a, "feed")
        sb, rb = await subscribe_data(b, pub["id"])
        _, rc = await subscribe_data(c, pub["id"])
        rss0 = _rss_kib(pid)
        # 1 KiB messages at 1000/s for 3 s: 3 MiB, three times rooms.data.maxBufferedBytes
        # (1 MiB), at a rate the healthy subscriber (aiortc's pure-Python SCTP) takes.
        n = 3000
        with UdpLoss(99.9, dport=candidate_port(b.recv_pc.localDescription.sdp)):
            t0 = time.monotonic()
            for i in range(n):
                ch.send(f"{i:05d}".encode() + bytes(1019))
                if i % 10 == 9:
                    await asyncio.sleep(max(0.0, t0 + (i + 1) / 1000 - time.monotonic()))
            ev = await a.conn.wait_event(event_matcher("publicationUnsubscribed"), timeout=30)
            assert ev["reason"] == "dataBufferOverflow" and ev["data"]["subscription"]["id"] == sb["id"], ev
            await await_until(lambda: len(rc.messages) >= n, 30, f"C to get all {n} messages",
                              state=lambda: len(rc.messages))
            took = time.monotonic() - t0
        assert [int(m[:5]) for m in rc.messages] == list(range(n)), "C's messages are not complete and in order"
        rss1 = _rss_kib(pid)
        assert rss1 - rss0 < 64 * 1024, f"the server's RSS grew by {(rss1 - rss0) / 1024:.0f} MiB"
        print(f"data overflow: B cut off with dataBufferOverflow after {len(rb.messages)} messages; C got all {n} "
              f"in {took:.2f} s; server RSS {rss0 // 1024} -> {rss1 // 1024} MiB")
    finally:
        for m in members:
            await m.close()


def test_data_reliable_fanout_aiortc(server):
    run_async(reliable(server.url), timeout=120)


def test_data_refused_messages_aiortc(server):
    run_async(refused(server.url, server.http), timeout=60)


def test_data_lossy_links_aiortc(server):
    run_async(lossy_links(server.url), timeout=120)


def test_data_slow_subscriber_overflow_aiortc(server):
    run_async(overflow(server.url, server.proc.pid), timeout=90)
