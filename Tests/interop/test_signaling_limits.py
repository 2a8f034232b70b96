"""Signaling frame rules (docs/protocol.md "Transport"): text frames only, at most 256 KiB per
message. A too-large message closes the socket with 1009; a binary frame or a metadata string
over 4096 bytes gets a clear error and changes nothing; other connections are unaffected."""
from __future__ import annotations

import json

import websockets

from minato_client import Connection, assert_rpc_error, create_room, run_async, unique_name


async def scenario(url: str) -> None:
    room = await create_room(url, unique_name("limits"))
    rid = room["id"]
    bystander = await Connection(url, "bystander").connect()
    try:
        # A message just under the limit is read and answered (here: metadata too long).
        big = await Connection(url, "big").connect()
        meta = "m" * (200 * 1024)
        resp = await big.call_raw("updateRoomMetadata", {"roomId": rid, "metadata": meta})
        err = assert_rpc_error(resp, 400, "invalidParameter")
        assert "4096" in err["data"]["detail"], err
        assert (await big.call("getRoom", {"roomId": rid}))["room"]["metadata"] == room["metadata"]

        # A binary frame: invalidRequest, and the socket stays open.
        await big.ws.send(b"\x00\x01binary")
        orphan = await big.next_orphan(5)
        assert_rpc_error(orphan, -32600)
        assert big.is_open
        await big.close()

        # Over 256 KiB: the server closes with 1009 (message too big).
        ws = await websockets.connect(url, max_size=None, open_timeout=10, proxy=None)
        frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "getRoom",
                            "params": {"roomId": rid, "pad": "x" * (300 * 1024)}})
        await ws.send(frame)
        try:
            msg = await ws.recv()
            raise AssertionError(f"the server answered a 300 KiB message instead of closing: {msg[:200]}")
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            assert code == 1009, f"close code {code}, expected 1009 (message too big)"

        # Everyone else is still served, and the room is unchanged.
        res = await bystander.call("getRoom", {"roomId": rid})
        assert res["room"]["metadata"] == room["metadata"]
    finally:
        await bystander.close()


def test_oversize_binary_and_long_metadata(server):
    run_async(scenario(server.url), timeout=60)
