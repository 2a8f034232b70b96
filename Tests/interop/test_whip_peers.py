"""WHIP and WHEP with third-party peers (issue 14), against the real server:

(a) Debian's simple-whip-client (GStreamer webrtcbin + libnice; VP8, then H264 through openh264)
    publishes a test pattern and a tone into a room it names. A Chromium page (browser SDK) and
    an aiortc member (WebSocket) decode its video and receive its audio, and a GStreamer webrtcbin
    WHEP player watches it too. SIGINT makes whip-client DELETE the session: the member leaves
    with reason `left`, whip-client logs no error and exits 0.
(b) The GStreamer WHEP player watches an aiortc publisher (VP8 and H264) and decodes its frames.
(c) Chromium plays an aiortc publisher through the WHEP player page (/whep.html: fetch and a
    plain RTCPeerConnection, no SDK); Stop DELETEs the session and the viewer member leaves.
Peers: Tests/interop/whip_peers.py (traps handled there).
"""
from __future__ import annotations

import time

import pytest

import browser
from browser import BROWSER_SERVER_ENV, wait_until
from media import AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink
from minato_client import Connection, LoopThread, Member, create_room, unique_name
from waiting import await_until
from whip_peers import WhepPlayer, WhipClient
from test_fanout_vp8 import media_metrics

MINATO_SERVER_ENV = dict(BROWSER_SERVER_ENV)

pytestmark = pytest.mark.timeout(150)


def stats_by_publisher(page) -> dict:
    return {(s["publisherName"], s["contentType"]): s for s in page.evaluate("T.stats()")}


@pytest.fixture
def lt():
    """aiortc members run on this loop thread for the whole test (Playwright's sync API owns the
    test thread's loop once the module's Chromium is up)."""
    t = LoopThread()
    yield t
    t.close()


@pytest.mark.parametrize("codec", ["vp8", "h264"])
def test_simple_whip_client_publishes_into_a_room(server, chromium, lt, request, capsys, codec):
    room = unique_name(f"whip{codec}")
    whip = WhipClient(f"{server.http}/whip/{room}?name=obs", codec=codec, name=f"whip-client-{codec}")
    cpage, clog = browser.sdk_page(chromium, server, "chromium")
    try:
        t0 = time.monotonic()
        whip.start()
        connected = whip.wait_connected(timeout=20)
        assert whip.errors == [], whip.errors

        # A Chromium member (SDK) joins without media and subscribes to everything in the room.
        cpage.evaluate("T.connect()")
        cpage.evaluate("(n) => T.findOrCreate(n)", room)
        cpage.evaluate("(n) => T.join(n, {}, null)", "viewer")
        members = {m["name"]: m for m in cpage.evaluate("T.members()")}
        assert "obs" in members, members

        def flowing() -> bool:
            st = stats_by_publisher(cpage)
            v, a = st.get(("obs", "video")), st.get(("obs", "audio"))
            return bool(v and a and v["framesDecoded"] >= 30 and v["frameWidth"] == 320 and a["packetsReceived"] >= 50)
        wait_until(flowing, 30, "Chromium to decode whip-client's video and receive its audio",
                   state=lambda: stats_by_publisher(cpage))
        chrome = stats_by_publisher(cpage)[("obs", "video")]
        assert chrome["codec"].lower() == f"video/{codec}", chrome

        async def aiortc_and_whep() -> dict:
            conn = await Connection(server.url, label="look").connect()
            found = (await conn.call("findRoom", {"name": room}))["room"]
            await conn.close()
            obs = next(m for m in found["members"] if m["name"] == "obs")
            assert obs["type"] == "bot", obs
            pubs = {p["contentType"]: p for p in found["publications"] if p["publisherId"] == obs["id"]}
            m = await Member.join(server.url, found["id"], "aio")
            sinks = []
            try:
                sv = await m.subscribe(pubs["video"]["id"])
                sa = await m.subscribe(pubs["audio"]["id"])
                vs, as_ = VideoSink(sv.track, "aio<-obs"), AudioSink(sa.track, "aio<-obs-audio")
                sinks += [vs, as_]
                assert await vs.wait_frames(30, 20), f"aiortc decoded {vs.frames} frames of whip-client's {codec}"
                await await_until(lambda: as_.frames >= 50, 10, "aiortc to receive whip-client's audio",
                                  state=lambda: as_.frames)
                # A WHEP player watches the WHIP publisher too.
                whep = await WhepPlayer(f"{server.http}/whep/{room}/obs", seconds=3, name=f"whep-of-whip-{codec}").run_async()
                start = len(m.conn.events)
                return {"aio_frames": vs.frames, "aio_sizes": dict(vs.sizes), "whep": whep, "member": m, "start": start}
            finally:
                for s in sinks:
                    s.stop()

        r = lt.run(aiortc_and_whep(), timeout=60)
        m: Member = r["member"]
        whep = r["whep"]
        assert set(r["aio_sizes"]) == {(320, 240)}, r["aio_sizes"]
        assert whep["status"] == 201 and whep["errors"] == [], whep
        assert whep["video_frames"] >= 45 and (whep["width"], whep["height"]) == (320, 240), whep
        assert whep["video_codec"].lower() == codec and whep["audio_buffers"] >= 75, whep
        assert whep["delete_status"] == 200, whep

        # SIGINT: whip-client DELETEs its session and exits 0; the member leaves with reason `left`.
        assert whip.stop() == 0
        assert whip.delete_ok and whip.errors == [], (whip.delete_ok, whip.errors)

        async def left() -> dict:
            try:
                return await m.conn.wait_event(lambda e: e["type"] == "memberLeft" and e["data"]["member"]["name"] == "obs",
                                               10, r["start"])
            finally:
                await m.close()
        ev = lt.run(left())
        assert ev.get("reason") == "left", ev
        assert cpage.evaluate("T.errors") == []
        with capsys.disabled():
            print(f"\nsimple-whip-client {codec}: connected {connected:.2f} s after start; Chromium decoding "
                  f"{chrome['framesDecoded']} frames {chrome['frameWidth']}x{chrome['frameHeight']} ({chrome['codec']}); "
                  f"aiortc {r['aio_frames']} frames; GStreamer WHEP {whep['video_frames']} frames "
                  f"(first after {whep['first_frame_s']:.2f} s) and {whep['audio_buffers']} audio buffers in 3 s; "
                  f"total {time.monotonic() - t0:.1f} s")
    finally:
        if whip.running:
            whip.stop()
        browser.close_page(cpage, clog, request.node.name)
    assert not clog.page_errors, clog.page_errors


@pytest.mark.parametrize("codec", ["video/VP8", "video/H264"])
def test_gstreamer_whep_player_watches_an_aiortc_publisher(server, lt, capsys, codec):
    async def body() -> dict:
        room = await create_room(server.url, unique_name("whepgst"))
        pub = await Member.join(server.url, room["id"], "cam")
        try:
            await pub.publish(SineAudioTrack())
            await pub.publish(SyntheticVideoTrack(), codec=codec)
            result = await WhepPlayer(f"{server.http}/whep/{room['name']}/cam", seconds=5,
                                      name=f"whep-gst-{codec.split('/')[1].lower()}").run_async()
            rm = (await pub.conn.call("getRoom", {"roomId": room["id"]}))["room"]
            result["members_after"] = [m["name"] for m in rm["members"]]
            return result
        finally:
            await pub.close()

    r = lt.run(body(), timeout=60)
    with capsys.disabled():
        print(f"\nGStreamer WHEP <- aiortc {codec}: {r['video_frames']} frames {r['width']}x{r['height']} "
              f"(first after {r['first_frame_s']:.2f} s), {r['audio_buffers']} audio buffers in 5 s, decoders {r['decoders']}")
    assert r["status"] == 201 and r["errors"] == [], r
    assert r["video_codec"].lower() == codec.split("/")[1].lower(), r
    assert r["video_frames"] >= 100 and (r["width"], r["height"]) == (320, 240), r
    assert r["audio_buffers"] >= 150, r
    assert r["delete_status"] == 200, r


def test_chromium_plays_through_the_whep_page(server, chromium, lt, request, capsys):
    async def publish() -> tuple[Member, dict]:
        room = await create_room(server.url, unique_name("wheppage"))
        pub = await Member.join(server.url, room["id"], "cam")
        await pub.publish(SineAudioTrack())
        await pub.publish(SyntheticVideoTrack(), codec="video/VP8")
        return pub, room

    pub, room = lt.run(publish())
    page = chromium.new_context(viewport={"width": 1000, "height": 800}).new_page()
    log = browser.PageLog(page, "whep-page")
    try:
        t0 = time.monotonic()
        page.goto(f"{server.http}/whep.html?room={room['name']}&member=cam&autoplay=1")
        wait_until(lambda: page.evaluate("window.whep.status") == "playing", 20, "the WHEP page to play",
                   state=lambda: page.evaluate("[window.whep.status, window.whep.error]"))
        stats = wait_until(lambda: (lambda s: s if s["framesDecoded"] >= 30 else None)(page.evaluate("window.whep.stats()")),
                           20, "the WHEP page to decode 30 frames",
                           state=lambda: (page.evaluate("window.whep.stats()"), media_metrics(server.http)))
        first = time.monotonic() - t0
        assert (stats["frameWidth"], stats["frameHeight"]) == (320, 240), stats
        assert stats["codec"].lower() == "video/vp8" and stats["audioPackets"] > 0, stats
        assert page.evaluate("document.getElementById('video').videoWidth") == 320
        start = len(pub.conn.events)
        page.click("#stop")
        ev = lt.run(pub.conn.wait_event(lambda e: e["type"] == "memberLeft"
                                        and e["data"]["member"]["name"].startswith("whep-"), 10, start))
        assert ev.get("reason") == "left", ev
        # The page shows "stopped" once its DELETE was answered (after the server emitted memberLeft).
        wait_until(lambda: page.evaluate("window.whep.status") == "stopped", 5, "the WHEP page to show stopped",
                   state=lambda: page.evaluate("[window.whep.status, window.whep.error]"))
        with capsys.disabled():
            print(f"\nChromium WHEP page: 30 frames decoded {first:.2f} s after opening the page")
    finally:
        browser.close_page(page, log, request.node.name)
        lt.run(pub.close())
    assert not log.page_errors, log.page_errors
