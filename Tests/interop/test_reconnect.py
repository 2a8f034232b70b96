"""Reconnect rules: a server offer the lost connection never answered is offered again on the
connection that takes the member over with `keepalive`; and closing a room tells its members
`closed` (after their memberLeft roomClosed), not only event listeners."""
from __future__ import annotations

from media import SyntheticVideoTrack
from minato_client import Connection, Member, create_room, event_matcher, run_async, sdp_media_sections, unique_name


async def unanswered_offer_is_offered_again(url: str) -> None:
    room = await create_room(url, unique_name("reconnect"))
    a = await Member.join(url, room["id"], "A")
    first = await Connection(url, "B-1").connect()
    second = None
    try:
        pub = await a.publish(SyntheticVideoTrack())
        b = (await first.call("join", {"roomId": room["id"], "name": "B"}))["member"]
        res = await first.call("subscribe", {"memberId": b["id"], "publicationId": pub.id})
        await first.close()          # the offer is never answered on this connection
        second = await Connection(url, "B-2").connect()
        ttl = await second.call("keepalive", {"memberId": b["id"]})
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
