"""The REST admin API and /metrics with auth on: access control and the exact error shape;
a member scoped to room X cannot touch room Y; kick (media stops at the subscriber within 1 s,
the kicked socket hears `kicked` and is closed with 4000); evict by name frees the name; room
close over REST releases the members' transports and the room's UDP ports; stats and metrics
count media; publication disable/enable, unpublish and subscription cancel over REST emit events."""
from __future__ import annotations

import asyncio
import time
import uuid

from admin_util import (
    ADMIN_SECRET, AUTH_SECRET, Admin, assert_http_error, claims, close_info, http,
    metric, mint, poll, rule, scrape, server_udp_ports, sign, with_token,
)
from conftest import ARTIFACTS, Server, minato_binary
from media import SineAudioTrack, SyntheticVideoTrack, VideoSink
from minato_client import Connection, Member, assert_rpc_error, event_matcher, run_async, sdp_media_sections

MINATO_SERVER_ENV = {"MINATO_AUTH_SECRET": AUTH_SECRET, "MINATO_ADMIN_API_SECRET": ADMIN_SECRET}


def uid(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


# ---- access control and error shape ------------------------------------------------------------

def test_rest_access_and_errors(server):
    base = server.http
    admin = Admin(base)
    room = admin.create_room(uid("rest-"))
    rid = room["id"]
    failures: list[str] = []
    # 401 without a bearer / with a wrong one; 403 with a non-admin token
    for headers, status, name in [
        ({}, 401, "invalidAuthToken"),
        ({"Authorization": "Bearer"}, 401, "invalidAuthToken"),
        ({"Authorization": "Bearer wrong-secret-0123456789"}, 401, "invalidAuthToken"),
        ({"Authorization": f"Basic {ADMIN_SECRET}"}, 401, "invalidAuthToken"),
        ({"Authorization": f"Bearer {mint(None)}"}, 403, "insufficientPermissions"),
        ({"Authorization": f"Bearer {mint(None, admin=False)}"}, 403, "insufficientPermissions"),
        ({"Authorization": f"Bearer {sign(claims(admin=True), 'another-secret-0123456789abcdef0')}"}, 401,
         "invalidAuthToken"),
        ({"Authorization": f"Bearer {mint(None, admin=True, exp=int(time.time()) - 10)}"}, 401, "authTokenExpired"),
    ]:
        for method, path, body in [("GET", "/v1/rooms", None), ("POST", "/v1/rooms", {"name": uid("denied-")}),
                                   ("GET", f"/v1/rooms/{rid}", None), ("DELETE", f"/v1/rooms/{rid}", None),
                                   ("PATCH", f"/v1/rooms/{rid}", {"metadata": "denied"})]:
            r = http(method, base + path, body, headers=headers)
            try:
                assert_http_error(r, status, name)
            except AssertionError as e:
                auth = headers.get("Authorization", "no Authorization")[:40]
                failures.append(f"{method} {path} with {auth}...: {e}")
        if room_gone(admin, rid):   # a wrongly accepted DELETE: make the room again for the rest
            room = admin.create_room(uid("rest-"))
            rid = room["id"]
    if admin.room(rid)["metadata"] != "":
        failures.append("a refused PATCH changed the room's metadata")
    if [x for x in admin.ok("GET", "/v1/rooms")["rooms"] if (x["name"] or "").startswith("denied-")]:
        failures.append("a refused POST /v1/rooms created a room")
    # an admin token (scope.admin, signed with auth.secret) and the API secret both work
    for bearer in (mint([], admin=True), ADMIN_SECRET):
        r = http("GET", base + "/v1/rooms", bearer=bearer)
        assert r.status == 200 and rid in [x["id"] for x in r.json["rooms"]], r
    # 404s name what was not found, in the exact error shape
    for method, path, body, name in [
        ("GET", "/v1/rooms/no-such-room", None, "roomNotFound"),
        ("PATCH", "/v1/rooms/no-such-room", {"metadata": "x"}, "roomNotFound"),
        ("DELETE", "/v1/rooms/no-such-room", None, "roomNotFound"),
        ("GET", "/v1/rooms/no-such-room/stats", None, "roomNotFound"),
        ("GET", "/v1/rooms/no-such-room/members", None, "roomNotFound"),
        ("POST", "/v1/rooms/no-such-room/members/evict", {"name": "A"}, "roomNotFound"),
        ("GET", "/v1/rooms/no-such-room/members/m", None, "roomNotFound"),
        ("DELETE", "/v1/rooms/no-such-room/members/m", None, "roomNotFound"),
        ("GET", "/v1/rooms/no-such-room/publications", None, "roomNotFound"),
        ("DELETE", "/v1/rooms/no-such-room/publications/p", None, "roomNotFound"),
        ("POST", "/v1/rooms/no-such-room/publications/p/enable", None, "roomNotFound"),
        ("POST", "/v1/rooms/no-such-room/publications/p/disable", None, "roomNotFound"),
        ("GET", "/v1/rooms/no-such-room/subscriptions", None, "roomNotFound"),
        ("DELETE", "/v1/rooms/no-such-room/subscriptions/s", None, "roomNotFound"),
        ("GET", f"/v1/rooms/{rid}/members/no-such-member", None, "memberNotFound"),
        ("DELETE", f"/v1/rooms/{rid}/members/no-such-member", None, "memberNotFound"),
        ("POST", f"/v1/rooms/{rid}/members/evict", {"name": "nobody"}, "memberNotFound"),
        ("DELETE", f"/v1/rooms/{rid}/publications/no-such-pub", None, "publicationNotFound"),
        ("POST", f"/v1/rooms/{rid}/publications/no-such-pub/enable", None, "publicationNotFound"),
        ("POST", f"/v1/rooms/{rid}/publications/no-such-pub/disable", None, "publicationNotFound"),
        ("DELETE", f"/v1/rooms/{rid}/subscriptions/no-such-sub", None, "subscriptionNotFound"),
    ]:
        try:
            assert_http_error(admin.call(method, path, body), 404, name)
        except AssertionError as e:
            failures.append(f"{method} {path}: {e}")
    # 400 / 409
    for method, path, body, raw, status, name in [
        ("POST", "/v1/rooms", {"name": room["name"]}, None, 409, "roomNameDuplicated"),
        ("POST", "/v1/rooms", {"name": "bad name!"}, None, 400, "invalidParameter"),
        ("POST", "/v1/rooms", {"metadata": "x" * 4097}, None, 400, "invalidParameter"),
        ("POST", "/v1/rooms", {"name": 5}, None, 400, "invalidParameter"),
        ("POST", "/v1/rooms", None, b"[1,2]", 400, "invalidParameter"),
        ("POST", "/v1/rooms", None, b"{not json", 400, "invalidParameter"),
        ("PATCH", f"/v1/rooms/{rid}", {}, None, 400, "invalidParameter"),
        ("PATCH", f"/v1/rooms/{rid}", {"metadata": "x" * 4097}, None, 400, "invalidParameter"),
        ("POST", f"/v1/rooms/{rid}/members/evict", {}, None, 400, "invalidParameter"),
    ]:
        try:
            assert_http_error(admin.call(method, path, body, raw=raw), status, name)
        except AssertionError as e:
            failures.append(f"{method} {path} {str(body or raw)[:40]}: {e}")
    if admin.room(rid)["metadata"] != "":
        failures.append("a refused PATCH changed the room's metadata")
    # a PATCH that works returns the room and tells the room
    got = admin.ok("PATCH", f"/v1/rooms/{rid}", {"metadata": "hello"})["room"]
    assert got["id"] == rid and got["metadata"] == "hello", got
    # health endpoints need no credential
    assert http("GET", base + "/healthz").text.strip() == "ok"
    r = http("GET", base + "/readyz")
    assert r.status == 200 and r.text.strip() == "ready", r
    assert not failures, f"{len(failures)} REST access/error checks failed:\n" + "\n".join(failures)


def room_gone(admin: Admin, rid: str) -> bool:
    return admin.call("GET", f"/v1/rooms/{rid}").status == 404


def test_admin_api_open_without_any_secret(server):
    """With neither auth.secret nor admin.apiSecret the admin API is open on a loopback listener,
    and signaling needs no token."""
    srv = Server(minato_binary(), ARTIFACTS / "test_admin-nosecret.log", env={})
    try:
        srv.start(timeout=15)
        r = http("GET", srv.http + "/v1/rooms")
        assert r.status == 200 and r.json == {"rooms": []}, r
        r = http("POST", srv.http + "/v1/rooms", {"name": "open"})
        assert r.status == 201 and r.json["room"]["name"] == "open", r

        async def check() -> None:
            conn = await Connection(srv.url, "open").connect()
            try:
                rooms = (await conn.call("listRooms", {}))["rooms"]
                assert [x["name"] for x in rooms] == ["open"], rooms
                # authenticate is accepted and ignored with auth off
                assert (await conn.call("authenticate", {"token": "whatever"})) == {"expiresAt": None}
            finally:
                await conn.close()
        run_async(check(), timeout=20)
    finally:
        srv.stop()


# ---- a member of room X cannot touch room Y ----------------------------------------------------

async def isolation_scenario(url: str, base: str) -> None:
    admin = Admin(base)
    tag = uuid.uuid4().hex[:6]
    room_x = admin.create_room(f"x{tag}-room")
    room_y = admin.create_room(f"y{tag}-room", metadata="y-meta")
    tok_x = mint([rule(f"x{tag}-*")])
    tok_y = mint([rule(f"y{tag}-*")])
    members: list[Member] = []
    try:
        ya = await Member.join(with_token(url, tok_y), room_y["id"], "YA", keepalive=False); members.append(ya)
        yb = await Member.join(with_token(url, tok_y), room_y["id"], "YB", keepalive=False); members.append(yb)
        ypub = await ya.publish(SineAudioTrack())
        ysub = await yb.subscribe(ypub.id)
        xm = await Member.join(with_token(url, tok_x), room_x["id"], "XM", keepalive=False); members.append(xm)
        xpub = await xm.publish(SineAudioTrack())
        before = admin.room(room_y["id"])
        c = xm.conn
        yid, pid, sid = room_y["id"], ypub.id, ysub.subscription["id"]
        eoc = {"candidate": "", "sdpMid": "0", "sdpMLineIndex": 0}
        cases = [
            # X's own member asking for Y's publication: it is not in X's room
            ("subscribe", {"memberId": xm.id, "publicationId": pid}, 404, "publicationNotFound"),
            # acting on Y's objects: the token has no rule for room Y
            ("subscribe", {"memberId": yb.id, "publicationId": xpub.id}, 403, "insufficientPermissions"),
            ("unpublish", {"publicationId": pid}, 403, "insufficientPermissions"),
            ("disablePublication", {"publicationId": pid}, 403, "insufficientPermissions"),
            ("enablePublication", {"publicationId": pid}, 403, "insufficientPermissions"),
            ("updatePublicationMetadata", {"publicationId": pid, "metadata": "x"}, 403, "insufficientPermissions"),
            ("unsubscribe", {"subscriptionId": sid}, 403, "insufficientPermissions"),
            ("changePreferredEncoding", {"subscriptionId": sid, "preferredEncodingId": "h"}, 403,
             "insufficientPermissions"),
            ("updateMemberMetadata", {"memberId": ya.id, "metadata": "x"}, 403, "insufficientPermissions"),
            ("keepalive", {"memberId": ya.id}, 403, "insufficientPermissions"),
            ("leave", {"memberId": ya.id}, 403, "insufficientPermissions"),
            ("iceCandidate", {"memberId": ya.id, "direction": "send", "candidate": eoc}, 403, "insufficientPermissions"),
            ("iceCandidate", {"memberId": yb.id, "direction": "recv", "candidate": eoc}, 403, "insufficientPermissions"),
            ("answer", {"memberId": yb.id, "answer": {"type": "answer", "sdp": yb.recv_pc.localDescription.sdp}}, 403,
             "insufficientPermissions"),
            ("negotiate", {"memberId": ya.id, "offer": {"type": "offer", "sdp": ya.send_pc.localDescription.sdp}}, 403,
             "insufficientPermissions"),
            ("getRoom", {"roomId": yid}, 403, "insufficientPermissions"),
            ("findRoom", {"id": yid}, 403, "insufficientPermissions"),
            ("findRoom", {"name": room_y["name"]}, 403, "insufficientPermissions"),
            ("findOrCreateRoom", {"name": room_y["name"]}, 403, "insufficientPermissions"),
            ("subscribeRoomEvents", {"roomId": yid, "offset": 0}, 403, "insufficientPermissions"),
            ("join", {"roomId": yid, "name": "XM2"}, 403, "insufficientPermissions"),
            ("updateRoomMetadata", {"roomId": yid, "metadata": "x"}, 403, "insufficientPermissions"),
            ("closeRoom", {"roomId": yid}, 403, "insufficientPermissions"),
            ("createRoom", {"name": f"y{tag}-new"}, 403, "insufficientPermissions"),
        ]
        failures = []
        for method, params, code, name in cases:
            try:
                assert_rpc_error(await c.call_raw(method, params), code, name)
            except AssertionError as e:
                failures.append(f"{method} {params}: {e}")
        listed = [r["id"] for r in (await c.call("listRooms", {}))["rooms"]]
        if yid in listed or room_x["id"] not in listed:
            failures.append(f"listRooms with the X token lists {listed} (X {room_x['id']}, Y {yid})")
        assert not failures, "member of X acting on room Y:\n" + "\n".join(failures)
        # nothing changed in Y; XM heard nothing of Y
        after = admin.room(yid)
        assert after == before, f"room Y changed:\n{before}\n{after}"
        assert all(e["roomId"] == room_x["id"] for e in c.events), [e for e in c.events if e["roomId"] != room_x["id"]]
        assert c.is_open
    finally:
        for m in members:
            await m.close()


def test_member_of_x_cannot_touch_room_y(server):
    run_async(isolation_scenario(server.url, server.http), timeout=60)


# ---- media: stats, metrics, REST disable/enable, kick ------------------------------------------

async def kick_scenario(url: str, base: str) -> None:
    admin = Admin(base)
    name = uid("kick-")
    room = admin.create_room(name)
    rid = room["id"]
    tok = mint([rule(name)])
    members: list[Member] = []
    sink = None
    try:
        a = await Member.join(with_token(url, tok), rid, "A"); members.append(a)
        b = await Member.join(with_token(url, tok), rid, "B"); members.append(b)
        video = SyntheticVideoTrack()
        pub = await a.publish(video)
        sub = await b.subscribe(pub.id)
        sink = VideoSink(sub.track, "B-video")
        assert await sink.wait_frames(5, 10), "B decoded no video within 10 s"

        # -- stats count packets in and out while media flows ---------------------------------
        def stats_flowing():
            st = admin.ok("GET", f"/v1/rooms/{rid}/stats")
            return st if st["packetsIn"] > 0 and st["packetsOut"] > 0 else None
        st1 = await poll(stats_flowing, timeout=5, what="stats packetsIn/Out > 0")
        assert st1["roomId"] == rid and (st1["members"], st1["publications"], st1["subscriptions"]) == (2, 1, 1), st1
        assert st1["bytesIn"] > st1["packetsIn"] and st1["bytesOut"] > st1["packetsOut"], st1
        st2 = await poll(lambda: (s := admin.ok("GET", f"/v1/rooms/{rid}/stats"))["packetsOut"] > st1["packetsOut"] and s,
                         timeout=5, what="stats packetsOut growing")
        assert st2["packetsIn"] > st1["packetsIn"] and st2["bytesOut"] > st1["bytesOut"], (st1, st2)
        assert admin.ok("GET", f"/v1/rooms/{rid}/subscriptions")["subscriptions"] == [sub.subscription]
        members_rest = admin.ok("GET", f"/v1/rooms/{rid}/members")["members"]
        assert sorted((m["name"], m["connected"]) for m in members_rest) == [("A", True), ("B", True)], members_rest

        # -- /metrics --------------------------------------------------------------------------
        samples = scrape(base)
        for mname in ("minato_rooms", "minato_members", "minato_publications", "minato_subscriptions",
                      "minato_transports", "minato_rtp_packets_received_total", "minato_rtp_packets_forwarded_total",
                      "minato_rtp_bytes_forwarded_total"):
            assert metric(samples, mname) is not None, f"/metrics has no {mname}"
        assert metric(samples, "minato_rooms") >= 1 and metric(samples, "minato_members") >= 2, samples
        assert metric(samples, "minato_publications") >= 1 and metric(samples, "minato_subscriptions") >= 1
        assert metric(samples, "minato_transports") >= 2
        assert metric(samples, "minato_rtp_packets_forwarded_total") > 0
        assert metric(samples, "minato_rtp_packets_received_total") > 0
        joins = metric(samples, "minato_signaling_requests_total", method="join")
        assert joins is not None and joins >= 2, [k for k in samples if k[0] == "minato_signaling_requests_total"]
        denied_before = metric(samples, "minato_signaling_errors_total", name="insufficientPermissions") or 0
        outsider = await Connection(with_token(url, mint([rule("nowhere-*")])), "outsider").connect()
        try:
            assert_rpc_error(await outsider.call_raw("getRoom", {"roomId": rid}), 403, "insufficientPermissions")
        finally:
            await outsider.close()
        denied_after = metric(scrape(base), "minato_signaling_errors_total", name="insufficientPermissions")
        assert denied_after == denied_before + 1, (denied_before, denied_after)

        # -- REST disable / enable -------------------------------------------------------------
        nb = len(b.conn.events)
        n = sink.frames
        await poll(lambda: sink.frames > n, timeout=2, what="B's video flowing before REST disable")
        r = admin.ok("POST", f"/v1/rooms/{rid}/publications/{pub.id}/disable")
        assert r["publication"]["id"] == pub.id and r["publication"]["state"] == "disabled", r
        for m in (a, b):
            ev = await m.conn.wait_event(event_matcher("publicationDisabled", publication_id=pub.id), timeout=5,
                                         start=nb if m is b else 0)
            assert ev["data"]["publication"]["state"] == "disabled", ev
        t_dis = time.monotonic()
        await poll(lambda: sink.last_frame_at is not None and time.monotonic() - sink.last_frame_at > 1.0,
                   timeout=5, what="B's video stopping after REST disable")
        stopped = sink.last_frame_at - t_dis
        assert stopped <= 1.0, f"B still decoded frames {stopped:.2f} s after REST disable"
        r = admin.ok("POST", f"/v1/rooms/{rid}/publications/{pub.id}/enable")
        assert r["publication"]["state"] == "enabled", r
        await b.conn.wait_event(event_matcher("publicationEnabled", publication_id=pub.id), timeout=5)
        n = sink.frames
        await poll(lambda: sink.frames > n + 3, timeout=3, what="B's video resuming after REST enable")

        # -- kick A ------------------------------------------------------------------------------
        na, nb = len(a.conn.events), len(b.conn.events)
        n = sink.frames
        await poll(lambda: sink.frames > n, timeout=2, what="B's video flowing before the kick")
        t0 = time.monotonic()
        assert t0 - sink.last_frame_at < 0.2, "B's video was not live right before the kick"
        assert admin.ok("DELETE", f"/v1/rooms/{rid}/members/{a.id}") == {}
        ev = await b.conn.wait_event(event_matcher("memberLeft", member_id=a.id), timeout=5, start=nb)
        assert ev.get("reason") == "kicked", ev
        await b.conn.wait_event(event_matcher("streamUnpublished", publication_id=pub.id), timeout=5, start=nb)
        ev_a = await a.conn.wait_event(event_matcher("memberLeft", member_id=a.id), timeout=5, start=na)
        assert ev_a.get("reason") == "kicked", ev_a
        await asyncio.wait_for(asyncio.shield(a.conn.closed), 5)
        code, reason = close_info(a.conn)
        assert code == 4000, f"kicked socket closed with {code} {reason!r}, expected 4000"
        assert reason and reason.startswith("kicked"), reason
        # B's video stops within 1 s of the kick
        await poll(lambda: sink.ended or (sink.last_frame_at is not None and time.monotonic() - sink.last_frame_at > 1.0),
                   timeout=5, what="B's video stopping after the kick")
        last = (sink.last_frame_at or t0) - t0
        assert last <= 1.0, f"B decoded A's video {last:.2f} s after the kick"
        print(f"kick: B's last frame {last:.3f} s after the kick request; A closed with {code} {reason!r}")
        room_now = admin.room(rid)
        assert [m["name"] for m in room_now["members"]] == ["B"], room_now
        assert room_now["publications"] == [] and room_now["subscriptions"] == [], room_now
        # B is answered a new offer without A's stream and stays
        await b.conn.wait_offers(1, timeout=5)
        await b.wait_offers_answered(1, timeout=10)
        assert b.conn.is_open
        assert (await b.conn.call("keepalive", {"memberId": b.id}))["ttlSec"] > 0
    finally:
        if sink:
            sink.stop()
        for m in members:
            await m.close()


def test_stats_metrics_disable_enable_and_kick(server):
    run_async(kick_scenario(server.url, server.http), timeout=90)


# ---- evict by name -----------------------------------------------------------------------------

async def evict_scenario(url: str, base: str) -> None:
    admin = Admin(base)
    name = uid("evict-")
    rid = admin.create_room(name)["id"]
    tok = mint([rule(name)])
    members: list[Member] = []
    try:
        watcher = await Member.join(with_token(url, tok), rid, "W", keepalive=False); members.append(watcher)
        e1 = await Member.join(with_token(url, tok), rid, "E", keepalive=False); members.append(e1)
        # a live member: evicted, told, closed
        r = admin.ok("POST", f"/v1/rooms/{rid}/members/evict", {"name": "E"})
        assert r["member"]["id"] == e1.id and r["member"]["name"] == "E", r
        ev = await watcher.conn.wait_event(event_matcher("memberLeft", member_id=e1.id), timeout=5)
        assert ev.get("reason") == "kicked", ev
        await e1.conn.wait_event(event_matcher("memberLeft", member_id=e1.id, reason="kicked"), timeout=5)
        await asyncio.wait_for(asyncio.shield(e1.conn.closed), 5)
        assert close_info(e1.conn)[0] == 4000, close_info(e1.conn)
        # the name is free at once, no replace:true needed
        e2 = await Member.join(with_token(url, tok), rid, "E", keepalive=False); members.append(e2)
        assert e2.id != e1.id
        # a ghost (socket gone, still within its keepalive gap) blocks the name until evicted
        await e2.conn.close()
        dup = await Connection(with_token(url, tok), "dup").connect()
        try:
            assert_rpc_error(await dup.call_raw("join", {"roomId": rid, "name": "E"}), 409, "memberNameDuplicated")
            ghost = admin.ok("GET", f"/v1/rooms/{rid}/members/{e2.id}")["member"]
            assert ghost["connected"] is False and ghost["name"] == "E", ghost
            assert admin.ok("POST", f"/v1/rooms/{rid}/members/evict", {"name": "E"})["member"]["id"] == e2.id
            res = await dup.call("join", {"roomId": rid, "name": "E"})
            assert res["member"]["name"] == "E" and res["member"]["id"] not in (e1.id, e2.id), res
        finally:
            await dup.close()
        ev = await watcher.conn.wait_event(event_matcher("memberLeft", member_id=e2.id), timeout=5)
        assert ev.get("reason") == "kicked", ev
    finally:
        for m in members:
            await m.close()


def test_evict_by_name_frees_the_name(server):
    run_async(evict_scenario(url=server.url, base=server.http), timeout=40)


# ---- room close over REST: events, transports, UDP ports ---------------------------------------

async def close_room_scenario(url: str, base: str, pid: int) -> None:
    admin = Admin(base)
    name = uid("close-")
    baseline_ports = server_udp_ports(pid)
    baseline_transports = metric(scrape(base), "minato_transports")
    rid = admin.create_room(name)["id"]
    tok = mint([rule(name)])
    members: list[Member] = []
    sinks = []
    listener = None
    try:
        m1 = await Member.join(with_token(url, tok), rid, "M1"); members.append(m1)
        m2 = await Member.join(with_token(url, tok), rid, "M2"); members.append(m2)
        vpub = await m1.publish(SyntheticVideoTrack())
        apub = await m1.publish(SineAudioTrack())
        vsub = await m2.subscribe(vpub.id)
        asub = await m2.subscribe(apub.id)
        vs = VideoSink(vsub.track, "M2-video"); sinks.append(vs)
        assert await vs.wait_frames(3, 10), "M2 decoded no video"
        listener = await Connection(with_token(url, tok), "listener").connect()
        await listener.call("subscribeRoomEvents", {"roomId": rid, "offset": 10**9})

        during = server_udp_ports(pid)
        assert len(during) > len(baseline_ports), f"no media UDP sockets for the room? before {baseline_ports}, now {during}"

        # -- REST: cancel a subscription, then unpublish -----------------------------------------
        offers = len(m2.conn.offers)
        assert admin.ok("DELETE", f"/v1/rooms/{rid}/subscriptions/{asub.subscription['id']}") == {}
        ev = await m2.conn.wait_event(lambda e: e["type"] == "publicationUnsubscribed"
                                      and e["data"]["subscription"]["id"] == asub.subscription["id"], timeout=5)
        await m2.conn.wait_offers(offers + 1, timeout=5)
        sections = {s["mid"]: s for s in sdp_media_sections(m2.conn.offers[offers]["offer"]["sdp"])}
        assert sections[asub.mid]["direction"] == "inactive", sections
        await m2.wait_offers_answered(1, timeout=10)
        assert [s["id"] for s in admin.ok("GET", f"/v1/rooms/{rid}/subscriptions")["subscriptions"]] == \
            [vsub.subscription["id"]]
        assert admin.ok("DELETE", f"/v1/rooms/{rid}/publications/{apub.id}") == {}
        for c in (m1.conn, m2.conn, listener):
            await c.wait_event(event_matcher("streamUnpublished", publication_id=apub.id), timeout=5)
        assert [p["id"] for p in admin.ok("GET", f"/v1/rooms/{rid}/publications")["publications"]] == [vpub.id]

        # -- close the room ----------------------------------------------------------------------
        marks = {c.label: len(c.events) for c in (m1.conn, m2.conn, listener)}
        failures: list[str] = []
        assert admin.ok("DELETE", f"/v1/rooms/{rid}") == {}

        def after_close(c: Connection) -> list:
            return [(e["version"], e["type"], (e["data"].get("member") or {}).get("name"), e.get("reason"))
                    for e in c.events[marks[c.label]:]]
        try:
            for c in (m1.conn, m2.conn, listener):
                for m in (m1, m2):
                    ev = await c.wait_event(event_matcher("memberLeft", member_id=m.id), timeout=5)
                    assert ev.get("reason") == "roomClosed", (c.label, ev)
                closed = await c.wait_event(lambda e: e["type"] == "closed", timeout=5)
                assert closed["roomId"] == rid, closed
                left = [e["version"] for e in c.events if e["type"] == "memberLeft" and e.get("reason") == "roomClosed"]
                assert all(v < closed["version"] for v in left), f"{c.label}: closed before memberLeft: {c.events}"
        except (TimeoutError, AssertionError) as e:
            seen = {c.label: after_close(c) for c in (m1.conn, m2.conn, listener)}
            failures.append(f"room close events: {e}\nevents after DELETE /v1/rooms/{{id}}: {seen}")
        r = admin.call("GET", f"/v1/rooms/{rid}")
        if r.status != 404:
            failures.append(f"GET of the closed room: {r}")
        # transports closed and the room's UDP ports released
        try:
            await poll(lambda: server_udp_ports(pid) == baseline_ports, timeout=5, what="UDP ports released")
        except TimeoutError:
            failures.append(f"server UDP sockets in 40000-40999 5 s after the close: {server_udp_ports(pid)}, "
                            f"before the room: {baseline_ports}, with media: {during}")
        try:
            await poll(lambda: metric(scrape(base), "minato_transports") == baseline_transports, timeout=5,
                       what=f"minato_transports back to {baseline_transports}")
        except TimeoutError as e:
            failures.append(f"{e}: {metric(scrape(base), 'minato_transports')}")
        assert not failures, "\n".join(failures)
    finally:
        for s in sinks:
            s.stop()
        if listener:
            await listener.close()
        for m in members:
            await m.close()


def test_close_room_over_rest_releases_ports(server):
    run_async(close_room_scenario(server.url, server.http, server.proc.pid), timeout=60)
