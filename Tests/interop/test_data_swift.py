"""The Swift SDK's data API (`LocalDataStream`, `member.dataMessages(of:)`) through the real
server, with the `minato-client data` bot:
  - a Swift publisher writes 4,000 stamped messages (strings and bytes in turn) at 1000 a
    second; a Swift subscriber and an aiortc subscriber (aiortc's own SCTP and DCEP)
    get every one, in order, each as the kind it was written; a message one byte over the
    server's `a=max-message-size` is refused by the SDK with a clear error;
  - an aiortc publisher's strings and bytes reach a Swift subscriber in order;
  - a lossy stream (`ordered: false, maxRetransmits: 0`) reaches aiortc as such a channel.
The bots print one JSON object; the publisher first prints `{"published": id}` (and with
`--wait-go` `{"ready": true}`, then writes once it reads a line), the subscriber
`{"subscribed": id}` once the server's channel is open."""
from __future__ import annotations

import asyncio
import json
import struct
import time

from admin_util import scrape
from data_peers import publish_data, subscribe_data
from minato_client import Member, create_room, run_async, unique_name
from test_swift_sdk import client_binary
from waiting import await_until

# The publisher writes as fast as its channel takes messages: the per-member rate limit (1000/s
# by default, tested in test_data_limits) is raised for this module.
MINATO_SERVER_ENV = {"MINATO_ROOMS_DATA_MAX_MESSAGES_PER_SEC": "1000000"}

# aiortc's pure-Python SCTP takes a few thousand messages a second: offered faster, the server
# rightly cuts it off (`dataBufferOverflow`, test_data_aiortc), so the publisher paces.
COUNT = 4000
RATE = 1000


def data_counters(http: str) -> dict:
    """The server's data counters (for failure messages)."""
    return {f"{name}{dict(labels) or ''}": v for (name, labels), v in scrape(http).items() if name.startswith("minato_data")}


async def start_bot(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(str(client_binary()), "data", *args, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def go(proc: asyncio.subprocess.Process) -> None:
    """A `--wait-go` publisher has its subscriptions: every subscriber is reading, let it write."""
    assert await first_line(proc, "ready") is True
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()


async def first_line(proc: asyncio.subprocess.Process, key: str, timeout: float = 20) -> str:
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    assert line, f"the bot ended before printing {key}: {(await proc.stderr.read()).decode()[-2000:]}"
    return json.loads(line)[key]


async def result(proc: asyncio.subprocess.Process, timeout: float = 60) -> dict:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, f"minato-client data exited {proc.returncode}\n{err.decode()[-3000:]}"
    return json.loads(out.decode().strip().splitlines()[-1])


def index(m) -> int:
    """The index a message of `minato-client data` carries (-1: none)."""
    if isinstance(m, str):
        head = m.split(":", 1)[0]
        return int(head) if head.isdigit() else -1
    return struct.unpack("!I", m[:4])[0] if len(m) >= 12 else -1


def stamped(i: int, m) -> bool:
    """Whether `m` is message `i` as `minato-client data` writes it."""
    if i % 2 == 0:
        return isinstance(m, str) and m.startswith(f"{i}:")
    return isinstance(m, bytes) and len(m) >= 12 and struct.unpack("!I", m[:4])[0] == i


async def swift_to_swift_and_aiortc(url: str, http: str) -> None:
    name = unique_name("swift-data")
    room = await create_room(url, name)
    sub_bot = await start_bot("--url", url, "--room", name, "--name", "swift-sub", "--count", str(COUNT), "--seconds", "40")
    pub_bot = None
    observer = None
    try:
        pub_bot = await start_bot("--publish", "--url", url, "--room", name, "--count", str(COUNT), "--size", "100",
                                  "--rate", str(RATE), "--wait-subscribers", "2", "--wait-go", "--oversize", "--seconds", "1")
        publication = await first_line(pub_bot, "published")
        await first_line(sub_bot, "subscribed")
        observer = await Member.join(url, room["id"], "aiortc-sub")
        _, receiver = await subscribe_data(observer, publication)
        await go(pub_bot)
        t0 = time.monotonic()
        out = await result(pub_bot)
        swift = await result(sub_bot)
        await await_until(lambda: len(receiver.messages) >= COUNT, 30, f"{COUNT} messages at aiortc",
                          state=lambda: (len(receiver.messages), swift, data_counters(http)))
        took = time.monotonic() - t0
        assert out["sent"] == COUNT, out
        assert "rooms.data.maxMessageBytes" in (out.get("oversizeError") or ""), out
        assert "65537 bytes" in out["oversizeError"], out
        assert swift["received"] == COUNT and swift["outOfOrder"] == 0, swift
        assert swift["wrongKind"] == 0 and swift["unreadable"] == 0, swift
        assert swift["strings"] == COUNT // 2 and swift["binaries"] == COUNT // 2, swift
        assert len(receiver.messages) == COUNT
        bad = [i for i, m in enumerate(receiver.messages) if not stamped(i, m)]
        assert not bad, f"aiortc: messages out of order or changed from {bad[:5]}: {receiver.messages[bad[0]]!r:.40}"
        print(f"\nSwift data: {COUNT} messages written in {out['seconds']:.2f} s ({out['fullRetries']} waits for "
              f"buffer room); Swift subscriber in order, latency p50 {swift['latencyP50Ms']:.2f} ms p99 "
              f"{swift['latencyP99Ms']:.2f} ms; aiortc subscriber in order ({took:.2f} s)")
    finally:
        for p in (pub_bot, sub_bot):
            if p is not None and p.returncode is None:
                p.kill()
                await p.wait()
        if observer is not None:
            await observer.close()


def test_swift_data_publisher_to_swift_and_aiortc(server):
    run_async(swift_to_swift_and_aiortc(server.url, server.http), timeout=120)


async def aiortc_to_swift(url: str) -> None:
    name = unique_name("aiortc-data")
    room = await create_room(url, name)
    a = await Member.join(url, room["id"], "aiortc-pub")
    bot = None
    try:
        pub, ch = await publish_data(a, "chat")
        n = 600
        bot = await start_bot("--url", url, "--room", name, "--count", str(n), "--seconds", "20")
        await first_line(bot, "subscribed")   # printed once the server's channel is open
        for i in range(n):
            now = time.monotonic_ns()
            ch.send(f"{i}:{now}:chat" if i % 2 == 0 else struct.pack("!IQ", i, now) + bytes(20))
            if i % 100 == 99:
                await asyncio.sleep(0.01)
        out = await result(bot)
        assert out["received"] == n and out["outOfOrder"] == 0 and out["wrongKind"] == 0, out
        assert out["strings"] == n // 2 and out["binaries"] == n // 2, out
    finally:
        if bot is not None and bot.returncode is None:
            bot.kill()
            await bot.wait()
        await a.close()


def test_aiortc_data_publisher_to_swift_subscriber(server):
    run_async(aiortc_to_swift(server.url), timeout=90)


async def lossy_stream(url: str, http: str) -> None:
    name = unique_name("swift-lossy")
    room = await create_room(url, name)
    observer = await Member.join(url, room["id"], "aiortc-sub")
    bot = None
    try:
        bot = await start_bot("--publish", "--lossy", "--url", url, "--room", name, "--count", "200", "--rate", "400",
                              "--wait-subscribers", "1", "--wait-go", "--seconds", "1")
        publication = await first_line(bot, "published")
        _, receiver = await subscribe_data(observer, publication)
        await go(bot)
        assert receiver.channel.ordered is False and receiver.channel.maxRetransmits == 0, \
            (receiver.channel.ordered, receiver.channel.maxRetransmits)
        out = await result(bot)
        assert out["sent"] == 200, out
        # Clean loopback: nothing is lost even without retransmissions.
        await await_until(lambda: len(receiver.messages) >= 200, 10, "200 lossy messages",
                          state=lambda: (len(receiver.messages), data_counters(http)))
        assert sorted(index(m) for m in receiver.messages) == list(range(200))
    finally:
        if bot is not None and bot.returncode is None:
            bot.kill()
            await bot.wait()
        await observer.close()


def test_swift_lossy_data_stream(server):
    run_async(lossy_stream(server.url, server.http), timeout=60)
