"""A room of three engines and two video codecs (issue 15): Firefox ESR (SDK, Marionette) publishes
VP8, Chromium (SDK, Playwright) publishes H264, aiortc publishes VP8; each also publishes Opus.

Every subscriber is offered only what it can decode. The browser SDK sends the codecs its browser
decodes with `subscribe` (RTCRtpReceiver.getCapabilities), so Firefox, which has no H264 here, is
refused Chromium's camera with `codecNotSupported` (and `publication.decodable` says so before it
tries) and gets everything else; Chromium and aiortc decode every video in the room, VP8 and H264,
and receive every audio.
"""
from __future__ import annotations

import time

import pytest

import browser
import firefox
from browser import BROWSER_SERVER_ENV, wait_until
from media import AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink
from minato_client import LoopThread, Member, unique_name
from test_browser_firefox import JOIN_MIC_THEN_CAMERA, VIDEO, stats_by_publisher

MINATO_SERVER_ENV = dict(BROWSER_SERVER_ENV)

pytestmark = pytest.mark.timeout(150)


def decoding(page, name: str, audio_only: bool = False) -> bool:
    st = stats_by_publisher(page)
    v, a = st.get((name, "video")), st.get((name, "audio"))
    if not (a and a["packetsReceived"] > 0):
        return False
    return audio_only or bool(v and v["framesDecoded"] > 0 and v["videoWidth"] > 0)


def test_vp8_and_h264_room_of_firefox_chromium_and_aiortc(server, ff, chromium, request, capsys):
    room = unique_name("codecs3")
    fpage = firefox.sdk_page(ff, server)
    cpage, clog = browser.sdk_page(chromium, server, "chromium")
    lt = LoopThread()
    aio: Member | None = None
    sinks: list = []
    try:
        for p in (fpage, cpage):
            p.evaluate("T.connect()")
        room_id = fpage.evaluate("(n) => T.findOrCreate(n)", room)
        cpage.evaluate("(n) => T.findOrCreate(n)", room)

        cpage.evaluate(JOIN_MIC_THEN_CAMERA, ["chrome", VIDEO, "video/H264"])
        chrome_pubs = cpage.evaluate("() => ({ audio: T.pubs.audio.id, video: T.pubs.video.id })")

        async def aio_join_and_publish() -> dict:
            m = await Member.join(server.url, room_id, "aio")
            audio = await m.publish(SineAudioTrack())
            video = await m.publish(SyntheticVideoTrack(), codec="video/VP8")
            return {"member": m, "audio": audio.id, "video": video.id}
        a = lt.run(aio_join_and_publish())
        aio = a["member"]

        t0 = time.monotonic()
        fpage.evaluate(JOIN_MIC_THEN_CAMERA, ["fox", VIDEO, "video/VP8"])
        fox_pubs = fpage.evaluate("() => ({ audio: T.pubs.audio.id, video: T.pubs.video.id })")

        # aiortc subscribes to both browsers' camera and microphone: VP8 from Firefox, H264 from Chromium.
        async def aio_subscribe() -> dict:
            out = {}
            for who, pubs in (("fox", fox_pubs), ("chrome", chrome_pubs)):
                sv = await aio.subscribe(pubs["video"])
                sa = await aio.subscribe(pubs["audio"])
                out[who] = (VideoSink(sv.track, f"aio<-{who}"), AudioSink(sa.track, f"aio<-{who}-audio"))
            return out
        aio_sinks = lt.run(aio_subscribe())
        sinks = [s for pair in aio_sinks.values() for s in pair]

        # Firefox: knows before subscribing that it cannot decode Chromium's H264 ...
        decodable = fpage.evaluate("""(ids) => Object.fromEntries(T.room.publications
            .filter((p) => ids.includes(p.id)).map((p) => [p.id, p.decodable]))""",
                                   [chrome_pubs["video"], chrome_pubs["audio"], a["video"]])
        assert decodable == {chrome_pubs["video"]: False, chrome_pubs["audio"]: True, a["video"]: True}, decodable
        # ... decodes aiortc's VP8, hears both, and its subscribe to Chromium's camera was refused.
        wait_until(lambda: decoding(fpage, "aio") and decoding(fpage, "chrome", audio_only=True), 45,
                   "Firefox to decode aiortc's video and receive aiortc's and Chromium's audio")
        ff_first_frame = (time.monotonic() - t0) * 1000
        errors = fpage.evaluate("T.errors")
        assert len(errors) == 1 and errors[0].startswith(f"subscribe {chrome_pubs['video']}: codecNotSupported: "), errors
        assert "video/H264" in errors[0], errors
        # Chromium decodes both VP8 cameras; aiortc both cameras, VP8 and H264.
        wait_until(lambda: decoding(cpage, "fox") and decoding(cpage, "aio"), 45,
                   "Chromium to decode Firefox's and aiortc's video and receive their audio")
        for who, (vs, as_) in aio_sinks.items():
            wait_until(lambda: vs.frames >= 10 and as_.frames >= 25, 30,
                       f"aiortc to decode {who}'s video and receive its audio", state=lambda: (vs.frames, as_.frames))

        # A window in which everything keeps flowing.
        f0, c0 = stats_by_publisher(fpage), stats_by_publisher(cpage)
        a0 = {who: (vs.frames, as_.frames) for who, (vs, as_) in aio_sinks.items()}
        time.sleep(3.0)   # the measurement window
        f1, c1 = stats_by_publisher(fpage), stats_by_publisher(cpage)
        a1 = {who: (vs.frames, as_.frames) for who, (vs, as_) in aio_sinks.items()}
        rows = []
        for engine, s0, s1, remotes in (("firefox", f0, f1, ["aio"]), ("chromium", c0, c1, ["fox", "aio"])):
            for r in remotes:
                v0, v1 = s0[(r, "video")], s1[(r, "video")]
                frames = v1["framesDecoded"] - v0["framesDecoded"]
                rows.append(f"  {engine} <- {r}: {v1['codec']} {frames} frames in 3 s")
                assert v1["codec"].lower() == "video/vp8", (engine, r, v1)
                assert frames >= 20, (engine, r, frames)
            for r in (["aio", "chrome"] if engine == "firefox" else ["fox", "aio"]):
                packets = s1[(r, "audio")]["packetsReceived"] - s0[(r, "audio")]["packetsReceived"]
                assert packets >= 80, (engine, r, packets)
        assert (("chrome", "video") not in f1), "Firefox must have no video subscription of Chromium's H264"
        for who in ("fox", "chrome"):
            frames, audio = a1[who][0] - a0[who][0], a1[who][1] - a0[who][1]
            rows.append(f"  aiortc <- {who}: {frames} frames in 3 s")
            assert frames >= 20, (who, frames)
            assert audio >= 100, (who, audio)
        codec_of = {p["id"]: p["codecCapabilities"][0]["mimeType"] for p in cpage.evaluate(
            "() => T.room.publications.map((p) => ({ id: p.id, codecCapabilities: p.codecCapabilities }))")}
        assert codec_of[chrome_pubs["video"]].lower() == "video/h264", codec_of
        assert codec_of[fox_pubs["video"]].lower() == "video/vp8", codec_of
        with capsys.disabled():
            print(f"\nmixed codecs: Firefox join() -> decoding aiortc's VP8 {ff_first_frame:.0f} ms; "
                  f"Chromium's H264 refused to Firefox with codecNotSupported\n" + "\n".join(rows))
        for p in (fpage, cpage):
            p.evaluate("T.me.leave()")
        lt.run(aio.leave())
    finally:
        for s in sinks:
            lt.call_soon(s.stop)
        if aio is not None:
            try:
                lt.run(aio.close(), timeout=10)
            except Exception:  # noqa: BLE001
                pass
        lt.close()
        fpage.save(request.node.name)
        browser.close_page(cpage, clog, request.node.name)
    assert not fpage.page_errors, fpage.page_errors
    assert not clog.page_errors, clog.page_errors
