"""Data fan-out measurement (opt-in: DATA_FANOUT_BENCH=1; not a CI gate): one aiortc publisher,
ten aiortc subscribers, 1 KiB reliable messages offered at RATE per second for WINDOW seconds.
Prints messages per second delivered per subscriber and the latency (publisher's write to a
subscriber's receive, one clock: all peers live in this process) p50/p99 over all subscribers.
Every peer's SCTP is aiortc's pure-Python one, in one process: the numbers bound what Minato
adds from above, they do not measure Minato alone."""
from __future__ import annotations

import asyncio
import os
import statistics
import struct
import time

import pytest

from data_peers import publish_data, subscribe_data
from minato_client import Member, create_room, run_async, unique_name
from waiting import await_until

MINATO_SERVER_ENV = {"MINATO_ROOMS_DATA_MAX_MESSAGES_PER_SEC": "100000"}
SUBSCRIBERS = 10
RATE = int(os.environ.get("DATA_FANOUT_RATE", "200"))
WINDOW = 5.0

pytestmark = pytest.mark.skipif(os.environ.get("DATA_FANOUT_BENCH") != "1", reason="opt-in: DATA_FANOUT_BENCH=1")


async def fanout(url: str) -> None:
    room = await create_room(url, unique_name("data-fanout"))
    members: list[Member] = []
    try:
        a = await Member.join(url, room["id"], "pub"); members.append(a)
        pub, ch = await publish_data(a, "bench")
        receivers = []
        for i in range(SUBSCRIBERS):
            m = await Member.join(url, room["id"], f"sub{i}"); members.append(m)
            receivers.append((await subscribe_data(m, pub["id"]))[1])
        n = int(RATE * WINDOW)
        sent: list[float] = []
        t0 = time.monotonic()
        for i in range(n):
            sent.append(time.monotonic())
            ch.send(struct.pack("!I", i) + bytes(1020))
            await asyncio.sleep(max(0.0, t0 + (i + 1) / RATE - time.monotonic()))
        await await_until(lambda: all(len(r.messages) >= n for r in receivers), 60, "every subscriber to get every message",
                          state=lambda: [len(r.messages) for r in receivers])
        latencies = []
        rates = []
        for r in receivers:
            assert [struct.unpack("!I", m[:4])[0] for m in r.messages] == list(range(n))
            latencies += [(t - sent[struct.unpack("!I", m[:4])[0]]) * 1000 for m, t in zip(r.messages, r.arrivals)]
            rates.append(n / (r.arrivals[-1] - t0))
        latencies.sort()
        p50 = statistics.median(latencies)
        p99 = latencies[int(0.99 * (len(latencies) - 1))]
        print(f"data fan-out 1 -> {SUBSCRIBERS}, 1 KiB, offered {RATE}/s for {WINDOW:g} s: "
              f"{min(rates):.0f}..{max(rates):.0f} msg/s per subscriber ({sum(rates):.0f} msg/s out of the server), "
              f"latency p50 {p50:.1f} ms p99 {p99:.1f} ms")
    finally:
        for m in members:
            await m.close()


def test_data_fanout_bench(server):
    run_async(fanout(server.url), timeout=120)
