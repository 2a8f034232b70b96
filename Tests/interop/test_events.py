"""Room events: strictly increasing `version` per member, `subscribeRoomEvents` history (paged:
`{roomId, offset, limit?}` -> `{events, nextOffset}`), `replace:true` join (old member leaves
with reason `replaced`), duplicate names refused."""
from __future__ import annotations

import math

from media import SyntheticVideoTrack
from minato_client import (
    Connection, Member, assert_rpc_error, create_room, event_matcher, run_async, unique_name,
)
from waiting import await_until


def versions(events: list[dict]) -> list[int]:
    return [e["version"] for e in events]


def assert_strictly_increasing(label: str, events: list[dict]) -> None:
    v = versions(events)
    assert all(isinstance(x, int) for x in v), f"{label}: non-integer versions {v}"
    assert all(b > a for a, b in zip(v, v[1:])), f"{label}: versions not strictly increasing: {v}"


async def scenario(url: str) -> None:
    room = await create_room(url, unique_name("events"))
    rid = room["id"]
    base = room.get("version", 0)
    members: list[Member] = []
    conns: list[Connection] = []
    try:
        a = await Member.join(url, rid, "A"); members.append(a)
        b = await Member.join(url, rid, "B"); members.append(b)
        pub = await a.publish(SyntheticVideoTrack())
        sub = await b.subscribe(pub.id)
        await a.conn.call("updateMemberMetadata", {"memberId": a.id, "metadata": "hello"})
        await a.conn.call("updatePublicationMetadata", {"publicationId": pub.id, "metadata": "cam"})
        await a.conn.call("disablePublication", {"publicationId": pub.id})
        await a.conn.call("enablePublication", {"publicationId": pub.id})
        await b.unsubscribe(sub.subscription["id"])
        await a.conn.wait_event(event_matcher("publicationUnsubscribed"), timeout=5)

        # --- replace:true: R joins, then joins again with the same name from a new socket.
        r1 = await Member.join(url, rid, "R"); members.append(r1)
        dup = await Connection(url, "dup").connect(); conns.append(dup)
        assert_rpc_error(await dup.call_raw("join", {"roomId": rid, "name": "R"}), 409, "memberNameDuplicated")
        r2 = await Member.join(url, rid, "R", replace=True); members.append(r2)
        assert r2.id != r1.id
        ev = await a.conn.wait_event(event_matcher("memberLeft", member_id=r1.id), timeout=5)
        assert ev.get("reason") == "replaced", ev
        await a.conn.wait_event(event_matcher("memberJoined", member_id=r2.id), timeout=5)
        room_now = (await a.conn.call("getRoom", {"roomId": rid}))["room"]
        assert sorted((m["name"], m["id"]) for m in room_now["members"]) == \
            sorted([("A", a.id), ("B", b.id), ("R", r2.id)]), room_now["members"]
        # a duplicate of a live name is refused (the replaced one is gone, the new one is live)
        assert_rpc_error(await dup.call_raw("join", {"roomId": rid, "name": "R"}), 409, "memberNameDuplicated")
        # every member in the room has received every event up to the room's current version
        now = room_now["version"]
        live = (a, b, r2)
        await await_until(lambda: all(m.conn.events and m.conn.events[-1]["version"] >= now for m in live), 5,
                          f"A, B and R to receive every event up to version {now}",
                          state=lambda: {m.label: m.conn.events[-1]["version"] if m.conn.events else None for m in live})

        # --- every member saw strictly increasing versions; A saw every event since its join.
        for m in members:
            assert_strictly_increasing(m.label, m.conn.events)
            assert all(e["roomId"] == rid for e in m.conn.events)
        va = versions(a.conn.events)
        assert va == list(range(va[0], va[0] + len(va))), f"A missed events: {va}"
        first = a.conn.events[0]
        assert first["type"] == "memberJoined" and first["data"]["member"]["id"] == a.id, \
            f"A's first event should be its own memberJoined: {first}"
        assert first["version"] == base + 1, f"first event of a new room has version {first['version']}, room was {base}"

        # --- subscribeRoomEvents from offset 0: the whole history, in order, then live events.
        obs = await Connection(url, "observer").connect(); conns.append(obs)
        hist = await obs.room_events(rid, 0)
        assert_strictly_increasing("history", hist)
        assert versions(hist) == list(range(base + 1, base + 1 + len(hist))), versions(hist)
        seen = {e["version"]: (e["type"], e.get("reason")) for e in a.conn.events}
        for e in hist:
            if e["version"] in seen:
                assert seen[e["version"]] == (e["type"], e.get("reason")), (e, seen[e["version"]])
        types = [e["type"] for e in hist]
        for t in ("memberJoined", "streamPublished", "publicationSubscribed", "memberMetadataUpdated",
                  "publicationMetadataUpdated", "publicationDisabled", "publicationEnabled",
                  "publicationUnsubscribed", "memberLeft"):
            assert t in types, f"history lacks {t}: {types}"
        assert hist[-1]["version"] == va[-1], (versions(hist), va)
        # offset k returns only version > k
        part = await dup.room_events(rid, base + 3)
        assert versions(part) == [v for v in versions(hist) if v > base + 3], versions(part)
        # pages of 5: the same history; a page that leaves more behind ends at nextOffset
        pager = await Connection(url, "pager").connect(); conns.append(pager)
        pages, offset = [], base
        while True:
            page, nxt = await pager.room_events_page(rid, offset, limit=5)
            assert 0 < len(page) <= 5 or (not page and nxt is None), (offset, versions(page), nxt)
            pages.append(page)
            if nxt is None:
                break
            assert nxt == page[-1]["version"], (versions(page), nxt)
            offset = nxt
        assert [v for p in pages for v in versions(p)] == versions(hist), [versions(p) for p in pages]
        assert len(pages) == max(1, math.ceil(len(hist) / 5)), [versions(p) for p in pages]
        # live events follow on the observer socket
        await b.leave()
        ev = await obs.wait_event(event_matcher("memberLeft", member_id=b.id), timeout=5)
        assert ev.get("reason") == "left" and ev["version"] == hist[-1]["version"] + 1, ev
        assert_strictly_increasing("observer live", obs.events)
        assert obs.events[0]["version"] > hist[-1]["version"], "live events repeated the history"
    finally:
        for m in members:
            await m.close()
        for c in conns:
            await c.close()


def test_event_versions_history_replace_and_duplicates(server):
    run_async(scenario(server.url), timeout=60)


async def paging_scenario(url: str) -> None:
    """More events than a page (default 100): the first page has 100 and nextOffset, the second
    the rest and nextOffset null; `limit` outside 1...rooms.maxEventsPerPage is refused; asking
    again on a subscribed socket does not duplicate its live events."""
    room = await create_room(url, unique_name("paging"))
    rid = room["id"]
    base = room.get("version", 0)
    a = await Member.join(url, rid, "A")
    reader = None
    try:
        for i in range(130):
            await a.conn.call("updateMemberMetadata", {"memberId": a.id, "metadata": f"m{i}"})
        reader = await Connection(url, "reader").connect()
        first, nxt = await reader.room_events_page(rid, base)
        assert len(first) == 100 and nxt == first[-1]["version"], (len(first), nxt)
        assert versions(first) == list(range(base + 1, base + 101)), versions(first)
        second, nxt2 = await reader.room_events_page(rid, nxt)
        assert nxt2 is None and versions(second) == list(range(base + 101, base + 132)), (versions(second), nxt2)
        assert second[-1]["type"] == "memberMetadataUpdated" and second[-1]["data"]["member"]["metadata"] == "m129"
        assert versions(await reader.room_events(rid, base, limit=100)) == list(range(base + 1, base + 132))
        # the end of the log: no events, nextOffset null
        assert await reader.room_events_page(rid, base + 131) == ([], None)
        for bad in (0, -1, 101):
            resp = await reader.call_raw("subscribeRoomEvents", {"roomId": rid, "offset": base, "limit": bad})
            assert_rpc_error(resp, 400, "invalidParameter")
        # live events reach the socket once, however often it asked for pages
        await a.conn.call("updateMemberMetadata", {"memberId": a.id, "metadata": "live"})
        ev = await reader.wait_event(lambda e: e["type"] == "memberMetadataUpdated"
                                     and e["data"]["member"]["metadata"] == "live", timeout=5)
        # a later event is the barrier: events reach a socket in version order, so once "after"
        # has arrived a duplicate of "live" would have arrived before it
        await a.conn.call("updateMemberMetadata", {"memberId": a.id, "metadata": "after"})
        await reader.wait_event(lambda e: e["type"] == "memberMetadataUpdated"
                                and e["data"]["member"]["metadata"] == "after", timeout=5)
        assert [e["version"] for e in reader.events].count(ev["version"]) == 1, versions(reader.events)
        assert_strictly_increasing("reader live", reader.events)
    finally:
        if reader:
            await reader.close()
        await a.close()


def test_subscribe_room_events_pages(server):
    run_async(paging_scenario(server.url), timeout=60)
