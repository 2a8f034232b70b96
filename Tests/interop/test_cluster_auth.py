"""Tokens through a node that does not host the room (cluster mode with auth.secret on): the
token a client bound on its own node (at connect, with `?token=`, or later with
`updateAuthToken`) is what the hosting node checks, so a relayed request is allowed or refused
exactly as it would be on the host; `listRooms` across the nodes filters by the token on each.

Two nodes and Redis (cluster.py), both nodes with the same auth.secret.
"""
from __future__ import annotations

from typing import Any

import pytest

from admin_util import AUTH_SECRET, MEMBER_METHODS, ROOM_METHODS, mint, rule, with_token
from cluster import running_cluster
from minato_client import Connection, run_async, unique_name

NODES = (1, 2)


@pytest.fixture(scope="module")
def cluster():
    with running_cluster(len(NODES), label="cluster-auth", MINATO_AUTH_SECRET=AUTH_SECRET) as c:
        yield c


def error_name(reply: dict) -> Any:
    return reply.get("error", {}).get("data", {}).get("name")


def test_tokens_hold_through_another_node(cluster):
    c = cluster
    full = mint([rule("cla-*", ROOM_METHODS, "*", MEMBER_METHODS)])
    other = mint([rule("elsewhere-*", ROOM_METHODS, "*", MEMBER_METHODS)])

    async def body() -> None:
        # A room hosted on n1, made through n1 (placement spreads rooms; retry until one lands there).
        maker = await Connection(with_token(c.ws_url(1), full), "maker").connect()
        for _ in range(20):
            room = (await maker.call("createRoom", {"name": unique_name("cla-")}))["room"]
            if room["id"].startswith("n1."):
                break
        else:
            raise AssertionError("20 rooms made through n1, none hosted on n1")
        rid, name = room["id"], room["name"]

        # Through n2 with a token for this room: join and act, answered by n1.
        good = await Connection(with_token(c.ws_url(2), full), "good").connect()
        joined = await good.call("join", {"roomId": rid, "name": "alice"})
        assert joined["member"]["id"].startswith("n1."), joined
        await good.call("updateMemberMetadata", {"memberId": joined["member"]["id"], "metadata": "hi"})

        # Through n2 with a token for other rooms: refused by the host, nothing changed.
        bad = await Connection(with_token(c.ws_url(2), other), "bad").connect()
        r = await bad.call_raw("join", {"roomId": rid, "name": "mallory"})
        assert error_name(r) == "insufficientPermissions", r
        listed = (await bad.call("listRooms"))["rooms"]
        assert all(x["id"] != rid for x in listed), f"listRooms with a token for other rooms shows {rid}: {listed}"
        # The same connection after updateAuthToken with a token for the room: allowed there too.
        await bad.call("updateAuthToken", {"token": full})
        r = await bad.call_raw("join", {"roomId": rid, "name": "mallory"})
        assert "result" in r, f"join after updateAuthToken through n2: {r}"
        listed = (await bad.call("listRooms"))["rooms"]
        assert [x["name"] for x in listed if x["id"] == rid] == [name], \
            f"listRooms through n2 with the room's token does not show it once: {listed}"

        # No token at all: the host refuses the relayed join (its channel carries no token).
        anon = await Connection(c.ws_url(2), "anon").connect()
        r = await anon.call_raw("join", {"roomId": rid, "name": "eve"})
        assert error_name(r) in ("invalidAuthToken", "insufficientPermissions"), r
        for conn in (maker, good, bad, anon):
            await conn.close()

    run_async(body(), timeout=30)
