"""WHIP and WHEP with auth on (issue 14): the same JWT as the WebSocket, as `Authorization:
Bearer`; the admin API kicks a session member; `media.clientIceServers` become `Link` headers.

- No token: 401 `invalidAuthToken`. A token for another room, or whose member rule does not
  match the WHIP member's name or lacks `publish`: 403 `insufficientPermissions`; nothing is
  created. The right token: 201.
- WHEP needs `subscribe` for a member rule matching the player's generated `whep-…` name.
- The admin API kicks the WHIP member: memberLeft (reason `kicked`), and its session URL is gone.
"""
from __future__ import annotations

from admin_util import ADMIN_SECRET, AUTH_SECRET, Admin, mint, rule, with_token
from minato_client import Connection, run_async, unique_name
from test_whip_whep import WhepPlayer, WhipPublisher, ahttp, assert_status

MINATO_SERVER_ENV = {
    "MINATO_AUTH_SECRET": AUTH_SECRET,
    "MINATO_ADMIN_API_SECRET": ADMIN_SECRET,
    "MINATO_MEDIA_CLIENT_ICE_SERVERS": "stun:stun.example.test:3478,turn:turn.example.test:3478?transport=udp",
}


def test_tokens_permissions_kick_and_ice_server_links(server):
    async def body() -> None:
        name = unique_name("whipauth")
        url = f"{server.http}/whip/{name}?name=obs"
        admin = Admin(server.http)
        rooms_before = admin.ok("GET", "/v1/rooms")["rooms"]
        whips: list[WhipPublisher] = []

        async def attempt(token: str | None):
            w = WhipPublisher()
            whips.append(w)
            w_headers = {"Authorization": f"Bearer {token}"} if token else None
            return w, await w.post(url, headers=w_headers)

        try:
            _, r = await attempt(None)
            assert_status(r, 401, "invalidAuthToken")
            _, r = await attempt("not-a-jwt")
            assert_status(r, 401, "invalidAuthToken")
            _, r = await attempt(mint([rule(name="other-room")]))
            assert_status(r, 403, "insufficientPermissions")
            _, r = await attempt(mint([rule(name=name, member="someone-else")]))
            assert_status(r, 403, "insufficientPermissions")
            _, r = await attempt(mint([rule(name=name, member="obs", member_methods=["subscribe"])]))
            assert_status(r, 403, "insufficientPermissions")
            # Refused requests changed nothing: the room was not even created.
            assert admin.ok("GET", "/v1/rooms")["rooms"] == rooms_before

            w, r = await attempt(mint([rule(name=name, member="obs", member_methods=["publish"])]))
            assert r.status == 201, r
            links = r.headers.get("link", [])
            assert sorted(links) == sorted(['<stun:stun.example.test:3478>; rel="ice-server"',
                                            '<turn:turn.example.test:3478?transport=udp>; rel="ice-server"']), r.headers

            # WHEP: `subscribe` for the player's own (generated) name.
            player = WhepPlayer()
            r = await player.post(f"{server.http}/whep/{name}/obs")
            assert_status(r, 401, "invalidAuthToken")
            await player.close()
            player = WhepPlayer()
            r = await player.post(f"{server.http}/whep/{name}/obs",
                                  headers={"Authorization": "Bearer " + mint([rule(name=name, member="obs")])})
            assert_status(r, 403, "insufficientPermissions")
            await player.close()
            player = WhepPlayer()
            r = await player.post(f"{server.http}/whep/{name}/obs",
                                  headers={"Authorization": "Bearer " + mint([rule(name=name, member="whep-*",
                                                                                   member_methods=["subscribe"])])})
            assert r.status == 201, r
            await player.close()

            # The admin API kicks the WHIP member; its session is gone.
            room = next(x for x in admin.ok("GET", "/v1/rooms")["rooms"] if x["name"] == name)
            conn = await Connection(with_token(server.url, mint()), label="watch").connect()
            await conn.call("subscribeRoomEvents", {"roomId": room["id"], "offset": 0})
            members = admin.ok("GET", f"/v1/rooms/{room['id']}/members")["members"]
            obs = next(m for m in members if m["name"] == "obs")
            assert obs["type"] == "bot", obs
            start = len(conn.events)
            admin.ok("DELETE", f"/v1/rooms/{room['id']}/members/{obs['id']}")
            ev = await conn.wait_event(lambda e: e["type"] == "memberLeft" and e["data"]["member"]["name"] == "obs", 10, start)
            assert ev.get("reason") == "kicked", ev
            assert_status(await ahttp("DELETE", server.http + w.location), 404, "sessionNotFound")
            await conn.close()
        finally:
            for w in whips:
                await w.close()

    run_async(body(), timeout=60)
