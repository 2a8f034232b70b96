"""Client auth tokens (SkyWay v3 scope, HS256): no token, bad tokens, expiry and refresh, the
tokenExpiring notice, name globs, and a table of every signaling method against a token that
lacks exactly the permission it needs (403 insufficientPermissions, nothing changes)."""
from __future__ import annotations

import os
import subprocess

import asyncio
import base64
import json
import time
import uuid

import pytest

from admin_util import (
    ADMIN_SECRET, AUTH_SECRET, MEMBER_METHODS, ROOM_METHODS, Admin, claims, expect_close, iso, mint, poll,
    rule, sign, wait_notification, with_token,
)
from conftest import ARTIFACTS, Server, minato_binary
from media import SineAudioTrack
from minato_client import Connection, Member, RpcError, assert_rpc_error, new_peer_connection, run_async

MINATO_SERVER_ENV = {
    "MINATO_AUTH_SECRET": AUTH_SECRET,
    "MINATO_ADMIN_API_SECRET": ADMIN_SECRET,
    # A 60 s token is inside the notice window at once: tokenExpiring can be tested quickly.
    "MINATO_AUTH_TOKEN_EXPIRING_NOTICE_SEC": "58",
}

FULL = None  # mint(None) = one rule "*" with every method


def uid(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def connect(url: str, token: str | None = None, label: str = "conn") -> Connection:
    return await Connection(with_token(url, token) if token else url, label=label).connect()


async def as_token(conn: Connection, token: str) -> None:
    res = await conn.call("updateAuthToken", {"token": token})
    assert isinstance(res.get("expiresAt"), str), res


def member_rule(glob: str, perms) -> list[dict]:
    return [rule(glob, ROOM_METHODS, "*", perms)]


def room_rule(glob: str, perms) -> list[dict]:
    return [rule(glob, perms, "*", MEMBER_METHODS)]


# ---- no token / bad tokens ---------------------------------------------------------------------

def every_method_params(room_id: str, member_id: str, pub_id: str, sub_id: str) -> list[tuple[str, dict]]:
    offer = {"type": "offer", "sdp": "v=0\r\n"}
    return [
        ("listRooms", {}),
        ("createRoom", {"name": uid("notoken-")}),
        ("findRoom", {"id": room_id}),
        ("findOrCreateRoom", {"name": uid("notoken-")}),
        ("closeRoom", {"roomId": room_id}),
        ("updateRoomMetadata", {"roomId": room_id, "metadata": "changed"}),
        ("getRoom", {"roomId": room_id}),
        ("subscribeRoomEvents", {"roomId": room_id, "offset": 0}),
        ("join", {"roomId": room_id, "name": "intruder"}),
        ("leave", {"memberId": member_id}),
        ("keepalive", {"memberId": member_id}),
        ("updateMemberMetadata", {"memberId": member_id, "metadata": "changed"}),
        ("publish", {"memberId": member_id, "contentType": "audio", "mid": "0", "offer": offer}),
        ("negotiate", {"memberId": member_id, "offer": offer}),
        ("unpublish", {"publicationId": pub_id}),
        ("enablePublication", {"publicationId": pub_id}),
        ("disablePublication", {"publicationId": pub_id}),
        ("updatePublicationMetadata", {"publicationId": pub_id, "metadata": "changed"}),
        ("subscribe", {"memberId": member_id, "publicationId": pub_id}),
        ("unsubscribe", {"subscriptionId": sub_id}),
        ("answer", {"memberId": member_id, "answer": {"type": "answer", "sdp": "v=0\r\n"}}),
        ("iceCandidate", {"memberId": member_id, "direction": "send",
                          "candidate": {"candidate": "", "sdpMid": "0", "sdpMLineIndex": 0}}),
        ("changePreferredEncoding", {"subscriptionId": sub_id, "preferredEncodingId": "h"}),
    ]


def snapshot(admin: Admin, room_id: str) -> dict:
    room = admin.room(room_id)
    return {
        "metadata": room["metadata"],
        "members": sorted((m["id"], m["name"], m["metadata"]) for m in room["members"]),
        "publications": sorted((p["id"], p["state"], p["metadata"]) for p in room["publications"]),
        "subscriptions": sorted(s["id"] for s in room["subscriptions"]),
        "rooms": sorted(r["name"] or "" for r in admin.ok("GET", "/v1/rooms")["rooms"]),
    }


async def seed(url: str, admin: Admin, prefix: str) -> tuple[dict, Member, Member, str, str, list[Member]]:
    """Room `prefix…` with P (one audio publication) and S (subscribed to it), joined with a full token."""
    room = admin.create_room(uid(prefix))
    tok = mint(FULL)
    p = await Member.join(with_token(url, tok), room["id"], "P", keepalive=False)
    s = await Member.join(with_token(url, tok), room["id"], "S", keepalive=False)
    pub = await p.publish(SineAudioTrack())
    sub = await s.subscribe(pub.id)
    return room, p, s, pub.id, sub.subscription["id"], [p, s]


async def no_token_scenario(url: str, http: str) -> None:
    admin = Admin(http)
    room, p, s, pub_id, sub_id, members = await seed(url, admin, "notoken-")
    try:
        before = snapshot(admin, room["id"])
        anon = await connect(url, label="anon")
        try:
            for method, params in every_method_params(room["id"], p.id, pub_id, sub_id):
                resp = await anon.call_raw(method, params)
                try:
                    assert_rpc_error(resp, 401, "invalidAuthToken")
                except AssertionError as e:
                    raise AssertionError(f"{method} without a token: {e}") from None
                assert anon.is_open, f"the server closed the socket after {method} without a token"
            # authenticate needs its token parameter
            assert_rpc_error(await anon.call_raw("authenticate", {}), -32602)
        finally:
            await anon.close()
        assert snapshot(admin, room["id"]) == before, "requests without a token changed the room"
    finally:
        for m in members:
            await m.close()


def test_no_token_every_method_is_refused(server):
    run_async(no_token_scenario(server.url, server.http), timeout=60)


def bad_tokens() -> list[tuple[str, str]]:
    now = int(time.time())
    good = claims()
    no_scope = {k: v for k, v in claims().items() if k != "scope"}
    no_exp = {k: v for k, v in claims().items() if k != "exp"}
    bad_room_method = claims([rule("*", ["create", "destroy"])])
    bad_member_method = claims([rule("*", ROOM_METHODS, "*", ["publish", "dance"])])
    header, payload, sig = sign(good).split(".")
    tampered = sign(claims([rule("other-*")])).split(".")[1]
    none_alg = (base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).rstrip(b"=").decode()
                + "." + payload + ".")
    return [
        ("bad signature (other secret)", sign(good, "some-other-secret-0123456789abcdef")),
        ("payload swapped under the old signature", f"{header}.{tampered}.{sig}"),
        ("not a JWT", "not-a-jwt"),
        ("three garbage parts", "abc.def.ghi"),
        ("empty string", ""),
        ("alg none", none_alg),
        ("HS512", sign(good, AUTH_SECRET + AUTH_SECRET, "HS512")),
        ("version 2", sign(claims(version=2))),
        ("no scope", sign(no_scope)),
        ("no exp", sign(no_exp)),
        ("unknown room method", sign(bad_room_method)),
        ("unknown member method", sign(bad_member_method)),
        ("exp an hour ago", sign({**good, "iat": now - 7200, "exp": now - 3600})),
    ]


async def bad_token_scenario(url: str) -> None:
    failures = []
    for label, token in bad_tokens():
        expected = "authTokenExpired" if label == "exp an hour ago" else "invalidAuthToken"
        conn = await connect(url, label="bad")
        try:
            resp = await conn.call_raw("authenticate", {"token": token})
            try:
                assert_rpc_error(resp, 401, expected)
                # still unauthenticated afterwards
                assert_rpc_error(await conn.call_raw("listRooms", {}), 401, "invalidAuthToken")
                assert conn.is_open
            except AssertionError as e:
                failures.append(f"{label}: {e}")
        finally:
            await conn.close()
    assert not failures, "bad tokens:\n" + "\n".join(failures)


def test_bad_tokens_are_invalid(server):
    run_async(bad_token_scenario(server.url), timeout=60)


async def bad_query_token_scenario(url: str) -> None:
    cases = [
        ("bad signature", sign(claims(), "some-other-secret-0123456789abcdef"), 4001, "invalidAuthToken"),
        ("malformed", "garbage", 4001, "invalidAuthToken"),
        ("version 2", sign(claims(version=2)), 4001, "invalidAuthToken"),
        ("expired", mint(FULL, exp=int(time.time()) - 60), 4002, "authTokenExpired"),
    ]
    for label, token, code, name in cases:
        got_code, reason = await expect_close(with_token(url, token))
        assert got_code == code, f"?token= {label}: close code {got_code} ({reason!r}), expected {code}"
        assert reason.startswith(name), f"?token= {label}: close reason {reason!r} should start with {name}"
    # a good ?token= works at once
    conn = await connect(url, mint(FULL), label="good")
    try:
        assert "rooms" in await conn.call("listRooms", {})
    finally:
        await conn.close()


def test_bad_query_token_closes_the_socket(server):
    run_async(bad_query_token_scenario(url=server.url), timeout=30)


# ---- expiry, refresh, tokenExpiring ------------------------------------------------------------

async def expiry_scenario(url: str, http: str) -> None:
    admin = Admin(http)
    glob = uid("exp-")
    conn = await connect(url, label="expiring")
    try:
        exp = int(time.time()) + 3
        res = await conn.call("authenticate", {"token": mint([rule(glob + "*")], exp=exp)})
        assert res == {"expiresAt": iso(exp)}, res
        room = (await conn.call("createRoom", {"name": glob + "-a"}))["room"]
        t_exp = await poll(lambda: time.time() >= exp + 0.05 and time.time(), timeout=6, what="token exp")
        assert t_exp
        # expired: every request fails with authTokenExpired; the socket stays open
        for method, params in [("getRoom", {"roomId": room["id"]}), ("listRooms", {}),
                               ("createRoom", {"name": glob + "-b"}),
                               ("updateRoomMetadata", {"roomId": room["id"], "metadata": "late"})]:
            assert_rpc_error(await conn.call_raw(method, params), 401, "authTokenExpired")
        assert conn.is_open, "the server closed the socket of an expired token"
        assert admin.room(room["id"])["metadata"] == ""
        assert not [r for r in admin.ok("GET", "/v1/rooms")["rooms"] if r["name"] == glob + "-b"]
        # updateAuthToken with another app's token is refused, the session stays expired
        assert_rpc_error(await conn.call_raw("updateAuthToken", {"token": mint([rule(glob + "*")], app="other-app")}),
                         401, "invalidAuthToken")
        assert_rpc_error(await conn.call_raw("listRooms", {}), 401, "authTokenExpired")
        # refresh with a fresh token of the same app: works again
        exp2 = int(time.time()) + 3600
        res = await conn.call("updateAuthToken", {"token": mint([rule(glob + "*")], exp=exp2)})
        assert res == {"expiresAt": iso(exp2)}, res
        got = (await conn.call("getRoom", {"roomId": room["id"]}))["room"]
        assert got["id"] == room["id"]
        await conn.call("updateRoomMetadata", {"roomId": room["id"], "metadata": "refreshed"})
        assert admin.room(room["id"])["metadata"] == "refreshed"
        # updateAuthToken with a bad signature keeps the previous (valid) grant
        assert_rpc_error(await conn.call_raw("updateAuthToken", {"token": sign(claims(), "x" * 40)}),
                         401, "invalidAuthToken")
        assert (await conn.call("getRoom", {"roomId": room["id"]}))["room"]["metadata"] == "refreshed"
        # a token whose scope changes: the new scope applies to the next request
        await as_token(conn, mint([rule("nothing-matches-*")]))
        assert_rpc_error(await conn.call_raw("getRoom", {"roomId": room["id"]}), 403, "insufficientPermissions")
    finally:
        await conn.close()


def test_expired_token_then_update_auth_token(server):
    run_async(expiry_scenario(server.url, server.http), timeout=40)


async def token_expiring_scenario(url: str) -> None:
    short = await connect(url, label="short")
    long_ = await connect(url, mint(FULL, ttl=3600), label="long")
    try:
        exp = int(time.time()) + 60
        await short.call("authenticate", {"token": mint(FULL, exp=exp)})
        note = await wait_notification(short, "tokenExpiring", timeout=5)
        params = note["params"]
        assert params["expiresAt"] == iso(exp), params
        assert isinstance(params["remainingSec"], int) and 50 <= params["remainingSec"] <= 58, params
        assert "id" not in note, note
        # once per token: in 1.5 s (six of the server's 250 ms sweeps) a second tokenExpiring
        # must NOT arrive; nothing to wait for, the quiet window is what is tested
        await asyncio.sleep(1.5)   # quiet window (the test's subject)
        notes = [n for n in short.notifications if n.get("method") == "tokenExpiring"]
        assert len(notes) == 1, f"tokenExpiring sent {len(notes)} times for one token: {notes}"
        assert not [n for n in long_.notifications if n.get("method") == "tokenExpiring"], \
            "a connection whose token has an hour left got tokenExpiring"
        # a new (also short) token is a new token: warned again
        exp2 = int(time.time()) + 59
        await short.call("updateAuthToken", {"token": mint(FULL, exp=exp2)})
        second = await wait_notification(short, "tokenExpiring", timeout=5, start=short.notifications.index(note) + 1)
        assert second["params"]["expiresAt"] == iso(exp2), second
    finally:
        await short.close()
        await long_.close()


def test_token_expiring_notice(server):
    run_async(token_expiring_scenario(server.url), timeout=30)


# ---- globs -------------------------------------------------------------------------------------

async def glob_scenario(url: str, http: str) -> None:
    admin = Admin(http)
    tag = uuid.uuid4().hex[:6]
    lesson = f"lesson{tag}-"
    failures: list[str] = []

    async def expect_create(conn: Connection, name, ok: bool, why: str) -> None:
        params = {} if name is None else {"name": name}
        resp = await conn.call_raw("createRoom", params)
        try:
            if ok:
                assert "result" in resp, f"createRoom {name!r} should be allowed ({why}): {resp}"
            else:
                assert_rpc_error(resp, 403, "insufficientPermissions")
        except AssertionError as e:
            failures.append(f"createRoom {name!r} ({why}): {e}")

    lc = await connect(url, mint([rule(lesson + "*", ["create"], f"student{tag}-*", MEMBER_METHODS)]), "lesson")
    star = await connect(url, mint([rule("*", ["create"], "*")]), "star")
    mid = await connect(url, mint([rule(f"a{tag}*b*c", ["create"]), rule(f"dot{tag}.%", ["create"])]), "mid")
    members: list[Member] = []
    try:
        await expect_create(lc, lesson + "1", True, "lesson-* matches lesson-1")
        await expect_create(lc, lesson, True, "* matches the empty run")
        await expect_create(lc, lesson + "1-extra.x", True, "* matches any run")
        await expect_create(lc, f"lesson{tag}s", False, "lesson-* does not match lessons")
        await expect_create(lc, f"x{lesson}1", False, "the glob is anchored at the start")
        await expect_create(lc, f"Lesson{tag}-1", False, "case-sensitive")
        await expect_create(lc, None, False, "an unnamed room matches only *")
        await expect_create(star, f"anything{tag}", True, "* matches every name")
        await expect_create(star, None, True, "* matches an unnamed room")
        await expect_create(mid, f"a{tag}bc", True, "a*b*c matches abc")
        await expect_create(mid, f"a{tag}xxbyyc", True, "a*b*c matches axxbyyc")
        await expect_create(mid, f"a{tag}cb", False, "a*b*c does not match acb")
        await expect_create(mid, f"a{tag}bcx", False, "the glob is anchored at the end")
        await expect_create(mid, f"dot{tag}.%", True, ". and % are literal")
        await expect_create(mid, f"dot{tag}x%", False, ". is not a wildcard")
        await expect_create(mid, f"dot{tag}.x", False, "% is not a wildcard")

        # member name globs on join
        room_id = next(r["id"] for r in admin.ok("GET", "/v1/rooms")["rooms"] if r["name"] == lesson + "1")
        for name, ok in [(f"student{tag}-7", True), (f"student{tag}-", True), (f"teacher{tag}", False),
                         (f"Student{tag}-1", False), (f"xstudent{tag}-1", False)]:
            c = await connect(url, mint([rule(lesson + "*", [], f"student{tag}-*", MEMBER_METHODS)]), name)
            resp = await c.call_raw("join", {"roomId": room_id, "name": name})
            try:
                if ok:
                    assert "result" in resp, f"join as {name} should be allowed: {resp}"
                else:
                    assert_rpc_error(resp, 403, "insufficientPermissions")
            except AssertionError as e:
                failures.append(f"join {name}: {e}")
            await c.close()
        names = sorted(m["name"] for m in admin.room(room_id)["members"])
        if names != sorted([f"student{tag}-7", f"student{tag}-"]):
            failures.append(f"members after the glob joins: {names}")

        # listRooms shows only rooms a rule matches
        listed = sorted(r["name"] for r in (await lc.call("listRooms", {}))["rooms"])
        if listed != sorted([lesson + "1", lesson, lesson + "1-extra.x"]):
            failures.append(f"listRooms with the lesson token: {listed}")
        every = {r["name"] for r in (await star.call("listRooms", {}))["rooms"]}
        if not {lesson + "1", f"a{tag}bc", f"anything{tag}"} <= every:
            failures.append(f"listRooms with *: {sorted(map(str, every))}")
        # nothing was created where the glob said no
        created = {r["name"] for r in admin.ok("GET", "/v1/rooms")["rooms"]}
        for n in (f"lesson{tag}s", f"x{lesson}1", f"a{tag}cb", f"dot{tag}x%"):
            if n in created:
                failures.append(f"room {n} exists although createRoom was refused")
    finally:
        for c in (lc, star, mid):
            await c.close()
        for m in members:
            await m.close()
    assert not failures, "glob rules:\n" + "\n".join(failures)


def test_room_and_member_name_globs(server):
    run_async(glob_scenario(server.url, server.http), timeout=40)


# ---- every method against a token lacking its permission --------------------------------------

async def permission_scenario(url: str, http: str, subtests) -> None:
    admin = Admin(http)
    prefix = uid("perm-")
    glob = prefix + "*"
    room = admin.create_room(prefix + "-room", metadata="orig")
    rid = room["id"]
    full = mint([rule(glob)])
    members: list[Member] = []
    conns: list[Connection] = []
    pcs = []
    try:
        p = await Member.join(with_token(url, full), rid, "P", keepalive=False); members.append(p)
        s = await Member.join(with_token(url, full), rid, "S", keepalive=False); members.append(s)
        pub1 = await p.publish(SineAudioTrack())
        pub2 = await p.publish(SineAudioTrack())
        sub1 = await s.subscribe(pub1.id)
        x = await connect(url, full, "X"); conns.append(x)
        before = snapshot(admin, rid)

        def minus(perm: str) -> str:
            return mint([rule(glob, ROOM_METHODS, "*", [m for m in MEMBER_METHODS if m != perm])])

        sfu_off = mint([rule(glob, ROOM_METHODS, "*", MEMBER_METHODS, sfu={"enabled": False})])
        other_room = mint([rule("elsewhere-*")])

        # -- room-level methods (on X, a connection with no member) --------------------------
        new_name = prefix + "-new"
        room_cases = [
            ("createRoom", "create", {"name": new_name}),
            ("findOrCreateRoom (creating)", "create", {"name": new_name}),
            ("closeRoom", "close", {"roomId": rid}),
            ("updateRoomMetadata", "updateMetadata", {"roomId": rid, "metadata": "changed"}),
        ]
        for label, perm, params in room_cases:
            with subtests.test(msg=f"{label} without room method {perm}"):
                await as_token(x, mint([rule(glob, [m for m in ROOM_METHODS if m != perm])]))
                assert_rpc_error(await x.call_raw(label.split()[0], params), 403, "insufficientPermissions")
        with subtests.test(msg="findOrCreateRoom of an existing room needs no create"):
            await as_token(x, mint([rule(glob, [])]))
            assert (await x.call("findOrCreateRoom", {"name": room["name"]}))["room"]["id"] == rid
        for method, params in [("getRoom", {"roomId": rid}), ("findRoom", {"id": rid}),
                               ("findRoom", {"name": room["name"]}), ("subscribeRoomEvents", {"roomId": rid, "offset": 0}),
                               ("findOrCreateRoom", {"name": room["name"]}), ("join", {"roomId": rid, "name": "Z"}),
                               ("closeRoom", {"roomId": rid}), ("updateRoomMetadata", {"roomId": rid, "metadata": "x"})]:
            with subtests.test(msg=f"{method} {sorted(params)} with a token for other rooms only"):
                await as_token(x, other_room)
                assert_rpc_error(await x.call_raw(method, params), 403, "insufficientPermissions")
        with subtests.test(msg="listRooms with a token for other rooms only"):
            await as_token(x, other_room)
            listed = [r["id"] for r in (await x.call("listRooms", {}))["rooms"]]
            assert rid not in listed, listed
        with subtests.test(msg="join with a member glob that does not match"):
            await as_token(x, mint([rule(glob, ROOM_METHODS, "teacher-*")]))
            assert_rpc_error(await x.call_raw("join", {"roomId": rid, "name": "student-1"}), 403, "insufficientPermissions")
        with subtests.test(msg="join with a room rule that has no member rule"):
            await as_token(x, mint([rule(glob, ROOM_METHODS, None)]))
            assert_rpc_error(await x.call_raw("join", {"roomId": rid, "name": "Z"}), 403, "insufficientPermissions")
        with subtests.test(msg="subscribeRoomEvents listened nothing while denied"):
            assert not x.events, x.events

        # -- member-scoped methods ---------------------------------------------------------
        spare = new_peer_connection(); pcs.append(spare)
        tr = spare.addTransceiver(SineAudioTrack(), direction="sendonly")
        await spare.setLocalDescription(await spare.createOffer())
        new_offer = {"type": "offer", "sdp": spare.localDescription.sdp}
        cur_offer = {"type": "offer", "sdp": p.send_pc.localDescription.sdp}
        cur_answer = {"type": "answer", "sdp": s.recv_pc.localDescription.sdp}
        eoc = {"candidate": "", "sdpMid": "0", "sdpMLineIndex": 0}
        member_cases = [
            # (method, needed permission, acting member, params)
            ("publish", "publish", p, {"memberId": p.id, "contentType": "audio", "mid": tr.mid, "offer": new_offer}),
            ("negotiate", "publish", p, {"memberId": p.id, "offer": cur_offer}),
            ("unpublish", "publish", p, {"publicationId": pub1.id}),
            ("enablePublication", "publish", p, {"publicationId": pub1.id}),
            ("disablePublication", "publish", p, {"publicationId": pub1.id}),
            ("updatePublicationMetadata", "publish", p, {"publicationId": pub1.id, "metadata": "changed"}),
            ("iceCandidate", "publish", p, {"memberId": p.id, "direction": "send", "candidate": eoc}),
            ("subscribe", "subscribe", s, {"memberId": s.id, "publicationId": pub2.id}),
            ("unsubscribe", "subscribe", s, {"subscriptionId": sub1.subscription["id"]}),
            ("answer", "subscribe", s, {"memberId": s.id, "answer": cur_answer}),
            ("changePreferredEncoding", "subscribe", s, {"subscriptionId": sub1.subscription["id"],
                                                         "preferredEncodingId": "h"}),
            ("iceCandidate", "subscribe", s, {"memberId": s.id, "direction": "recv", "candidate": eoc}),
            ("updateMemberMetadata", "updateMetadata", p, {"memberId": p.id, "metadata": "changed"}),
        ]
        for method, perm, m, params in member_cases:
            direction = f" {params['direction']}" if method == "iceCandidate" else ""
            with subtests.test(msg=f"{method}{direction} without member method {perm}"):
                await as_token(m.conn, minus(perm))
                assert_rpc_error(await m.conn.call_raw(method, params), 403, "insufficientPermissions")
            if method in ("publish", "subscribe"):
                with subtests.test(msg=f"{method} with sfu.enabled false"):
                    await as_token(m.conn, sfu_off)
                    assert_rpc_error(await m.conn.call_raw(method, params), 403, "insufficientPermissions")
            with subtests.test(msg=f"{method}{direction} with a token for other rooms only"):
                await as_token(m.conn, other_room)
                assert_rpc_error(await m.conn.call_raw(method, params), 403, "insufficientPermissions")
            await as_token(m.conn, full)
        for method in ("keepalive", "leave"):
            with subtests.test(msg=f"{method} with a token for other rooms only"):
                await as_token(p.conn, other_room)
                assert_rpc_error(await p.conn.call_raw(method, {"memberId": p.id}), 403, "insufficientPermissions")
        await as_token(p.conn, full)

        with subtests.test(msg="denied requests changed nothing"):
            assert snapshot(admin, rid) == before

        # -- controls: the same requests with exactly the needed permission succeed ---------
        def only(perm: str) -> str:
            return mint([rule(glob, [], "*", [perm])])

        async def ok(conn: Connection, token: str, method: str, params: dict) -> dict:
            await as_token(conn, token)
            return await conn.call(method, params)

        with subtests.test(msg="controls with exactly the needed permission"):
            await ok(p.conn, only("updateMetadata"), "updateMemberMetadata", {"memberId": p.id, "metadata": "m1"})
            await ok(p.conn, sfu_off, "updateMemberMetadata", {"memberId": p.id, "metadata": "m2"})
            await ok(p.conn, only("publish"), "updatePublicationMetadata", {"publicationId": pub1.id, "metadata": "pm"})
            await ok(p.conn, only("publish"), "disablePublication", {"publicationId": pub1.id})
            await ok(p.conn, only("publish"), "enablePublication", {"publicationId": pub1.id})
            await ok(p.conn, only("publish"), "iceCandidate", {"memberId": p.id, "direction": "send", "candidate": eoc})
            await ok(s.conn, only("subscribe"), "iceCandidate", {"memberId": s.id, "direction": "recv", "candidate": eoc})
            await ok(s.conn, only("subscribe"), "changePreferredEncoding",
                     {"subscriptionId": sub1.subscription["id"], "preferredEncodingId": "h"})
            await as_token(s.conn, only("subscribe"))
            sub2 = await s.subscribe(pub2.id)             # subscribe + answer
            await s.unsubscribe(sub2.subscription["id"])  # unsubscribe + answer
            await as_token(p.conn, only("publish"))
            pub3 = await p.publish(SineAudioTrack())     # publish
            await p.conn.call("unpublish", {"publicationId": pub3.id})
            await ok(p.conn, mint([rule(glob, [], "*", [])]), "keepalive", {"memberId": p.id})
            await ok(x, mint([rule(glob, ["updateMetadata"], None)]),
                     "updateRoomMetadata", {"roomId": rid, "metadata": "changed-ok"})
            after = admin.room(rid)
            assert after["metadata"] == "changed-ok"
            assert {m["name"]: m["metadata"] for m in after["members"]} == {"P": "m2", "S": ""}
            assert [(q["id"], q["metadata"], q["state"]) for q in after["publications"]] == \
                [(pub1.id, "pm", "enabled"), (pub2.id, "", "enabled")]
            await ok(s.conn, mint([rule(glob, [], "*", [])]), "leave", {"memberId": s.id})
            await ok(x, mint([rule(glob, ["close"], None)]), "closeRoom", {"roomId": rid})
            assert admin.call("GET", f"/v1/rooms/{rid}").status == 404
    finally:
        for pc in pcs:
            await pc.close()
        for c in conns:
            await c.close()
        for m in members:
            await m.close()


def test_every_method_needs_its_permission(server, subtests):
    run_async(permission_scenario(server.url, server.http, subtests), timeout=90)


# ---- sfu.maxSubscribersLimit -------------------------------------------------------------------

async def max_subscribers_scenario(url: str, http: str) -> None:
    admin = Admin(http)
    glob = uid("maxsub-")
    room = admin.create_room(glob + "r")
    tok = mint([rule(glob + "*", ROOM_METHODS, "*", MEMBER_METHODS, sfu={"enabled": True, "maxSubscribersLimit": 3})])
    m = await Member.join(with_token(url, tok), room["id"], "P", keepalive=False)
    try:
        pub = await m.publish(SineAudioTrack())
        assert pub.publication["maxSubscribers"] == 3, f"default should be min(50, limit 3): {pub.publication}"
        try:
            await m.publish(SineAudioTrack(), maxSubscribers=4)
            raise AssertionError("publish with maxSubscribers 4 > sfu.maxSubscribersLimit 3 was accepted")
        except RpcError as e:
            assert (e.code, e.name) == (400, "invalidParameter"), e
        # the refused publish left the room with one publication
        assert [q["id"] for q in admin.room(room["id"])["publications"]] == [pub.id]
    finally:
        await m.close()


def test_max_subscribers_limit(server):
    run_async(max_subscribers_scenario(server.url, server.http), timeout=40)


# ---- the documented minimum secret length ------------------------------------------------------

def test_auth_secret_length(server):
    """config: auth.secret must be at least 32 bytes (HS256 keys shorter than the hash are weak).
    A shorter one is refused at start with a clear configuration error (exit 2, nothing served);
    a 32-byte one starts and verifies tokens."""
    short = "0123456789abcdef"   # 16 bytes
    proc = subprocess.run([str(minato_binary()), "serve", "--port", "1"], env={**os.environ, "MINATO_AUTH_SECRET": short},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "auth.secret" in proc.stderr or "MINATO_AUTH_SECRET" in proc.stderr, proc.stderr
    assert "32 bytes" in proc.stderr, proc.stderr

    secret = "0123456789abcdef0123456789abcdef"   # 32 bytes
    srv = Server(minato_binary(), ARTIFACTS / "test_auth-secret32.log", env={"MINATO_AUTH_SECRET": secret})
    try:
        try:
            srv.start(timeout=15)
        except RuntimeError as e:
            pytest.fail(f"minato with a 32-byte MINATO_AUTH_SECRET did not start:\n{e}", pytrace=False)

        async def check() -> None:
            conn = await connect(srv.url, mint(FULL, secret=secret), "s32")
            try:
                assert "rooms" in await conn.call("listRooms", {})
            finally:
                await conn.close()
        run_async(check(), timeout=20)
    finally:
        srv.stop()


# ---- acting as another member -------------------------------------------------------------------

async def takeover_scenario(url: str) -> None:
    """keepalive takes a member over after a reconnect, and leave ends it: a token whose member
    rule cannot match the member's name may do neither (else any room member could hijack
    another's events by id)."""
    name = uid("takeover-")
    admin_conn = await connect(url, mint(), "setup")
    try:
        room = (await admin_conn.call("createRoom", {"name": name}))["room"]
        alice = await Member.join(with_token(url, mint([rule(name, [], "alice", MEMBER_METHODS)])), room["id"], "alice",
                                  keepalive=False)
        mallory = await connect(url, mint([rule(name, [], "mallory", MEMBER_METHODS)]), "mallory")
        try:
            for method in ("keepalive", "leave"):
                resp = await mallory.call_raw(method, {"memberId": alice.id})
                assert_rpc_error(resp, 403, "insufficientPermissions")
            # Alice is still hers: her own requests work and she is still in the room.
            assert (await alice.conn.call("keepalive", {"memberId": alice.id}))["ttlSec"] > 0
            members = (await admin_conn.call("getRoom", {"roomId": room["id"]}))["room"]["members"]
            assert [m["id"] for m in members] == [alice.id], members
        finally:
            await mallory.close()
            await alice.close()
    finally:
        await admin_conn.close()


def test_keepalive_and_leave_cannot_act_as_another_member(server):
    run_async(takeover_scenario(server.url), timeout=30)
