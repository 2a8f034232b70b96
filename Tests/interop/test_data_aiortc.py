"""Data through the SFU with aiortc peers (their SCTP and DCEP are aiortc's own): a publisher's
reliable messages reach every subscriber complete and in order; an oversized message and an
unknown DCEP message are refused with a `dataChannelError` notification naming the reason."""
from __future__ import annotations

import asyncio
import struct
import time

from data_peers import publish_data, subscribe_data, wait_notification
from minato_client import Member, create_room, run_async, unique_name
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


async def refused(url: str) -> None:
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


def test_data_reliable_fanout_aiortc(server):
    run_async(reliable(server.url), timeout=120)


def test_data_refused_messages_aiortc(server):
    run_async(refused(server.url), timeout=60)
