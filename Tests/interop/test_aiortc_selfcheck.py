"""Checks the harness itself, with no Minato: aiortc peers talking to aiortc peers on lo.

It plays the SFU's two roles with aiortc so the suite's plumbing is proven before the server:
- send side: a publisher offers (audio first, then a re-offer adding video, like `publish`
  twice on one connection) and an "ingress" peer answers;
- recv side: an "egress" peer offers like the server does (sendonly m-lines), adding an
  m-line in a re-offer and later setting one `inactive`; the subscriber answers each offer.
The subscriber must decode >= 80% of the publisher's frames at 320x240 and hear the sine (its
frequency: media.AudioSink.tone_problem).
"""
from __future__ import annotations

from aiortc import RTCRtpSender, RTCSessionDescription
from aiortc.contrib.media import MediaRelay

from media import HEIGHT, WIDTH, AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink, measure_window
from minato_client import new_peer_connection, run_async
from waiting import await_until


def _mline_directions(sdp: str) -> dict[str, str]:
    """mid -> direction of each m-line."""
    out, mid, direction = {}, None, None
    for line in sdp.splitlines() + ["m=end"]:
        if line.startswith("m="):
            if mid is not None:
                out[mid] = direction
            mid, direction = None, "sendrecv"
        elif line.startswith("a=mid:"):
            mid = line[6:].strip()
        elif line[2:] in ("sendonly", "recvonly", "sendrecv", "inactive") and line.startswith("a="):
            direction = line[2:]
    return out


async def _offer_answer(offerer, answerer) -> tuple[str, str]:
    await offerer.setLocalDescription(await offerer.createOffer())
    await answerer.setRemoteDescription(offerer.localDescription)
    await answerer.setLocalDescription(await answerer.createAnswer())
    await offerer.setRemoteDescription(answerer.localDescription)
    return offerer.localDescription.sdp, answerer.localDescription.sdp


async def _wait_track(pc, mid: str, timeout: float = 5):
    def track():
        t = next((t for t in pc.getTransceivers() if t.mid == mid), None)
        return t.receiver.track if t is not None else None
    return await await_until(track, timeout, f"a receiving track for mid {mid}")


async def _selfcheck() -> None:
    audio, video = SineAudioTrack(), SyntheticVideoTrack()
    pub = new_peer_connection()          # the publisher's send connection
    ingress = new_peer_connection()      # plays the server's side of it
    egress = new_peer_connection()       # plays the server's side of a subscriber's recv connection
    sub = new_peer_connection()          # the subscriber's recv connection
    relay = MediaRelay()
    received: dict[str, object] = {}

    @ingress.on("track")
    def on_track(track):
        received[track.kind] = track

    try:
        # --- send side: audio, then a re-offer on the stable connection adding video ---------
        ta = pub.addTransceiver(audio, direction="sendonly")
        offer1, answer1 = await _offer_answer(pub, ingress)
        assert pub.signalingState == "stable" and ta.mid == "0"
        tv = pub.addTransceiver(video, direction="sendonly")
        offer2, answer2 = await _offer_answer(pub, ingress)
        assert tv.mid == "1", tv.mid
        assert _mline_directions(offer2) == {"0": "sendonly", "1": "sendonly"}, offer2
        assert _mline_directions(answer2) == {"0": "recvonly", "1": "recvonly"}, answer2
        await await_until(lambda: {"audio", "video"} <= set(received), 5, "the ingress peer's audio and video tracks",
                          state=lambda: sorted(received))
        assert set(received) == {"audio", "video"}, received

        # --- recv side: server-style offers. First only video... --------------------------
        egress.addTransceiver(relay.subscribe(received["video"]), direction="sendonly")
        o1, a1 = await _offer_answer(egress, sub)
        assert _mline_directions(a1) == {"0": "recvonly"}, a1
        vsink = VideoSink(await _wait_track(sub, "0"), "sub-video")
        # ...then a re-offer that adds an audio m-line (a second subscription).
        egress.addTransceiver(relay.subscribe(received["audio"]), direction="sendonly")
        o2, a2 = await _offer_answer(egress, sub)
        assert _mline_directions(a2) == {"0": "recvonly", "1": "recvonly"}, a2
        asink = AudioSink(await _wait_track(sub, "1"), "sub-audio")

        assert await vsink.wait_frames(5, 10), "subscriber decoded no video within 10 s"
        result = await measure_window(video, [vsink], window=5.0)
        decoded, sent = result["sub-video"]
        print(f"selfcheck: subscriber decoded {decoded}/{sent} frames ({100 * decoded / sent:.0f}%), "
              f"sizes {vsink.sizes}, audio frames {asink.frames} loud {asink.loud_frames} peak {asink.max_amplitude}")
        assert sent >= 100, f"publisher sent only {sent} frames in 5 s"
        assert decoded >= 0.8 * sent, f"decoded {decoded}/{sent} < 80%"
        assert set(vsink.sizes) == {(WIDTH, HEIGHT)}, vsink.sizes
        assert asink.loud_frames > 50, (asink.frames, asink.loud_frames)
        tone = asink.tone_problem(audio.frequency)      # the publisher's sine, by its frequency
        assert not tone, tone

        # --- re-offer with the video m-line inactive (an ended subscription, port kept) ----
        vtr = next(t for t in egress.getTransceivers() if t.mid == "0")
        vtr.direction = "inactive"
        o3, a3 = await _offer_answer(egress, sub)
        assert _mline_directions(o3) == {"0": "inactive", "1": "sendonly"}, o3
        assert _mline_directions(a3) == {"0": "inactive", "1": "recvonly"}, a3
        assert sub.signalingState == "stable"
        loud = asink.loud_frames
        await await_until(lambda: asink.loud_frames > loud + 20, 3, "audio to keep flowing after the inactive re-offer",
                          state=lambda: f"{asink.loud_frames - loud} loud frames since")

        # --- a later subscription: a new m-line appended after the inactive one -----------
        egress.addTransceiver(relay.subscribe(received["video"]), direction="sendonly")
        o4, a4 = await _offer_answer(egress, sub)
        assert _mline_directions(a4) == {"0": "inactive", "1": "recvonly", "2": "recvonly"}, a4
        vsink2 = VideoSink(await _wait_track(sub, "2"), "sub-video-2")
        assert await vsink2.wait_frames(5, 10), "no frames on the m-line added after an inactive one"
        decoded2, sent2 = (await measure_window(video, [vsink2], window=2.0))["sub-video-2"]
        print(f"selfcheck: appended m-line decoded {decoded2}/{sent2}")
        assert decoded2 >= 0.8 * sent2, f"appended m-line decoded {decoded2}/{sent2} < 80%"
        vsink2.stop()
        vsink.stop()
        asink.stop()
    finally:
        for pc in (pub, ingress, egress, sub):
            await pc.close()


def test_aiortc_loop_with_renegotiation():
    run_async(_selfcheck(), timeout=60)


async def _h264() -> None:
    video = SyntheticVideoTrack()
    pub, peer = new_peer_connection(), new_peer_connection()
    tracks = []
    peer.on("track", tracks.append)
    try:
        tr = pub.addTransceiver(video, direction="sendonly")
        caps = RTCRtpSender.getCapabilities("video").codecs
        tr.setCodecPreferences([c for c in caps if c.mimeType == "video/H264"])
        offer, answer = await _offer_answer(pub, peer)
        assert "H264/90000" in offer and "VP8/90000" not in offer, offer
        assert "packetization-mode=1" in answer
        await await_until(lambda: tracks, 5, "the H264 track at the answering peer")
        sink = VideoSink(tracks[0], "h264")
        assert await sink.wait_frames(5, 10), "no H264 frames decoded"
        decoded, sent = (await measure_window(video, [sink], window=3.0))["h264"]
        print(f"selfcheck h264: decoded {decoded}/{sent} sizes {sink.sizes}")
        assert decoded >= 0.8 * sent and set(sink.sizes) == {(WIDTH, HEIGHT)}
        sink.stop()
    finally:
        await pub.close()
        await peer.close()


def test_aiortc_h264_codec_preference():
    run_async(_h264(), timeout=40)
