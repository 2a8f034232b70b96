"""The Swift client SDK (Sources/MinatoClient) against the real server, through the
`minato-client` bot (Sources/minato-client), which prints one JSON object of what it saw.

(a) Swift -> server -> Swift: one member publishes synthetic VP8 video and Opus audio, another
    subscribes; every packet is decrypted and its payload stamp read (the bot's `loopback`).
(b) aiortc (libvpx VP8 from a real encoder) -> server -> Swift: the bot subscribes to an aiortc
    publication and must see a contiguous VP8 stream with key frames, and aiortc's member sees
    the bot's subscription event.
(c) Bad input: a room that does not exist gives the server's exact error name.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

from media import SyntheticVideoTrack
from minato_client import Member, create_room, event_matcher, run_async, unique_name

REPO = Path(__file__).resolve().parents[2]


def client_binary() -> Path:
    return Path(os.environ.get("MINATO_CLIENT_BIN") or REPO / ".build" / "debug" / "minato-client")


def run_bot(*args: str, timeout: float = 60) -> dict:
    proc = subprocess.run([str(client_binary()), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"minato-client {' '.join(args)} exited {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


async def run_bot_async(*args: str, timeout: float = 60) -> dict:
    proc = await asyncio.create_subprocess_exec(str(client_binary()), *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, f"minato-client {' '.join(args)} exited {proc.returncode}\n{err.decode()[-3000:]}"
    return json.loads(out.decode().strip().splitlines()[-1])


def test_swift_publish_and_subscribe_loopback(server):
    room = unique_name("swift-loop")
    out = run_bot("loopback", "--url", server.url, "--room", room, "--audio", "--seconds", "3")
    streams = {s["contentType"]: s for s in out["streams"]}
    assert set(streams) == {"video", "audio"}, out
    assert streams["video"]["codec"] == "VP8" and streams["audio"]["codec"].lower() == "opus", out
    for kind, s in streams.items():
        # ~3 s of 30 fps video (>= 1 packet a frame) and 50 packets/s of audio.
        assert s["packets"] >= (60 if kind == "video" else 100), (kind, s)
        assert s["expected"] - s["packets"] <= 2, f"{kind}: sequence gaps on loopback: {s}"
        assert s["decryptFailures"] == 0, (kind, s)
        # Every packet was decrypted (sampleEvery 1) and carried the sender's stamp.
        assert s["stampsRead"] == s["packets"], (kind, s)
    # The subscriber joined second: it sees its own join, then each publication and its own
    # subscription to it, in version order.
    assert out["events"] == ["memberJoined", "streamPublished", "publicationSubscribed",
                             "streamPublished", "publicationSubscribed"], out["events"]


def test_swift_ice_restart_both_directions(server):
    """The Swift SDK's `restartIce`: the publisher restarts its send connection (a new offer
    through negotiate), the subscriber its receive connection (`restartIce`'s offer answered);
    both complete (a new pair on new server ports) and the streams go on without a gap."""
    room = unique_name("swift-restart")
    out = run_bot("loopback", "--url", server.url, "--room", room, "--audio", "--seconds", "4",
                  "--restart-ice-after", "1.5")
    r = out["iceRestart"]
    print(f"\n[swift-restart] both restarts completed in {r['ms']:.0f} ms; packets after: {r['packetsAfter']}")
    assert r["sendCompleted"] == 1 and r["recvCompleted"] == 1, r
    # 2.5 s after the restarts: video >= 1 packet a frame at 30 fps, audio 50 packets/s.
    video, audio = r["packetsAfter"]
    assert video >= 50 and audio >= 100, r
    for s in out["streams"]:
        assert s["expected"] - s["packets"] <= 2 and s["decryptFailures"] == 0, s


async def aiortc_to_swift(url: str) -> None:
    name = unique_name("swift-sub")
    room = await create_room(url, name)
    alice = await Member.join(url, room["id"], "alice")
    try:
        pub = await alice.publish(SyntheticVideoTrack())
        out = await run_bot_async("subscribe", "--url", url, "--room", name, "--seconds", "3", "--expect", "1")
        subs = out["subscriptions"]
        assert len(subs) == 1, out
        s = subs[0]
        assert s["publicationId"] == pub.id and s["contentType"] == "video" and s["codec"] == "VP8", s
        assert len(s["payloadTypes"]) == 1, s
        assert s["packets"] >= 30, s          # aiortc sends ~30 fps; 3 s window
        assert s["keyFrames"] >= 1, s         # the server waits for a key frame before forwarding
        assert s["sequenceGaps"] == 0, s      # one contiguous, rewritten stream, decrypted packet by packet
        ev = await alice.conn.wait_event(event_matcher("publicationSubscribed"), timeout=5)
        assert ev["data"]["subscription"]["subscriberId"] == out["memberId"], ev
        assert ev["data"]["subscription"]["publicationId"] == pub.id, ev
        left = await alice.conn.wait_event(event_matcher("memberLeft", member_id=out["memberId"]), timeout=5)
        assert left.get("reason") == "left", left
    finally:
        await alice.close()


def test_aiortc_publisher_to_swift_subscriber(server):
    run_async(aiortc_to_swift(server.url), timeout=90)


def test_swift_client_reports_server_errors(server):
    proc = subprocess.run([str(client_binary()), "subscribe", "--url", server.url, "--room", unique_name("nope"),
                           "--seconds", "1"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "roomNotFound" in proc.stderr, proc.stderr[-2000:]
    assert server.alive()
