"""(e) Bad input gets the exact error, the socket stays open, and B keeps decoding A's video."""
from __future__ import annotations

import json
import re


from media import SyntheticVideoTrack, VideoSink, measure_window
from minato_client import (
    Connection, Member, assert_rpc_error, create_room, new_peer_connection, run_async, unique_name,
)


async def still_serves(conn: Connection, room_id: str) -> None:
    """A following valid request on the same socket works."""
    assert conn.is_open, f"{conn.label}: the server closed the socket after bad input"
    res = await conn.call("getRoom", {"roomId": room_id})
    assert res["room"]["id"] == room_id


async def scenario(url: str) -> None:
    room = await create_room(url, unique_name("badinput"))
    rid = room["id"]
    members: list[Member] = []
    sink = None
    pcs = []
    try:
        a = await Member.join(url, rid, "A"); members.append(a)
        b = await Member.join(url, rid, "B"); members.append(b)
        x = await Member.join(url, rid, "X"); members.append(x)
        video = SyntheticVideoTrack()
        pub = await a.publish(video)
        sub = await b.subscribe(pub.id)
        sink = VideoSink(sub.track, "B-video")
        assert await sink.wait_frames(5, 10), "B decoded no video within 10 s"
        first_sent, frames_before = video.frames_sent, sink.frames
        conn = x.conn

        # 1. malformed JSON -> -32700 (id null)
        await conn.send_text('{"jsonrpc":"2.0","id":1,"method":"getRoom",')
        resp = await conn.next_orphan(timeout=5)
        assert_rpc_error(resp, -32700)
        assert resp.get("id") is None, resp
        await still_serves(conn, rid)

        # 2. unknown method -> -32601
        resp = await conn.call_raw("noSuchMethod", {"roomId": rid})
        assert_rpc_error(resp, -32601)
        await still_serves(conn, rid)

        # 2b. a JSON object that is not a request (no method) -> -32600
        resp = await conn.request_text(json.dumps({"jsonrpc": "2.0", "id": "no-method"}), "no-method")
        assert_rpc_error(resp, -32600)
        await still_serves(conn, rid)

        # 3. invalid SDP -> invalidSdp, the offending line in data.detail
        pc = new_peer_connection(); pcs.append(pc)
        tr = pc.addTransceiver(SyntheticVideoTrack(), direction="sendonly")
        await pc.setLocalDescription(await pc.createOffer())
        good = pc.localDescription.sdp
        bad, n = re.subn(r"^m=video \d+ ", "m=video notaport ", good, count=1, flags=re.M)
        assert n == 1
        resp = await conn.call_raw("publish", {"memberId": x.id, "contentType": "video", "mid": tr.mid,
                                               "offer": {"type": "offer", "sdp": bad}})
        err = assert_rpc_error(resp, 400, "invalidSdp")
        detail = (err.get("data") or {}).get("detail") or ""
        assert "m=video notaport" in detail, f"invalidSdp detail should quote the offending line: {detail!r}"
        await still_serves(conn, rid)

        # 3b. simulcast offers Minato cannot take -> invalidParameter naming why, nothing published
        no_ssrc = re.sub(r"^a=(ssrc|ssrc-group):.*\r\n", "", good, flags=re.M)
        video_m = no_ssrc.index("m=video")
        def with_simulcast(lines: str) -> str:
            end = no_ssrc.find("\r\nm=", video_m + 1)
            end = len(no_ssrc) if end < 0 else end + 2
            return no_ssrc[:end] + lines + no_ssrc[end:]
        for lines, words in (
                ("a=rid:l send\r\na=rid:h send\r\na=simulcast:send l;h\r\n", "rtp-stream-id"),
                ("a=extmap:14 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r\na=rid:l send\r\n"
                 "a=simulcast:send l;z\r\n", "no a=rid:z send line")):
            resp = await conn.call_raw("publish", {"memberId": x.id, "contentType": "video", "mid": tr.mid,
                                                   "offer": {"type": "offer", "sdp": with_simulcast(lines)}})
            err = assert_rpc_error(resp, 400, "invalidParameter")
            detail = (err.get("data") or {}).get("detail") or ""
            assert words in detail, f"the simulcast error should say why ({words!r}): {detail!r}"
            await still_serves(conn, rid)

        # 4. unknown publication -> publicationNotFound
        resp = await conn.call_raw("subscribe", {"memberId": x.id, "publicationId": "no-such-publication"})
        assert_rpc_error(resp, 404, "publicationNotFound")
        await still_serves(conn, rid)

        # 5. subscribing to one's own publication -> cannotSubscribeOwnPublication (on A's socket)
        resp = await a.conn.call_raw("subscribe", {"memberId": a.id, "publicationId": pub.id})
        assert_rpc_error(resp, 409, "cannotSubscribeOwnPublication")
        await still_serves(a.conn, rid)

        # 6. a duplicate member name -> memberNameDuplicated (on a fresh socket and on X's)
        resp = await conn.call_raw("join", {"roomId": rid, "name": "B"})
        assert_rpc_error(resp, 409, "memberNameDuplicated")
        await still_serves(conn, rid)
        fresh = await Connection(url, "fresh").connect()
        try:
            assert_rpc_error(await fresh.call_raw("join", {"roomId": rid, "name": "A"}), 409, "memberNameDuplicated")
            await still_serves(fresh, rid)
        finally:
            await fresh.close()

        # No state changed: still exactly A, B, X; one publication; B's subscription intact.
        room_now = (await conn.call("getRoom", {"roomId": rid}))["room"]
        assert sorted(m["name"] for m in room_now["members"]) == ["A", "B", "X"], room_now["members"]
        assert [p["id"] for p in room_now["publications"]] == [pub.id], room_now["publications"]
        assert [s["id"] for s in room_now["subscriptions"]] == [sub.subscription["id"]], room_now["subscriptions"]

        # B kept decoding A's video across the whole bad-input phase.
        last_sent = video.frames_sent - 1
        tail = await measure_window(video, [sink], window=1.0)
        decoded = sink.decoded_in(first_sent, last_sent)
        sent = last_sent - first_sent + 1
        print(f"bad input: B decoded {decoded}/{sent} of A's frames during the phase; after: {tail}")
        assert sink.frames > frames_before
        assert decoded >= 0.8 * sent, f"B decoded only {decoded}/{sent} frames during the bad-input phase"
        d2, s2 = tail["B-video"]
        assert d2 >= 0.8 * s2, f"B decoded only {d2}/{s2} frames after the bad-input phase"
    finally:
        if sink:
            sink.stop()
        for pc in pcs:
            await pc.close()
        for m in members:
            await m.close()


def test_bad_input_errors_and_media_continues(server):
    run_async(scenario(server.url), timeout=90)
