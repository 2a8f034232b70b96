"""(c) A disables its video publication: B's frames stop; A enables it: frames resume within 1 s."""
from __future__ import annotations

import asyncio
import time

from media import SyntheticVideoTrack, VideoSink
from minato_client import Member, create_room, event_matcher, run_async, unique_name
from waiting import await_until


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
        # frames in flight drain: B's video goes quiet (no frame for 0.5 s; at 30 fps that is 15 missing)
        await await_until(lambda: sink.last_frame_at is not None and time.monotonic() - sink.last_frame_at > 0.5,
                          3, "B's frames to stop after disablePublication",
                          state=lambda: f"{sink.frames} frames, the last {time.monotonic() - sink.last_frame_at:.2f} s ago")
        stopped_at = sink.frames
        sent_at = video.frames_sent
        await asyncio.sleep(2.0)     # quiet window (the test's subject): nothing may leak while disabled
        leaked = sink.frames - stopped_at
        assert leaked <= 2, f"B decoded {leaked} frames in 2 s while A's video was disabled"
        assert video.frames_sent > sent_at, "A stopped sending: the window proves nothing"

        await a.conn.call("enablePublication", {"publicationId": pub.id})
        t0 = time.monotonic()
        before = sink.frames
        await await_until(lambda: sink.frames > before, 3, "B's frames to resume after enablePublication", interval=0.01)
        resumed = time.monotonic() - t0
        assert resumed <= 1.0, f"B's frames resumed {resumed:.2f} s after enablePublication (> 1 s)"
        ev = await b.conn.wait_event(event_matcher("publicationEnabled", publication_id=pub.id), timeout=5)
        assert ev["data"]["publication"]["state"] == "enabled", ev
        n = sink.frames
        await asyncio.sleep(1.0)     # measurement window: the frame rate over 1 s after re-enabling
        assert sink.frames - n >= 15, f"only {sink.frames - n} frames/s after re-enabling"
        print(f"enable/disable: leaked {leaked} frames while disabled, resumed after {resumed:.3f} s")
    finally:
        if sink:
            sink.stop()
        for m in members:
            await m.close()


def test_disable_then_enable_video(server):
    run_async(scenario(server.url), timeout=60)
