"""(c) A disables its video publication: B's frames stop; A enables it: frames resume within 1 s."""
from __future__ import annotations

import asyncio
import time

from media import SyntheticVideoTrack, VideoSink
from minato_client import Member, create_room, event_matcher, run_async, unique_name


async def scenario(url: str) -> None:
    room = await create_room(url, unique_name("enable"))
    members: list[Member] = []
    sink = None
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        video = SyntheticVideoTrack()
        pub = await a.publish(video)
        assert pub.publication["state"] == "enabled"
        sub = await b.subscribe(pub.id)
        sink = VideoSink(sub.track, "B-video")
        assert await sink.wait_frames(10, 10), "B decoded no video within 10 s"

        await a.conn.call("disablePublication", {"publicationId": pub.id})
        ev = await b.conn.wait_event(event_matcher("publicationDisabled", publication_id=pub.id), timeout=5)
        assert ev["data"]["publication"]["state"] == "disabled", ev
        await asyncio.sleep(1.0)                     # frames in flight drain
        stopped_at = sink.frames
        await asyncio.sleep(2.0)
        leaked = sink.frames - stopped_at
        assert leaked <= 2, f"B decoded {leaked} frames in 2 s while A's video was disabled"
        assert video.frames_sent > 0

        await a.conn.call("enablePublication", {"publicationId": pub.id})
        t0 = time.monotonic()
        before = sink.frames
        while sink.frames == before and time.monotonic() - t0 < 3.0:
            await asyncio.sleep(0.01)
        resumed = time.monotonic() - t0
        assert sink.frames > before, "B's frames did not resume within 3 s of enablePublication"
        assert resumed <= 1.0, f"B's frames resumed {resumed:.2f} s after enablePublication (> 1 s)"
        ev = await b.conn.wait_event(event_matcher("publicationEnabled", publication_id=pub.id), timeout=5)
        assert ev["data"]["publication"]["state"] == "enabled", ev
        n = sink.frames
        await asyncio.sleep(1.0)
        assert sink.frames - n >= 15, f"only {sink.frames - n} frames/s after re-enabling"
        print(f"enable/disable: leaked {leaked} frames while disabled, resumed after {resumed:.3f} s")
    finally:
        if sink:
            sink.stop()
        for m in members:
            await m.close()


def test_disable_then_enable_video(server):
    run_async(scenario(server.url), timeout=60)
