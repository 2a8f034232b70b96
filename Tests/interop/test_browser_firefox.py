"""The browser SDK (/sdk/minato.js) in Firefox ESR (Marionette, Tests/interop/firefox.py) and in a
mixed room with Chromium (Playwright), against the real server.

(a) A Firefox page joins through the SDK and publishes its microphone and then its camera: both
    publications are accepted and both m-lines send. (Firefox offers every m-line after the first
    as `port 0` + `a=bundle-only` under max-bundle; the server used to take that for rejected:
    `invalidParameter: m-line '1' must be sendonly (or sendrecv) to publish`.)
(b) A mixed room: Firefox publishes camera + mic and subscribes to Chromium's, Chromium the reverse
    (VP8: Firefox has no H264 here); each decodes the other's video (framesDecoded growing) and
    receives its audio. join() -> first decoded remote frame is printed per engine, once with
    Firefox and once with Chromium joining a room where the other already publishes.
(c) aiortc and Firefox in one room: aiortc decodes the Firefox member's VP8 and Opus, Firefox the
    aiortc member's.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

import browser
import firefox
from browser import BROWSER_SERVER_ENV, wait_until
from media import AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink
from minato_client import Member, unique_name

MINATO_SERVER_ENV = dict(BROWSER_SERVER_ENV)

pytestmark = pytest.mark.timeout(120)

VIDEO = {"width": 320, "height": 240, "frameRate": 15}

# Joins, then publishes the microphone and then the camera, each as its own publish() (the order
# a new user's app does it), optionally with a codec for the video; returns the member id.
JOIN_MIC_THEN_CAMERA = """async ([name, video, codec]) => {
    T.tJoin = performance.now();
    T.me = await T.room.join({ name });
    T.me.onFatalError.add((e) => T.errors.push(`fatal ${e.name}: ${e.detail}`));
    const mic = (await navigator.mediaDevices.getUserMedia({ audio: true })).getAudioTracks()[0];
    T.pubs.audio = await T.me.publish(mic, { metadata: `${name}-audio` });
    const cam = (await navigator.mediaDevices.getUserMedia({ video })).getVideoTracks()[0];
    T.pubs.video = await T.me.publish(cam, { metadata: `${name}-video`, ...(codec ? { codec } : {}) });
    T.publishedAt = performance.now();
    for (const p of T.room.publications) T.maybeSubscribe(p);
    return T.me.id;
}"""

# What this page sends: per publication, the send transceiver's negotiated direction and the
# outbound-rtp counters.
SENDING = """async () => {
    const out = {};
    for (const [kind, pub] of Object.entries(T.pubs)) {
      const t = pub._local.transceiver;
      let packetsSent = 0, framesEncoded = 0;
      (await t.sender.getStats()).forEach((s) => {
        if (s.type === 'outbound-rtp') { packetsSent += s.packetsSent || 0; framesEncoded += s.framesEncoded || 0; }
      });
      out[kind] = { state: pub.state, mid: t.mid, currentDirection: t.currentDirection, packetsSent, framesEncoded };
    }
    return out;
}"""


# How many publications of the member named "aio" the page's room holds.
AIO_PUBLICATIONS = "() => T.room.publications.filter((p) => p.publisher && p.publisher.name === 'aio').length"


def stats_by_publisher(page) -> dict:
    return {(s["publisherName"], s["contentType"]): s for s in page.evaluate("T.stats()")}


def flowing_from(page, name: str) -> bool:
    st = stats_by_publisher(page)
    v, a = st.get((name, "video")), st.get((name, "audio"))
    return bool(v and a and v["framesDecoded"] > 0 and v["videoWidth"] > 0 and a["packetsReceived"] > 0)


def test_firefox_publishes_microphone_then_camera(server, ff, request):
    page = firefox.sdk_page(ff, server)
    try:
        page.evaluate("T.connect()")
        page.evaluate("(n) => T.findOrCreate(n)", unique_name("ffpub"))
        page.evaluate(JOIN_MIC_THEN_CAMERA, ["fox", VIDEO, None])
        pubs = page.evaluate("T.publications()")
        assert sorted(p["contentType"] for p in pubs) == ["audio", "video"], pubs
        assert all(p["state"] == "enabled" for p in pubs), pubs
        # Both m-lines were accepted (sendonly), and both send media.
        sent = wait_until(lambda: (lambda s: s if all(v["packetsSent"] > 20 for v in s.values()) else None)(
            page.evaluate(SENDING)), 20, "Firefox to send audio and video")
        assert {k: v["currentDirection"] for k, v in sent.items()} == {"audio": "sendonly", "video": "sendonly"}, sent
        assert sent["video"]["framesEncoded"] > 0, sent
        assert page.evaluate("T.errors") == []
        page.evaluate("T.me.leave()")
        wait_until(lambda: page.evaluate("() => T.me.state === 'left'"), 10, "fox to have left")
    finally:
        page.save(request.node.name)
    assert not page.page_errors, page.page_errors


@pytest.mark.parametrize("last", ["firefox", "chromium"])
def test_mixed_room_firefox_and_chromium(server, ff, chromium, request, capsys, last):
    """`last` joins second, when the other is already publishing: its join() -> first decoded
    remote frame is the one a user of that engine sees entering a live room."""
    room = unique_name("ffmix")
    fpage = firefox.sdk_page(ff, server)
    cpage, clog = browser.sdk_page(chromium, server, "chromium")
    try:
        for p in (fpage, cpage):
            p.evaluate("T.connect()")
            p.evaluate("(n) => T.findOrCreate(n)", room)
        joins = [(fpage, "fox"), (cpage, "chrome")]
        for p, name in (joins if last == "chromium" else joins[::-1]):
            p.evaluate(JOIN_MIC_THEN_CAMERA, [name, VIDEO, "video/VP8"])
        wait_until(lambda: flowing_from(fpage, "chrome"), 45, "Firefox to decode Chromium's video and receive its audio")
        wait_until(lambda: flowing_from(cpage, "fox"), 45, "Chromium to decode Firefox's video and receive its audio")

        first = {"firefox": stats_by_publisher(fpage), "chromium": stats_by_publisher(cpage)}
        t0 = time.monotonic()
        samples = []
        while time.monotonic() - t0 < 4.0:
            time.sleep(1.0)   # the window: one stats sample per second
            samples.append({"firefox": stats_by_publisher(fpage), "chromium": stats_by_publisher(cpage)})
        elapsed = time.monotonic() - t0
        lines = ["", f"join() -> first decoded remote video frame, per engine (mixed room, VP8, {last} joins last):"]
        for engine, remote in (("firefox", "chrome"), ("chromium", "fox")):
            v0, v1 = first[engine][(remote, "video")], samples[-1][engine][(remote, "video")]
            a0, a1 = first[engine][(remote, "audio")], samples[-1][engine][(remote, "audio")]
            frames = v1["framesDecoded"] - v0["framesDecoded"]
            packets = a1["packetsReceived"] - a0["packetsReceived"]
            lines.append(f"  {engine} <- {remote}{' (joined last)' if engine == last else ''}: first frame "
                         f"{v1['firstFrameMs']:.0f} ms after join() (own mic+camera published at {v1['publishedMs']:.0f} ms, "
                         f"subscribe() resolved at {v1['subscribedMs']:.0f} ms); then {frames} frames in {elapsed:.1f} s "
                         f"({v1['codec']} {v1['frameWidth']}x{v1['frameHeight']}), {packets} audio packets "
                         f"({a1['codec']})")
            assert v1["codec"] and v1["codec"].lower() == "video/vp8", v1
            assert frames >= 15, f"{engine}: only {frames} frames from {remote} in {elapsed:.1f}s"
            series = [s[engine][(remote, "video")]["framesDecoded"] for s in samples]
            assert all(b > a for a, b in zip([v0["framesDecoded"]] + series, series)), \
                f"{engine}: frames from {remote} stalled: {series}"
            assert packets >= 80, f"{engine}: only {packets} audio packets from {remote} in {elapsed:.1f}s"
        with capsys.disabled():
            print("\n".join(lines))
        for engine, p in (("firefox", fpage), ("chromium", cpage)):
            assert p.evaluate("T.errors") == [], engine
            assert [m["name"] for m in p.evaluate("T.members()")] == ["chrome", "fox"]
        for p in (fpage, cpage):
            p.evaluate("T.me.leave()")
        for p in (fpage, cpage):
            wait_until(lambda: p.evaluate("() => T.me.state === 'left'"), 10, "left")
    finally:
        fpage.save(request.node.name)
        browser.close_page(cpage, clog, request.node.name)
    assert not fpage.page_errors, fpage.page_errors
    assert not clog.page_errors, clog.page_errors


def test_firefox_and_aiortc_each_way(server, ff, request, capsys):
    page = firefox.sdk_page(ff, server)
    try:
        page.evaluate("T.connect()")
        page.evaluate("() => { T.autoSubscribe = false; return true; }")
        room_id = page.evaluate("(n) => T.findOrCreate(n)", unique_name("ffaio"))
        page.evaluate(JOIN_MIC_THEN_CAMERA, ["fox", VIDEO, "video/VP8"])
        pubs = page.evaluate("() => ({ audio: T.pubs.audio.id, video: T.pubs.video.id })")

        async def subscribe_and_measure() -> dict:
            t_join = time.monotonic()
            m = await Member.join(server.url, room_id, "aio")
            sinks = []
            try:
                sv = await m.subscribe(pubs["video"])
                sa = await m.subscribe(pubs["audio"])
                vs, as_ = VideoSink(sv.track, "aio-video"), AudioSink(sa.track, "aio-audio")
                sinks += [vs, as_]
                # aiortc publishes too (VP8 + Opus); the Firefox page subscribes to both.
                await m.publish(SineAudioTrack())
                await m.publish(SyntheticVideoTrack(), codec="video/VP8")
                loop = asyncio.get_running_loop()
                # aiortc's publish() returns with its answer; the page learns of the publications from
                # its own streamPublished events, which may come later: wait for both, then subscribe.
                await loop.run_in_executor(None, lambda: wait_until(
                    lambda: page.evaluate(AIO_PUBLICATIONS) >= 2, 10, "the Firefox page to see aiortc's two publications",
                    state=lambda: page.evaluate("T.publications()")))
                await loop.run_in_executor(None, lambda: page.evaluate(
                    "() => { for (const p of T.room.publications) T.maybeSubscribe(p); return true; }"))
                assert await vs.wait_frames(3, 15), f"aiortc decoded no video from Firefox within 15 s ({vs.frames})"
                await loop.run_in_executor(None, lambda: wait_until(
                    lambda: flowing_from(page, "aio"), 20, "Firefox to decode aiortc's video and receive its audio",
                    state=lambda: {"stats": page.evaluate("T.stats()"), "errors": page.evaluate("T.errors"),
                                   "subscribed": page.evaluate("() => [...T.subs.keys()]")}))
                ff0 = await loop.run_in_executor(None, lambda: stats_by_publisher(page))
                f0, a0, t0 = vs.frames, as_.frames, time.monotonic()
                await asyncio.sleep(3.0)   # the measurement window
                ff1 = await loop.run_in_executor(None, lambda: stats_by_publisher(page))
                out = {"joinToFirstFrameMs": round((vs.first_frame_at - t_join) * 1000),
                       "frames": vs.frames - f0, "audioFrames": as_.frames - a0,
                       "window": round(time.monotonic() - t0, 1), "sizes": dict(vs.sizes),
                       "offerErrors": [repr(e) for e in m.offer_errors],
                       "ffFrames": ff1[("aio", "video")]["framesDecoded"] - ff0[("aio", "video")]["framesDecoded"],
                       "ffAudioPackets": ff1[("aio", "audio")]["packetsReceived"] - ff0[("aio", "audio")]["packetsReceived"],
                       "ffVideo": ff1[("aio", "video")]}
                await m.leave()
                return out
            finally:
                for x in sinks:
                    x.stop()
                await m.close()

        # On a thread of its own: Playwright's sync API (the module's Chromium) owns this thread's loop.
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            r = ex.submit(lambda: asyncio.run(asyncio.wait_for(subscribe_and_measure(), 40))).result()
        with capsys.disabled():
            print(f"\naiortc <- fox (Firefox VP8 publisher): first frame {r['joinToFirstFrameMs']} ms after join; "
                  f"then {r['frames']} frames and {r['audioFrames']} audio frames in {r['window']} s, sizes {r['sizes']}\n"
                  f"firefox <- aio (aiortc VP8 publisher): {r['ffFrames']} frames ({r['ffVideo']['codec']} "
                  f"{r['ffVideo']['frameWidth']}x{r['ffVideo']['frameHeight']}) and {r['ffAudioPackets']} audio packets "
                  f"in {r['window']} s")
        assert r["offerErrors"] == [], r
        assert r["frames"] >= 20, r
        assert set(r["sizes"]) == {(VIDEO["width"], VIDEO["height"])}, r
        assert r["audioFrames"] >= 100, r
        assert r["ffFrames"] >= 30 and r["ffVideo"]["codec"].lower() == "video/vp8", r
        assert r["ffAudioPackets"] >= 100, r
        assert page.evaluate("T.errors") == []
        page.evaluate("T.me.leave()")
        wait_until(lambda: page.evaluate("() => T.me.state === 'left'"), 10, "fox to have left")
    finally:
        page.save(request.node.name)
    assert not page.page_errors, page.page_errors
