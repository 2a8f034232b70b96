"""Rooms mixing codecs (issue 15): an SFU forwards the publisher's codec as it is, so a subscriber
that cannot decode it must not be offered it.

(a) A subscriber that says what it decodes (`subscribe {codecCapabilities:[{mimeType}]}`, as the
    browser SDK does from RTCRtpReceiver.getCapabilities) is refused a publication in any other
    codec with 415 `codecNotSupported`, and nothing changes: no subscription, no event, no offer.
    Malformed capabilities are `invalidParameter`. The same subscriber then subscribes to the
    audio and to the video once it names H264, and decodes it.
(b) A subscriber that does not say, and answers the server's offer with the stream's m-section
    rejected (what a browser does with a codec it lacks): the server forwards nothing into it; the
    subscription ends with `publicationUnsubscribed` (reason `codecNotSupported`), the next offer
    drops the stream, and the member's other subscription keeps flowing.
"""
from __future__ import annotations

import asyncio
import re

from media import SINE_HZ, AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink
from minato_client import Member, RpcError, create_room, run_async, unique_name
from waiting import await_until

VP8_OPUS = [{"mimeType": "video/VP8"}, {"mimeType": "audio/opus"}]


async def expect_rpc_error(coro, code: int, name: str) -> RpcError:
    try:
        await coro
    except RpcError as e:
        assert (e.code, e.name) == (code, name), f"expected {code} {name}, got {e}"
        assert e.detail, e
        return e
    raise AssertionError(f"expected {code} {name}, the request succeeded")


async def subscriptions_of(member: Member, room_id: str) -> list[dict]:
    room = (await member.conn.call("getRoom", {"roomId": room_id}))["room"]
    return [s for s in room["subscriptions"] if s["subscriberId"] == member.id]


def test_subscriber_is_refused_a_codec_it_cannot_decode(server):
    async def body() -> None:
        room = await create_room(server.url, unique_name("codec"))
        a = await Member.join(server.url, room["id"], "A")
        b = await Member.join(server.url, room["id"], "B")
        sinks = []
        try:
            pub_audio = await a.publish(SineAudioTrack())
            pub_video = await a.publish(SyntheticVideoTrack(), codec="video/H264")
            assert pub_video.publication["codecCapabilities"] == [{"mimeType": "video/H264"}], pub_video.publication

            version = (await b.conn.call("getRoom", {"roomId": room["id"]}))["room"]["version"]
            offers = len(b.conn.offers)
            e = await expect_rpc_error(b.subscribe(pub_video.id, codecCapabilities=VP8_OPUS), 415, "codecNotSupported")
            assert "video/H264" in e.detail, e
            # Nothing changed: no subscription, no event, no offer.
            after = (await b.conn.call("getRoom", {"roomId": room["id"]}))["room"]
            assert after["version"] == version, (version, after["version"])
            assert [s for s in after["subscriptions"] if s["subscriberId"] == b.id] == []
            assert len(b.conn.offers) == offers

            for bad in ([{"mimeType": "VP8"}], [{"mimeType": "video/"}], [{"mimeType": "video/VP8", "x": 1}],
                        [{"mimeType": 8}], ["video/VP8"], [{"mimeType": "video/VP8"}] * 65,
                        [{"mimeType": "video/" + "x" * 64}]):
                await expect_rpc_error(b.subscribe(pub_video.id, codecCapabilities=bad), 400, "invalidParameter")
            await expect_rpc_error(b.subscribe(pub_video.id, codecCapabilities="video/VP8"), -32602, "invalidParams")

            # The audio is Opus, which B decodes; the video once B names H264 (any case).
            sa = await b.subscribe(pub_audio.id, codecCapabilities=VP8_OPUS)
            sv = await b.subscribe(pub_video.id, codecCapabilities=VP8_OPUS + [{"mimeType": "video/h264"}])
            vs, as_ = VideoSink(sv.track, "b-video"), AudioSink(sa.track, "b-audio")
            sinks += [vs, as_]
            assert await vs.wait_frames(20, 15), f"B decoded {vs.frames} H264 frames"
            await await_until(lambda: as_.frames >= 50, 10, "B to receive 50 audio frames", state=lambda: as_.frames)
            tone = as_.tone_problem(SINE_HZ)   # A's sine, by its frequency
            assert not tone, tone
            assert len(await subscriptions_of(b, room["id"])) == 2
            assert b.offer_errors == []
        finally:
            for s in sinks:
                s.stop()
            for m in (a, b):
                await m.close()

    run_async(body(), timeout=60)


def reject_mid(mid: str):
    """An answer rewriter that rejects (port 0) the m-section with `mid`."""
    def rewrite(sdp: str) -> str:
        sections = re.split(r"(?=\r\nm=)", sdp)
        out = []
        for sec in sections:
            if f"\r\na=mid:{mid}\r\n" in sec + "\r\n":
                sec = re.sub(r"^\r\nm=(\w+) \d+ ", r"\r\nm=\1 0 ", sec)
            out.append(sec)
        return "".join(out)
    return rewrite


def test_answer_that_rejects_a_stream_ends_its_subscription(server):
    async def body() -> None:
        room = await create_room(server.url, unique_name("codecans"))
        a = await Member.join(server.url, room["id"], "A")
        c = await Member.join(server.url, room["id"], "C")
        sinks = []
        try:
            pub_audio = await a.publish(SineAudioTrack())
            pub_video = await a.publish(SyntheticVideoTrack(), codec="video/H264")
            sa = await c.subscribe(pub_audio.id)
            as_ = AudioSink(sa.track, "c-audio")
            sinks.append(as_)
            await await_until(lambda: as_.frames >= 25, 10, "C to receive 25 audio frames", state=lambda: as_.frames)

            start = len(c.conn.events)
            offers = len(c.conn.offers)
            c.answer_rewriter = reject_mid("1")      # the video's m-section: audio took mid 0
            sv = await c.subscribe(pub_video.id)
            assert sv.mid == "1", sv.mid
            ev = await c.conn.wait_event(lambda e: e.get("type") == "publicationUnsubscribed", 10, start)
            assert ev.get("reason") == "codecNotSupported", ev
            assert ev["data"]["subscription"]["id"] == sv.subscription["id"], ev
            # The server's next offer drops the stream (m-line inactive), and C answers it.
            await c.conn.wait_offers(offers + 1, 10)
            await c.wait_offers_settled(10)
            latest = c.conn.offers[-1]["offer"]["sdp"]
            video = [s for s in re.split(r"(?=\r\nm=)", latest) if "\r\na=mid:1\r\n" in s + "\r\n"]
            assert video and "a=inactive" in video[0], latest
            subs = await subscriptions_of(c, room["id"])
            assert [s["publicationId"] for s in subs] == [pub_audio.id], subs
            # The audio subscription keeps flowing.
            before = as_.frames
            await asyncio.sleep(1.0)
            assert as_.frames - before >= 25, (before, as_.frames)
            assert c.offer_errors == []
            # Subscribing again is possible (and, with aiortc's own answer, works).
            c.answer_rewriter = None
            sv2 = await c.subscribe(pub_video.id)
            vs = VideoSink(sv2.track, "c-video")
            sinks.append(vs)
            assert await vs.wait_frames(20, 15), f"C decoded {vs.frames} frames after subscribing again"
        finally:
            for s in sinks:
                s.stop()
            for m in (a, c):
                await m.close()

    run_async(body(), timeout=60)
