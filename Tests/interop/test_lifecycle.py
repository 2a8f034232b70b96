"""(d) Unpublish -> streamUnpublished + a server `offer` (answered); leave -> memberLeft `left`;
kill -9 of a publisher process -> memberLeft `transportClosed` or `keepaliveExpired` in time."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from media import SINE_HZ, AudioSink, VideoSink
from minato_client import Member, create_room, event_matcher, run_async, sdp_media_sections, unique_name
from waiting import await_until

HERE = Path(__file__).resolve().parent


class PublisherProcess:
    def __init__(self, proc: asyncio.subprocess.Process, info: dict) -> None:
        self.proc, self.info = proc, info

    @classmethod
    async def start(cls, url: str, room_id: str, name: str, *extra: str) -> "PublisherProcess":
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "publisher_proc.py"), url, room_id, name, *extra,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        info = json.loads(line or b"{}")
        assert info.get("ready"), f"publisher process {name} did not get ready: {line!r}"
        return cls(proc, info)

    async def command(self, cmd: str) -> dict:
        self.proc.stdin.write((cmd + "\n").encode())
        await self.proc.stdin.drain()
        reply = json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 20))
        assert "error" not in reply, f"publisher process: {cmd}: {reply['error']}"
        return reply

    async def exit(self) -> int:
        """Asks the process to close its connections and exit (it prints nothing for this)."""
        self.proc.stdin.write(b"exit\n")
        await self.proc.stdin.drain()
        return await asyncio.wait_for(self.proc.wait(), 10)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def scenario(url: str) -> None:
    room = await create_room(url, unique_name("lifecycle"))
    members: list[Member] = []
    procs: list[PublisherProcess] = []
    sinks = []
    try:
        b = await Member.join(url, room["id"], "B"); members.append(b)
        c = await Member.join(url, room["id"], "C"); members.append(c)
        a = await PublisherProcess.start(url, room["id"], "A"); procs.append(a)
        a_id = a.info["memberId"]
        audio_sinks = {}
        video_mids = {}
        for m in (b, c):
            sv = await m.subscribe(a.info["video"])
            sa = await m.subscribe(a.info["audio"])
            video_mids[m.label] = sv.mid
            vs, as_ = VideoSink(sv.track, f"{m.label}-video"), AudioSink(sa.track, f"{m.label}-audio")
            sinks += [vs, as_]
            audio_sinks[m.label] = as_
            assert await vs.wait_frames(3, 10), f"{m.label}: no video from A"

        # --- A unpublishes its video --------------------------------------------------------
        offers_before = {m.label: len(m.conn.offers) for m in (b, c)}
        answered_before = {m.label: m.answered_offers for m in (b, c)}
        await a.command("unpublish video")
        for m in (b, c):
            await m.conn.wait_event(event_matcher("streamUnpublished", publication_id=a.info["video"]), timeout=5)
            await m.conn.wait_offers(offers_before[m.label] + 1, timeout=5)
            await m.wait_offers_answered(answered_before[m.label] + 1, timeout=10)
            offer = m.conn.offers[offers_before[m.label]]
            assert offer["memberId"] == m.id, offer
            mids = {s["mid"]: s for s in sdp_media_sections(offer["offer"]["sdp"])}
            vmid = video_mids[m.label]
            assert vmid in mids and mids[vmid]["direction"] == "inactive", \
                f"{m.label}: the video m-line {vmid} should stay, inactive: {mids}"
            assert mids[vmid]["port"] != "0", "port must be kept for BUNDLE"
        # audio still flows after the renegotiation
        loud = {k: s.loud_frames for k, s in audio_sinks.items()}
        for k, s in audio_sinks.items():
            await await_until(lambda: s.loud_frames > loud[k] + 25, 5,
                              f"{k}: audio to keep flowing after answering the unpublish offer",
                              state=lambda: f"{s.loud_frames - loud[k]} loud frames since")
            tone = s.tone_problem(SINE_HZ)    # still A's sine, by its frequency
            assert not tone, tone

        # --- A leaves -------------------------------------------------------------------------
        offers_before = {m.label: len(m.conn.offers) for m in (b, c)}
        await a.command("leave")
        for m in (b, c):
            ev = await m.conn.wait_event(event_matcher("memberLeft", member_id=a_id), timeout=5)
            assert ev.get("reason") == "left", ev
            await m.conn.wait_event(event_matcher("streamUnpublished", publication_id=a.info["audio"]), timeout=5)
            # the subscriber gets an offer without A's audio, and answers it
            await m.conn.wait_offers(offers_before[m.label] + 1, timeout=5)
            await m.wait_offers_settled(timeout=10)
        assert await a.exit() == 0, "publisher process A did not exit cleanly"

        # --- A2 is killed (kill -9) -------------------------------------------------------------
        a2 = await PublisherProcess.start(url, room["id"], "A2", "--keepalive", "2", "2"); procs.append(a2)
        a2_id = a2.info["memberId"]
        sv2 = await b.subscribe(a2.info["video"])
        vs2 = VideoSink(sv2.track, "B-video-A2"); sinks.append(vs2)
        assert await vs2.wait_frames(3, 10), "B: no video from A2"
        await b.wait_offers_settled(timeout=10)   # every offer B got so far is answered
        b_offers, b_answered = len(b.conn.offers), b.answered_offers
        os.kill(a2.proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        await a2.proc.wait()
        reasons = ("transportClosed", "keepaliveExpired")
        for m in (b, c):
            ev = await m.conn.wait_event(event_matcher("memberLeft", member_id=a2_id), timeout=12)
            assert ev.get("reason") in reasons, ev
        took = time.monotonic() - t0
        print(f"lifecycle: killed member removed after {took:.1f} s, reason {ev.get('reason')}")
        assert took <= 10.5, f"killed member removed only after {took:.1f} s"
        await b.conn.wait_event(event_matcher("streamUnpublished", publication_id=a2.info["video"]), timeout=5)
        # B subscribed to A2's video: it gets an offer without it, and answers it.
        await b.conn.wait_offers(b_offers + 1, timeout=5)
        await b.wait_offers_answered(b_answered + 1, timeout=10)
        for m in (b, c):
            assert not m.offer_errors, m.offer_errors
            assert m.conn.is_open
    finally:
        for s in sinks:
            s.stop()
        for p in procs:
            await p.stop()
        for m in members:
            await m.close()


def test_unpublish_leave_and_kill(server):
    run_async(scenario(server.url), timeout=110)
