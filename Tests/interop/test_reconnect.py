"""Reconnect rules: a server offer the lost connection never answered is offered again on the
connection that takes the member over with `keepalive {memberId, reconnectSecret}` (without the
join's secret the takeover is refused and changes nothing); and closing a room tells its members
`closed` (after their memberLeft roomClosed), not only event listeners."""
from __future__ import annotations

import json
import re

from media import SyntheticVideoTrack
from minato_client import (
    Connection, Member, assert_rpc_error, create_room, event_matcher, run_async, sdp_media_sections, unique_name,
)


async def unanswered_offer_is_offered_again(url: str) -> None:
    room = await create_room(url, unique_name("reconnect"))
    a = await Member.join(url, room["id"], "A")
    first = await Connection(url, "B-1").connect()
    second = None
    try:
        pub = await a.publish(SyntheticVideoTrack())
        joined = await first.call("join", {"roomId": room["id"], "name": "B"})
        b, secret = joined["member"], joined.get("reconnectSecret")
        assert isinstance(secret, str) and re.fullmatch(r"[0-9a-f]{64}", secret), joined
        assert "reconnectSecret" not in b, b
        res = await first.call("subscribe", {"memberId": b["id"], "publicationId": pub.id})
        await first.close()          # the offer is never answered on this connection
        second = await Connection(url, "B-2").connect()
        # Without the secret, or with another one, the takeover is refused and changes nothing.
        wrong = ("0" if secret[0] != "0" else "1") + secret[1:]
        for params in ({"memberId": b["id"]}, {"memberId": b["id"], "reconnectSecret": wrong}):
            err = assert_rpc_error(await second.call_raw("keepalive", params), 403, "insufficientPermissions")
            assert "reconnectSecret" in err["data"]["detail"], err
        assert_rpc_error(await second.call_raw("answer", {"memberId": b["id"], "answer": {"type": "answer", "sdp": "v=0\r\n"}}),
                         409, "notJoined")
        # a round trip on the same socket is the barrier: an offer the refused takeovers had
        # queued for it would be written before this reply
        await second.call("getRoom", {"roomId": room["id"]})
        assert second.offers == [], "a refused takeover must not re-send the offer"
        room_now = (await a.conn.call("getRoom", {"roomId": room["id"]}))["room"]
        assert b["id"] in [m["id"] for m in room_now["members"]], room_now
        assert secret not in json.dumps(room_now) and secret not in json.dumps(a.conn.events), \
            "the secret must only be in the join result"
        ttl = await second.call("keepalive", {"memberId": b["id"], "reconnectSecret": secret})
        assert ttl["ttlSec"] > 0
        await second.wait_offers(1, timeout=5)
        offer = second.offers[0]
        assert offer["memberId"] == b["id"], offer
        mids = {s["mid"]: s for s in sdp_media_sections(offer["offer"]["sdp"])}
        assert mids[res["mid"]]["direction"] == "sendonly", mids
        # The new connection is the member's now: its answer is examined (here: refused as SDP), not refused as notJoined.
        resp = await second.call_raw("answer", {"memberId": b["id"], "answer": {"type": "answer", "sdp": "v=0\r\n"}})
        assert "error" in resp and resp["error"]["data"]["name"] == "invalidSdp", resp
    finally:
        if second:
            await second.close()
        await a.close()


async def take_over_with_the_secret(url: str) -> None:
    """Member.take_over: a second socket takes a live member over (the first still open); the
    first socket's member requests are then refused, the new one's work and get the events."""
    room = await create_room(url, unique_name("takeover"))
    a = await Member.join(url, room["id"], "A")
    w = await Member.join(url, room["id"], "W")
    old = a.conn
    try:
        assert a.reconnect_secret and re.fullmatch(r"[0-9a-f]{64}", a.reconnect_secret), a.reconnect_secret
        assert (await a.take_over(close_old=False))["ttlSec"] > 0
        assert a.conn is not old
        assert_rpc_error(await old.call_raw("updateMemberMetadata", {"memberId": a.id, "metadata": "old"}),
                         409, "notJoined")
        await a.conn.call("updateMemberMetadata", {"memberId": a.id, "metadata": "moved"})
        for c in (w.conn, a.conn):
            ev = await c.wait_event(event_matcher("memberMetadataUpdated", member_id=a.id), timeout=5)
            assert ev["data"]["member"]["metadata"] == "moved", ev
        assert not [e for e in old.events if e["type"] == "memberMetadataUpdated"], "the old socket still gets events"
        assert (await a.keepalive())["ttlSec"] > 0
        members = (await w.conn.call("getRoom", {"roomId": room["id"]}))["room"]["members"]
        assert sorted(m["id"] for m in members) == sorted([a.id, w.id]), members
    finally:
        await old.close()
        await a.close()
        await w.close()


async def members_hear_closed(url: str) -> None:
    room = await create_room(url, unique_name("closing"))
    a = await Member.join(url, room["id"], "A")
    try:
        await a.conn.call("closeRoom", {"roomId": room["id"]})
        left = await a.conn.wait_event(event_matcher("memberLeft", member_id=a.id), timeout=5)
        assert left["reason"] == "roomClosed", left
        closed = await a.conn.wait_event(lambda ev: ev["type"] == "closed", timeout=5)
        assert closed["version"] == left["version"] + 1, (left, closed)
    finally:
        await a.close()


def test_unanswered_offer_is_offered_again_after_takeover(server):
    run_async(unanswered_offer_is_offered_again(server.url), timeout=60)


def test_members_hear_closed(server):
    run_async(members_hear_closed(server.url), timeout=30)


def test_take_over_with_the_secret(server):
    run_async(take_over_with_the_secret(server.url), timeout=30)
