"""A publisher member in its own process, so a test can kill it with SIGKILL (test_lifecycle).

usage: publisher_proc.py WS_URL ROOM_ID NAME [--keepalive SEC GAP]
Joins, publishes a sine (Opus) and the synthetic video (VP8), prints one JSON line
{"ready": true, "memberId", "audio": pubId, "video": pubId}, then obeys stdin lines:
  unpublish audio|video   -> {"ok": "unpublish"}
  leave                   -> {"ok": "leave"}
  exit                    -> closes and exits 0
Every output line is JSON; errors print {"error": "..."}.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys

from media import SineAudioTrack, SyntheticVideoTrack
from minato_client import Member


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("room_id")
    ap.add_argument("name")
    ap.add_argument("--keepalive", nargs=2, type=int, metavar=("SEC", "GAP"))
    args = ap.parse_args()
    extra = {}
    if args.keepalive:
        extra = {"keepaliveIntervalSec": args.keepalive[0], "keepaliveIntervalGapSec": args.keepalive[1]}
    m = await Member.join(args.url, args.room_id, args.name, **extra)
    pubs = {"audio": await m.publish(SineAudioTrack()), "video": await m.publish(SyntheticVideoTrack())}
    say({"ready": True, "memberId": m.id, "audio": pubs["audio"].id, "video": pubs["video"].id})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "exit":
            break
        try:
            cmd, *rest = line.split()
            if cmd == "unpublish":
                await m.unpublish(pubs[rest[0]])
            elif cmd == "leave":
                await m.leave()
            else:
                raise ValueError(f"unknown command {line!r}")
            say({"ok": cmd})
        except Exception as e:  # noqa: BLE001
            say({"error": repr(e)})
    await m.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
