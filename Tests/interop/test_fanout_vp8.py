"""(a) A publishes Opus + VP8; B and C subscribe to both and decode >= 80% of A's frames
at 320x240 over 5 s, and hear non-silent audio."""
from __future__ import annotations

import asyncio
from typing import Optional

from media import HEIGHT, WIDTH, AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink, measure_window
from minato_client import Member, create_room, run_async, sdp_media_sections, unique_name


async def fanout(url: str, codec: Optional[str]) -> None:
    room = await create_room(url, unique_name("fanout"))
    members: list[Member] = []
    sinks = []
    try:
        a = await Member.join(url, room["id"], "A"); members.append(a)
        b = await Member.join(url, room["id"], "B"); members.append(b)
        c = await Member.join(url, room["id"], "C"); members.append(c)
        audio, video = SineAudioTrack(), SyntheticVideoTrack()
        pub_audio = await a.publish(audio)
        pub_video = await a.publish(video, codec=codec)   # a re-offer on A's send connection
        assert pub_audio.publication["contentType"] == "audio"
        assert pub_video.publication["contentType"] == "video"
        want = (codec or "video/VP8").lower()
        mimes = [c["mimeType"].lower() for c in pub_video.publication.get("codecCapabilities", [])]
        assert want in mimes, f"publication codecCapabilities {mimes}, expected {want}"
        # A's send connection: the server's answer accepted both m-lines (recvonly).
        answer = sdp_media_sections(a.send_pc.remoteDescription.sdp)
        assert [(m["mid"], m["direction"]) for m in answer] == [(pub_audio.mid, "recvonly"), (pub_video.mid, "recvonly")], answer

        video_sinks, audio_sinks = [], []
        for m in (b, c):
            sv = await m.subscribe(pub_video.id)
            sa = await m.subscribe(pub_audio.id)
            assert sv.subscription["publicationId"] == pub_video.id
            offer = {s["mid"]: s for s in sdp_media_sections(m.recv_pc.remoteDescription.sdp)}
            assert offer[sv.mid]["direction"] == "sendonly" and offer[sv.mid]["kind"] == "video", offer
            assert want.split("/")[1].lower() in [x.lower() for x in offer[sv.mid]["codecs"]], offer[sv.mid]
            assert "opus" in [x.lower() for x in offer[sa.mid]["codecs"]], offer[sa.mid]
            vs, as_ = VideoSink(sv.track, f"{m.label}-video"), AudioSink(sa.track, f"{m.label}-audio")
            video_sinks.append(vs); audio_sinks.append(as_); sinks += [vs, as_]

        for vs in video_sinks:
            assert await vs.wait_frames(3, 10), f"{vs.name}: no video decoded within 10 s of subscribing"
        loud_before = {s.name: s.loud_frames for s in audio_sinks}
        result = await measure_window(video, video_sinks, window=5.0)
        print(f"fanout {want}: {result}; audio loud frames "
              f"{ {s.name: s.loud_frames - loud_before[s.name] for s in audio_sinks} }")
        for vs in video_sinks:
            decoded, sent = result[vs.name]
            assert sent >= 100, f"A sent only {sent} frames in 5 s (is the machine overloaded?)"
            assert decoded >= 0.8 * sent, f"{vs.name}: decoded {decoded}/{sent} of A's frames (< 80%)"
            assert set(vs.sizes) == {(WIDTH, HEIGHT)}, f"{vs.name}: frame sizes {vs.sizes}"
        for s in audio_sinks:
            got = s.loud_frames - loud_before[s.name]
            assert got >= 100, f"{s.name}: {got} non-silent audio frames in ~6.5 s (peak {s.max_amplitude})"
        for m in members:
            assert not m.offer_errors, m.offer_errors
    finally:
        for s in sinks:
            s.stop()
        for m in members:
            await m.close()


def test_fanout_opus_vp8(server):
    run_async(fanout(server.url, None), timeout=90)
