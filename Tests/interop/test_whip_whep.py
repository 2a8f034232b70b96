"""WHIP and WHEP (issue 14) against the real server with aiortc as the HTTP client's WebRTC stack,
and every error status from a raw HTTP client.

(a) An aiortc WHIP client publishes VP8 + Opus into a room it names (the room is created): the
    session member is an ordinary `bot` member (memberJoined, streamPublished), an aiortc member
    subscribes over the WebSocket and decodes its video; DELETE ends it (memberLeft, reason
    `left`) and the session URL is gone (404).
(b) An aiortc WHEP player watches an aiortc publisher (H264 and Opus), decodes video and audio;
    it follows the publisher: when the publisher unpublishes and publishes again, the same
    m-sections carry the new publication. The admin API kicks the player (memberLeft `kicked`).
(c) Error statuses and ETag rules: 415, 400, 404, 405, 412, 428, 422, 204 (OPTIONS), with a
    short text/plain body naming the problem; a trickle fragment of 256 lines and 16 KiB is
    taken, one byte more is 413 and one line more 429 (`limitExceeded`); a preflight from the
    listed origin gets `Access-Control-Max-Age: 600`.
(d) A session whose transport closed (the client's DTLS close): its DELETE is still 200, once.
"""
from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Optional

from aiortc import RTCSessionDescription

from media import AudioSink, SineAudioTrack, SyntheticVideoTrack, VideoSink
from minato_client import Connection, Member, create_room, new_peer_connection, run_async, unique_name
from waiting import await_until

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# A page origin the server lists (CORS on the preflight); requests without Origin are unaffected.
APP_ORIGIN = "http://app.example"
MINATO_SERVER_ENV = {"MINATO_SERVER_ALLOWED_ORIGINS": APP_ORIGIN}


@dataclass
class Reply:
    status: int
    headers: dict[str, list[str]]
    text: str

    def header(self, name: str) -> Optional[str]:
        v = self.headers.get(name.lower())
        return v[0] if v else None


def http(method: str, url: str, body: Optional[str] = None, content_type: Optional[str] = None,
         headers: Optional[dict[str, str]] = None) -> Reply:
    req = urllib.request.Request(url, data=body.encode() if body is not None else None, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with _OPENER.open(req, timeout=15) as r:
            status, hdrs, text = r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, e.headers, e.read().decode()
    out: dict[str, list[str]] = {}
    for k, v in hdrs.items():
        out.setdefault(k.lower(), []).append(v)
    return Reply(status, out, text)


async def ahttp(*args, **kw) -> Reply:
    return await asyncio.get_running_loop().run_in_executor(None, lambda: http(*args, **kw))


def assert_status(r: Reply, status: int, word: str) -> None:
    assert r.status == status, f"expected {status}, got {r.status}: {r.text!r}"
    assert (r.header("content-type") or "").startswith("text/plain"), r.headers
    assert word in r.text and r.text.endswith("\n") and len(r.text) < 400, r.text


class WhipPublisher:
    """aiortc as a WHIP client: one offer with all candidates, VP8 (or `codec`) + Opus."""

    def __init__(self, codec: str = "video/VP8") -> None:
        self.pc = new_peer_connection()
        self.video, self.audio = SyntheticVideoTrack(), SineAudioTrack()
        self.codec = codec
        self.location: Optional[str] = None
        self.etag: Optional[str] = None

    async def post(self, url: str, headers: Optional[dict[str, str]] = None) -> Reply:
        from aiortc import RTCRtpSender
        self.pc.addTransceiver(self.audio, direction="sendonly")
        tv = self.pc.addTransceiver(self.video, direction="sendonly")
        caps = RTCRtpSender.getCapabilities("video").codecs
        tv.setCodecPreferences([c for c in caps if c.mimeType.lower() == self.codec.lower()]
                               + [c for c in caps if c.mimeType.lower() == "video/rtx"])
        await self.pc.setLocalDescription(await self.pc.createOffer())
        r = await ahttp("POST", url, self.pc.localDescription.sdp, "application/sdp", headers)
        if r.status == 201:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=r.text, type="answer"))
            self.location, self.etag = r.header("location"), r.header("etag")
        return r

    async def close(self) -> None:
        await self.pc.close()


class WhepPlayer:
    """aiortc as a WHEP player: recvonly audio + video, decoded by sinks."""

    def __init__(self) -> None:
        self.pc = new_peer_connection()
        self.video: Optional[VideoSink] = None
        self.audio: Optional[AudioSink] = None
        self.location: Optional[str] = None
        self.etag: Optional[str] = None
        self.answer = ""

        @self.pc.on("track")
        def on_track(track) -> None:
            if track.kind == "video":
                self.video = VideoSink(track, "whep-video")
            else:
                self.audio = AudioSink(track, "whep-audio")

    async def post(self, url: str, headers: Optional[dict[str, str]] = None) -> Reply:
        self.pc.addTransceiver("audio", direction="recvonly")
        self.pc.addTransceiver("video", direction="recvonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        r = await ahttp("POST", url, self.pc.localDescription.sdp, "application/sdp", headers)
        if r.status == 201:
            self.answer = r.text
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=r.text, type="answer"))
            self.location, self.etag = r.header("location"), r.header("etag")
        return r

    async def close(self) -> None:
        for s in (self.video, self.audio):
            if s:
                s.stop()
        await self.pc.close()


async def room_by_name(server, name: str) -> dict:
    conn = await Connection(server.url, label="look").connect()
    try:
        return (await conn.call("findRoom", {"name": name}))["room"]
    finally:
        await conn.close()


def test_whip_publisher_is_an_ordinary_member(server):
    async def body() -> None:
        name = unique_name("whip")
        whip = WhipPublisher()
        watcher: Optional[Member] = None
        sinks = []
        try:
            r = await whip.post(f"{server.http}/whip/{name}?name=obs")
            assert r.status == 201, r
            assert r.header("content-type") == "application/sdp", r.headers
            assert re.fullmatch(r"/whip/session/[0-9a-f]{32}", r.header("location") or ""), r.headers
            assert re.fullmatch(r'"[0-9a-f]{16}"', r.header("etag") or ""), r.headers
            # A client without Origin (not a browser page) gets no CORS headers (test_hostile_http.py).
            assert not r.header("access-control-allow-origin") and r.header("vary") == "Origin", r.headers
            assert "a=ice-lite" in r.text and r.text.count("m=") == 2, r.text
            room = await room_by_name(server, name)
            obs = [m for m in room["members"] if m["name"] == "obs"]
            assert obs and obs[0]["type"] == "bot", room["members"]
            pubs = {p["contentType"]: p for p in room["publications"] if p["publisherId"] == obs[0]["id"]}
            assert set(pubs) == {"audio", "video"}, room["publications"]
            assert pubs["video"]["codecCapabilities"] == [{"mimeType": "video/VP8"}], pubs

            # A WebSocket member subscribes to the WHIP member and decodes it.
            watcher = await Member.join(server.url, room["id"], "watcher")
            sv = await watcher.subscribe(pubs["video"]["id"])
            sa = await watcher.subscribe(pubs["audio"]["id"])
            vs, as_ = VideoSink(sv.track, "watcher-video"), AudioSink(sa.track, "watcher-audio")
            sinks += [vs, as_]
            assert await vs.wait_frames(30, 20), f"the watcher decoded {vs.frames} frames of the WHIP publisher"
            await await_until(lambda: as_.frames >= 50, 10, "audio from the WHIP publisher", state=lambda: as_.frames)

            # DELETE ends the session: the member leaves with reason `left`; the URL is gone.
            start = len(watcher.conn.events)
            d = await ahttp("DELETE", server.http + whip.location)
            assert d.status == 200, d
            ev = await watcher.conn.wait_event(lambda e: e["type"] == "memberLeft" and e["data"]["member"]["name"] == "obs",
                                               10, start)
            assert ev.get("reason") == "left", ev
            assert_status(await ahttp("DELETE", server.http + whip.location), 404, "sessionNotFound")
            assert_status(await ahttp("PATCH", server.http + whip.location, "a=end-of-candidates\r\n",
                                      "application/trickle-ice-sdpfrag", {"If-Match": whip.etag}), 404, "sessionNotFound")
        finally:
            for s in sinks:
                s.stop()
            if watcher:
                await watcher.close()
            await whip.close()

    run_async(body(), timeout=60)


def test_whep_player_watches_and_follows_a_republishing_member(server):
    async def body() -> None:
        room = await create_room(server.url, unique_name("whep"))
        pub = await Member.join(server.url, room["id"], "cam")
        player = WhepPlayer()
        try:
            audio = await pub.publish(SineAudioTrack())
            video = await pub.publish(SyntheticVideoTrack(), codec="video/H264")
            r = await player.post(f"{server.http}/whep/{room['name']}/cam")
            assert r.status == 201, r
            assert re.fullmatch(r"/whep/session/[0-9a-f]{32}", player.location or ""), r.headers
            assert "a=sendonly" in r.text and "H264/90000" in r.text, r.text
            await await_until(lambda: player.video and player.audio, 10, "the player's tracks")
            assert await player.video.wait_frames(30, 20), f"the WHEP player decoded {player.video.frames} frames"
            await await_until(lambda: player.audio.frames >= 50, 10, "audio at the WHEP player",
                              state=lambda: player.audio.frames)
            rm = (await pub.conn.call("getRoom", {"roomId": room["id"]}))["room"]
            viewer = [m for m in rm["members"] if m["name"].startswith("whep-")]
            assert len(viewer) == 1 and viewer[0]["type"] == "bot", rm["members"]
            assert re.fullmatch(r"whep-[0-9a-f]{8}", viewer[0]["name"]), viewer
            assert re.fullmatch(r'"[0-9a-f]{16}"', player.etag or ""), r.headers
            subs = {s["publicationId"] for s in rm["subscriptions"] if s["subscriberId"] == viewer[0]["id"]}
            assert subs == {audio.id, video.id}, rm["subscriptions"]

            # The publisher republishes its camera: the player's video m-section carries it.
            await pub.conn.call("unpublish", {"publicationId": video.id})
            frames = player.video.frames
            again = await pub.publish(SyntheticVideoTrack(), codec="video/H264")
            assert await player.video.wait_frames(frames + 30, 20), \
                f"the player decoded {player.video.frames - frames} frames after the republish"
            rm = (await pub.conn.call("getRoom", {"roomId": room["id"]}))["room"]
            subs = {s["publicationId"] for s in rm["subscriptions"] if s["subscriberId"] == viewer[0]["id"]}
            assert subs == {audio.id, again.id}, rm["subscriptions"]
        finally:
            await player.close()
            await pub.close()

    run_async(body(), timeout=80)


def test_error_statuses_and_etag_rules(server):
    async def body() -> None:
        base = server.http
        room = await create_room(server.url, unique_name("whiperr"))
        pub = await Member.join(server.url, room["id"], "cam")
        whip = WhipPublisher()
        try:
            await pub.publish(SyntheticVideoTrack(), codec="video/H264")
            assert_status(await ahttp("POST", f"{base}/whip/{room['name']}", "v=0\r\n", "application/json"),
                          415, "unsupportedMediaType")
            assert_status(await ahttp("POST", f"{base}/whip/{room['name']}", "not sdp", "application/sdp"), 400, "invalidSdp")
            assert_status(await ahttp("POST", f"{base}/whip/bad%20name", "v=0\r\n", "application/sdp"), 400, "")
            assert_status(await ahttp("GET", f"{base}/whip/{room['name']}"), 405, "POST")
            assert_status(await ahttp("POST", f"{base}/whep/no-such-room/cam", "v=0\r\n", "application/sdp"), 404, "roomNotFound")
            assert_status(await ahttp("POST", f"{base}/whep/{room['name']}/nobody", "v=0\r\n", "application/sdp"),
                          404, "memberNotFound")
            opt = await ahttp("OPTIONS", f"{base}/whip/{room['name']}")
            assert opt.status == 204 and "POST" in (opt.header("allow") or ""), opt
            # A preflight from a listed page: CORS, cached for 600 s (docs/protocol.md).
            opt = await ahttp("OPTIONS", f"{base}/whip/{room['name']}",
                              headers={"Origin": APP_ORIGIN, "Access-Control-Request-Method": "POST"})
            assert opt.status == 204 and opt.header("access-control-allow-origin") == APP_ORIGIN, opt
            assert opt.header("access-control-max-age") == "600", opt.headers

            # A WHEP player that offers only VP8 cannot decode the member's H264 camera: 422.
            vp8_only = new_peer_connection()
            from aiortc import RTCRtpReceiver
            tv = vp8_only.addTransceiver("video", direction="recvonly")
            tv.setCodecPreferences([c for c in RTCRtpReceiver.getCapabilities("video").codecs if c.mimeType == "video/VP8"])
            await vp8_only.setLocalDescription(await vp8_only.createOffer())
            r = await ahttp("POST", f"{base}/whep/{room['name']}/cam", vp8_only.localDescription.sdp, "application/sdp")
            await vp8_only.close()
            assert_status(r, 422, "codecNotSupported")

            r = await whip.post(f"{base}/whip/{room['name']}")
            assert r.status == 201, r
            url = base + whip.location
            frag = "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\na=end-of-candidates\r\n"
            ufrag = re.search(r"a=ice-ufrag:(\S+)", whip.pc.localDescription.sdp).group(1)
            pwd = re.search(r"a=ice-pwd:(\S+)", whip.pc.localDescription.sdp).group(1)
            ok = frag.format(ufrag, pwd)
            assert_status(await ahttp("PATCH", url, ok, "application/sdp", {"If-Match": whip.etag}), 415, "trickle-ice-sdpfrag")
            assert_status(await ahttp("PATCH", url, ok, "application/trickle-ice-sdpfrag", {"If-Match": '"0000"'}), 412, "ETag")
            assert_status(await ahttp("PATCH", url, ok, "application/trickle-ice-sdpfrag"), 428, "If-Match")
            # New credentials without a password: 400 (a full ICE restart is test_ice_restart.py's).
            assert_status(await ahttp("PATCH", url, "a=ice-ufrag:newufrag\r\na=end-of-candidates\r\n",
                                      "application/trickle-ice-sdpfrag", {"If-Match": "*"}), 400, "ice-pwd")
            good = await ahttp("PATCH", url, ok, "application/trickle-ice-sdpfrag", {"If-Match": whip.etag})
            assert good.status == 204, good
            # Fragment limits: 256 lines and 16 KiB are read; one byte more is 413, one line more 429.
            lines = [f"a=x-unused-{k}".ljust(62, "x") + "\r\n" for k in range(256)]
            assert len("".join(lines)) == 16 * 1024
            frag_headers = {"If-Match": whip.etag}
            full = await ahttp("PATCH", url, "".join(lines), "application/trickle-ice-sdpfrag", frag_headers)
            assert full.status == 204, full
            over = await ahttp("PATCH", url, "y" + "".join(lines), "application/trickle-ice-sdpfrag", frag_headers)
            assert_status(over, 413, "limitExceeded")
            more = await ahttp("PATCH", url, "".join(f"a=x-{k}\r\n" for k in range(257)),
                               "application/trickle-ice-sdpfrag", frag_headers)
            assert_status(more, 429, "limitExceeded")
            assert "256" in more.text, more.text
            # The session's URL is 32 hex digits, its ETag 16 in quotes (the POST above had no ?name=).
            assert re.fullmatch(r"/whip/session/[0-9a-f]{32}", whip.location or ""), whip.location
            assert re.fullmatch(r'"[0-9a-f]{16}"', whip.etag or ""), whip.etag
            assert_status(await ahttp("GET", url), 405, "PATCH")
            assert_status(await ahttp("PATCH", f"{base}/whip/session/{'0' * 32}", ok, "application/trickle-ice-sdpfrag",
                                      {"If-Match": "*"}), 404, "sessionNotFound")
            # The server still serves: the WHIP member is in the room, and DELETE works.
            rm = (await pub.conn.call("getRoom", {"roomId": room["id"]}))["room"]
            named = [m["name"] for m in rm["members"] if m["name"].startswith("whip-")]
            assert len(named) == 1 and re.fullmatch(r"whip-[0-9a-f]{8}", named[0]), rm["members"]
            assert (await ahttp("DELETE", url)).status == 200
        finally:
            await whip.close()
            await pub.close()

    run_async(body(), timeout=60)


def test_a_reconnecting_broadcaster_replaces_its_old_session(server):
    """OBS posts again under its name after a network drop, while the old session still waits for
    its transport timeout: the old WHIP session is replaced (memberLeft, reason `replaced`); a
    WebSocket member's name is never taken (409)."""
    async def body() -> None:
        room = await create_room(server.url, unique_name("whiprepl"))
        person = await Member.join(server.url, room["id"], "alice")
        first, second, third = WhipPublisher(), WhipPublisher(), WhipPublisher()
        try:
            # alice's own memberJoined may arrive after her join's response; count from after it.
            await person.conn.wait_event(lambda e: e["type"] == "memberJoined"
                                         and e["data"]["member"]["name"] == "alice", 5, 0)
            start = len(person.conn.events)
            r = await first.post(f"{server.http}/whip/{room['name']}?name=obs")
            assert r.status == 201, r
            # The room's members hear of the WHIP member at once (no request of theirs needed).
            for kind in ("audio", "video"):
                await person.conn.wait_event(lambda e: e["type"] == "streamPublished"
                                             and e["data"]["publication"]["contentType"] == kind, 5, start)
            assert [e["type"] for e in person.conn.events[start:]] == ["memberJoined", "streamPublished", "streamPublished"]
            start = len(person.conn.events)
            r = await second.post(f"{server.http}/whip/{room['name']}?name=obs")
            assert r.status == 201, r
            ev = await person.conn.wait_event(lambda e: e["type"] == "memberLeft" and e["data"]["member"]["name"] == "obs",
                                              10, start)
            assert ev.get("reason") == "replaced", ev
            assert_status(await ahttp("DELETE", server.http + first.location), 404, "sessionNotFound")
            rm = (await person.conn.call("getRoom", {"roomId": room["id"]}))["room"]
            assert sorted(m["name"] for m in rm["members"]) == ["alice", "obs"], rm["members"]
            assert_status(await third.post(f"{server.http}/whip/{room['name']}?name=alice"), 409, "memberNameDuplicated")
            assert (await ahttp("DELETE", server.http + second.location)).status == 200
        finally:
            for w in (first, second, third):
                await w.close()
            await person.close()

    run_async(body(), timeout=60)


def test_delete_after_the_transport_closed_is_200(server):
    """A client's DTLS close can overtake its DELETE: the session ends with its transport
    (memberLeft, reason `transportClosed`), and the DELETE that follows is still 200 — once (the
    server remembers such a session for 30 s; the bound is unit-tested in WhipSessionTests)."""
    async def body() -> None:
        room = await create_room(server.url, unique_name("whipclose"))
        watcher = await Member.join(server.url, room["id"], "watcher")
        whip = WhipPublisher()
        try:
            start = len(watcher.conn.events)
            r = await whip.post(f"{server.http}/whip/{room['name']}?name=obs")
            assert r.status == 201, r
            await await_until(lambda: whip.pc.connectionState == "connected", 15, "the WHIP client to connect",
                              state=lambda: whip.pc.connectionState)
            await whip.close()
            ev = await watcher.conn.wait_event(lambda e: e["type"] == "memberLeft" and e["data"]["member"]["name"] == "obs",
                                               30, start)
            assert ev.get("reason") == "transportClosed", ev
            d = await ahttp("DELETE", server.http + whip.location)
            assert d.status == 200, d
            assert_status(await ahttp("DELETE", server.http + whip.location), 404, "sessionNotFound")
        finally:
            await whip.close()
            await watcher.close()

    run_async(body(), timeout=60)
