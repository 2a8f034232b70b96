"""A Python client of the Minato signaling protocol v1 (docs/protocol.md), with aiortc.

- `Connection`: one WebSocket, JSON-RPC 2.0 requests/responses, notifications
  (`roomEvent`, `offer`) collected and dispatched.
- `Member`: a joined member with its *send* RTCPeerConnection (client offers; `publish`)
  and its *recv* RTCPeerConnection (server offers: `subscribe` replies and `offer`
  notifications are applied and answered one at a time, in arrival order).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import aioice.ice
import websockets
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)

from waiting import await_until

log = logging.getLogger("minato_client")


def _loopback_only(use_ipv4: bool = True, use_ipv6: bool = False) -> list[str]:
    return ["127.0.0.1"] if use_ipv4 else []


def patch_aioice() -> None:
    """aioice skips 127.0.0.1 on purpose; in a lo-only namespace that leaves no candidate."""
    aioice.ice.get_host_addresses = _loopback_only


patch_aioice()


def new_peer_connection() -> RTCPeerConnection:
    # Without iceServers aiortc would use a public STUN server.
    return RTCPeerConnection(RTCConfiguration(iceServers=[]))


class RpcError(Exception):
    def __init__(self, error: dict, method: str = "?") -> None:
        self.error = error
        self.code = error.get("code")
        self.message = error.get("message")
        data = error.get("data") or {}
        self.name = data.get("name") if isinstance(data, dict) else None
        self.detail = data.get("detail") if isinstance(data, dict) else None
        super().__init__(f"{method}: {self.code} {self.message} ({self.name}): {self.detail}")


class Connection:
    """One WebSocket to the server."""

    def __init__(self, url: str, label: str = "conn") -> None:
        self.url = url
        self.label = label
        self.ws: Any = None
        self._ids = itertools.count(1)
        self._pending: dict[Any, asyncio.Future] = {}
        self._orphans: list[dict] = []              # responses with an id we did not wait for (or null)
        self._orphan_cond: Optional[asyncio.Condition] = None
        self.events: list[dict] = []                # every versioned roomEvent params, in arrival order
        # `activeSpeakersChanged` (no version: not logged or replayed), each with the
        # `time.monotonic()` it arrived at under "receivedAt"
        self.speaker_events: list[dict] = []
        self.offers: list[dict] = []                # every `offer` notification params
        self.notifications: list[dict] = []         # every notification, raw
        self._cond: Optional[asyncio.Condition] = None
        self.on_offer: Optional[Callable[[dict], None]] = None
        self.closed: Optional[asyncio.Future] = None
        self._reader: Optional[asyncio.Task] = None

    async def connect(self) -> "Connection":
        self.ws = await websockets.connect(self.url, max_size=None, open_timeout=10, proxy=None)
        self._cond = asyncio.Condition()
        self._orphan_cond = asyncio.Condition()
        self.closed = asyncio.get_running_loop().create_future()
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                msg = json.loads(text)
                log.debug("%s <- %s", self.label, text[:400])
                if "method" in msg and "id" not in msg:
                    self.notifications.append(msg)
                    if msg["method"] == "roomEvent" and "version" not in msg["params"]:
                        self.speaker_events.append({**msg["params"], "receivedAt": time.monotonic()})
                    elif msg["method"] == "roomEvent":
                        self.events.append(msg["params"])
                    elif msg["method"] == "offer":
                        self.offers.append(msg["params"])
                        if self.on_offer:
                            self.on_offer(msg["params"])
                    async with self._cond:
                        self._cond.notify_all()
                    continue
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                else:
                    self._orphans.append(msg)
                    async with self._orphan_cond:
                        self._orphan_cond.notify_all()
        except websockets.ConnectionClosed:
            pass
        finally:
            if not self.closed.done():
                self.closed.set_result(True)
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"{self.label}: WebSocket closed"))
            if self._cond:
                async with self._cond:
                    self._cond.notify_all()

    async def call_raw(self, method: str, params: Optional[dict] = None, timeout: float = 15) -> dict:
        """Sends a request and returns the whole response object (result or error)."""
        rid = next(self._ids)
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        text = json.dumps(msg)
        log.debug("%s -> %s", self.label, text[:400])
        await self.ws.send(text)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(rid, None)

    async def call(self, method: str, params: Optional[dict] = None, timeout: float = 15) -> dict:
        resp = await self.call_raw(method, params, timeout)
        if "error" in resp:
            raise RpcError(resp["error"], method)
        return resp["result"]

    async def send_text(self, text: str) -> None:
        """Sends an arbitrary frame (bad-input tests)."""
        await self.ws.send(text)

    async def next_orphan(self, timeout: float = 10) -> dict:
        """The next response that no call_raw was waiting for (e.g. id null after a parse error)."""
        deadline = time.monotonic() + timeout
        async with self._orphan_cond:
            while not self._orphans:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label}: no response within {timeout}s")
                try:
                    await asyncio.wait_for(self._orphan_cond.wait(), left)
                except asyncio.TimeoutError:
                    pass
            return self._orphans.pop(0)

    async def request_text(self, text: str, rid: Any, timeout: float = 10) -> dict:
        """Sends a hand-made frame whose id is `rid` and returns the response with that id."""
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        await self.ws.send(text)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(rid, None)

    async def wait_event(self, pred: Callable[[dict], bool], timeout: float = 10, start: int = 0) -> dict:
        """The first roomEvent (at index >= start) matching pred; waits up to timeout."""
        deadline = time.monotonic() + timeout
        async with self._cond:
            while True:
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(e.get("version"), e.get("type"), e.get("reason")) for e in self.events]
                    raise TimeoutError(f"{self.label}: no matching roomEvent within {timeout}s; saw {seen}")
                try:
                    await asyncio.wait_for(self._cond.wait(), left)
                except asyncio.TimeoutError:
                    pass

    async def wait_offers(self, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        async with self._cond:
            while len(self.offers) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label}: {len(self.offers)} offer notifications, wanted {count}")
                try:
                    await asyncio.wait_for(self._cond.wait(), left)
                except asyncio.TimeoutError:
                    pass

    @property
    def is_open(self) -> bool:
        return self.closed is not None and not self.closed.done()

    async def room_events_page(self, room_id: str, offset: int, limit: Optional[int] = None,
                               timeout: float = 15) -> tuple[list[dict], Optional[int]]:
        """One `subscribeRoomEvents` page: (events with version > offset, at most `limit` of them
        (server default 100), nextOffset). nextOffset is the version to ask from next while more
        remain, else None. The first call also starts live roomEvents on this socket."""
        params: dict = {"roomId": room_id, "offset": offset}
        if limit is not None:
            params["limit"] = limit
        res = await self.call("subscribeRoomEvents", params, timeout=timeout)
        return res["events"], res.get("nextOffset")

    async def room_events(self, room_id: str, offset: int = 0, limit: Optional[int] = None,
                          max_pages: int = 10_000) -> list[dict]:
        """Every event after `offset`, following `nextOffset` page after page (`limit` per page)."""
        out: list[dict] = []
        for _ in range(max_pages):
            page, nxt = await self.room_events_page(room_id, offset, limit)
            out += page
            if nxt is None:
                return out
            assert isinstance(nxt, int) and nxt > offset, f"nextOffset {nxt!r} does not move past offset {offset}"
            offset = nxt
        raise AssertionError(f"{self.label}: subscribeRoomEvents still had more after {max_pages} pages")

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader.cancel()


def event_matcher(type_: str, *, member_id: Optional[str] = None, publication_id: Optional[str] = None,
                  reason: Optional[str] = None, reasons: Optional[tuple] = None) -> Callable[[dict], bool]:
    def pred(ev: dict) -> bool:
        if ev.get("type") != type_:
            return False
        data = ev.get("data") or {}
        if member_id is not None and (data.get("member") or {}).get("id") != member_id:
            return False
        if publication_id is not None and (data.get("publication") or {}).get("id") != publication_id:
            return False
        if reason is not None and ev.get("reason") != reason:
            return False
        if reasons is not None and ev.get("reason") not in reasons:
            return False
        return True
    return pred


@dataclass
class Subscribed:
    subscription: dict
    mid: str
    track: MediaStreamTrack


@dataclass
class Published:
    publication: dict
    mid: str
    track: MediaStreamTrack

    @property
    def id(self) -> str:
        return self.publication["id"]


class Member:
    """A member joined over its own Connection, with send and recv RTCPeerConnections."""

    def __init__(self, conn: Connection, label: str = "member") -> None:
        self.conn = conn
        self.label = label
        self.member: dict = {}
        self.room: dict = {}
        self.reconnect_secret: Optional[str] = None   # the join result's reconnectSecret
        self.send_pc: Optional[RTCPeerConnection] = None
        self.recv_pc: Optional[RTCPeerConnection] = None
        self._recv_lock = asyncio.Lock()
        self._offer_tasks: list[asyncio.Task] = []
        self.offer_errors: list[BaseException] = []
        self.answered_offers = 0            # notification offers answered
        # Rewrites the receive connection's answer before it is sent (tests of answers a client
        # might send, e.g. one that rejects a stream it cannot decode); None sends aiortc's own.
        self.answer_rewriter: Optional[Callable[[str], str]] = None
        self._keepalive_task: Optional[asyncio.Task] = None
        conn.on_offer = self._on_offer_notification

    @property
    def id(self) -> str:
        return self.member["id"]

    @classmethod
    async def join(cls, url: str, room_id: str, name: str, *, keepalive: bool = True, **extra: Any) -> "Member":
        conn = await Connection(url, label=name).connect()
        m = cls(conn, label=name)
        res = await conn.call("join", {"roomId": room_id, "name": name, **extra})
        m.member, m.room = res["member"], res["room"]
        m.reconnect_secret = res.get("reconnectSecret")
        if keepalive:
            interval = float(extra.get("keepaliveIntervalSec", 30))
            m.start_keepalive(max(0.5, min(interval / 2, 5.0)))
        return m

    def keepalive_params(self) -> dict:
        """`keepalive` params: the member id and, when the join gave one, its reconnectSecret."""
        params = {"memberId": self.id}
        if self.reconnect_secret is not None:
            params["reconnectSecret"] = self.reconnect_secret
        return params

    async def keepalive(self, timeout: float = 5) -> dict:
        """One `keepalive` on this member's current connection -> {ttlSec}."""
        return await self.conn.call("keepalive", self.keepalive_params(), timeout=timeout)

    def start_keepalive(self, period: float) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(period)      # pacing: the keepalive period
                conn = self.conn
                try:
                    await self.keepalive()
                except (RpcError, ConnectionError, asyncio.TimeoutError, websockets.ConnectionClosed):
                    if self.conn is conn:
                        return
                    # taken over meanwhile: keep going on the new socket
        self._keepalive_task = asyncio.ensure_future(loop())

    async def take_over(self, url: Optional[str] = None, label: Optional[str] = None,
                        close_old: bool = True) -> dict:
        """Reconnects: opens a new socket (to `url`, default this member's) and takes the member
        over with `keepalive {memberId, reconnectSecret}`; this object then uses the new socket
        (server offers included). The old socket is closed unless `close_old` is false (the
        caller closes it). Returns the keepalive result."""
        old = self.conn
        conn = await Connection(url or old.url, label=label or f"{self.label}-2").connect()
        # Switched before the keepalive: the server may re-send an unanswered offer on the new
        # socket as part of the takeover, even before the keepalive's response arrives.
        conn.on_offer = self._on_offer_notification
        self.conn = conn
        try:
            res = await conn.call("keepalive", self.keepalive_params())
        except BaseException:
            self.conn = old
            await conn.close()
            raise
        old.on_offer = None
        if close_old:
            await old.close()
        return res

    # ---- send side -------------------------------------------------------------------------

    def _ensure_send_pc(self) -> RTCPeerConnection:
        if self.send_pc is None:
            self.send_pc = new_peer_connection()
        return self.send_pc

    async def publish(self, track: MediaStreamTrack, *, codec: Optional[str] = None, **extra: Any) -> Published:
        """Adds a sendonly transceiver, offers all current m-lines (a re-offer after the first),
        and calls `publish` for the new mid. `codec` ("video/H264", ...) sets codec preferences."""
        pc = self._ensure_send_pc()
        tr = pc.addTransceiver(track, direction="sendonly")
        if codec:
            caps = RTCRtpSender.getCapabilities(track.kind).codecs
            prefs = [c for c in caps if c.mimeType.lower() == codec.lower()]
            if not prefs:
                raise ValueError(f"aiortc has no codec {codec}")
            tr.setCodecPreferences(prefs)
        await pc.setLocalDescription(await pc.createOffer())
        offer = pc.localDescription
        res = await self.conn.call("publish", {
            "memberId": self.id, "contentType": track.kind, "mid": tr.mid,
            "offer": {"type": offer.type, "sdp": offer.sdp}, **extra})
        ans = res["answer"]
        await pc.setRemoteDescription(RTCSessionDescription(sdp=ans["sdp"], type=ans["type"]))
        return Published(res["publication"], tr.mid, track)

    async def unpublish(self, pub: Published) -> None:
        await self.conn.call("unpublish", {"publicationId": pub.id})

    # ---- recv side -------------------------------------------------------------------------

    def _ensure_recv_pc(self) -> RTCPeerConnection:
        if self.recv_pc is None:
            self.recv_pc = new_peer_connection()
        return self.recv_pc

    async def _apply_server_offer(self, offer: dict) -> None:
        pc = self._ensure_recv_pc()
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer["sdp"], type=offer["type"]))
        learn_new_ssrcs(pc)
        await pc.setLocalDescription(await pc.createAnswer())
        ans = pc.localDescription
        sdp = self.answer_rewriter(ans.sdp) if self.answer_rewriter else ans.sdp
        await self.conn.call("answer", {"memberId": self.id, "answer": {"type": ans.type, "sdp": sdp}})

    def _on_offer_notification(self, params: dict) -> None:
        async def handle() -> None:
            try:
                async with self._recv_lock:
                    await self._apply_server_offer(params["offer"])
                    self.answered_offers += 1
            except BaseException as e:  # noqa: BLE001 - surfaced by tests via offer_errors
                log.exception("%s: answering server offer failed", self.label)
                self.offer_errors.append(e)
        self._offer_tasks.append(asyncio.ensure_future(handle()))

    async def subscribe(self, publication_id: str, **extra: Any) -> Subscribed:
        res = await self.conn.call("subscribe", {"memberId": self.id, "publicationId": publication_id, **extra})
        async with self._recv_lock:
            await self._apply_server_offer(res["offer"])
        mid = res["mid"]
        tr = next((t for t in self.recv_pc.getTransceivers() if t.mid == mid), None)
        if tr is None or tr.receiver.track is None:
            raise AssertionError(f"{self.label}: no receiving transceiver with mid {mid} after subscribe")
        return Subscribed(res["subscription"], mid, tr.receiver.track)

    async def unsubscribe(self, subscription_id: str) -> None:
        """`unsubscribe` returns a server offer without that stream: apply it and answer."""
        res = await self.conn.call("unsubscribe", {"subscriptionId": subscription_id})
        if res.get("offer"):
            async with self._recv_lock:
                await self._apply_server_offer(res["offer"])

    async def wait_offers_answered(self, count: int, timeout: float = 10) -> None:
        def done() -> bool:
            if self.offer_errors:
                raise AssertionError(f"{self.label}: answering a server offer failed: {self.offer_errors[0]!r}")
            return self.answered_offers >= count
        await await_until(done, timeout, f"{self.label}: {count} server offers answered",
                          state=lambda: f"{self.answered_offers} answered")

    async def wait_offers_settled(self, timeout: float = 10) -> None:
        """Waits until every `offer` notification received so far has been answered."""
        await self.wait_offers_answered(len(self.conn.offers), timeout)

    # ---- teardown --------------------------------------------------------------------------

    async def leave(self) -> None:
        await self.conn.call("leave", {"memberId": self.id})

    async def close(self) -> None:
        if self._keepalive_task:
            self._keepalive_task.cancel()
        for t in self._offer_tasks:
            t.cancel()
        for pc in (self.send_pc, self.recv_pc):
            if pc is not None:
                try:
                    await asyncio.wait_for(pc.close(), 5)
                except Exception:  # noqa: BLE001
                    pass
        await self.conn.close()


async def create_room(url: str, name: str) -> dict:
    conn = await Connection(url, label="admin").connect()
    try:
        return (await conn.call("createRoom", {"name": name}))["room"]
    finally:
        await conn.close()


class LoopThread:
    """An asyncio loop running on a thread of its own for a whole test, so aiortc members live
    beside Playwright's sync API (which owns the test thread's loop): `run(coro)` runs a
    coroutine there and returns its result."""

    def __init__(self) -> None:
        import threading
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self.loop).result(timeout + 5)

    def call_soon(self, fn: Callable[[], Any]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def run_async(coro: Any, timeout: float = 100) -> Any:
    """Runs a test coroutine on a fresh event loop, bounded in time. When this thread already
    runs a loop (Playwright's sync API keeps one once a module's Chromium started), the fresh
    loop runs on a thread of its own."""
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(lambda: asyncio.run(bounded())).result()


def assert_rpc_error(resp: dict, code: int, name: Optional[str] = None) -> dict:
    """Asserts `resp` is a JSON-RPC error with `code`; for domain errors also
    error.message == name and error.data.name == name. Returns the error object."""
    assert "error" in resp, f"expected error {code} {name}, got {resp}"
    err = resp["error"]
    assert err.get("code") == code, f"expected code {code} ({name}), got {err}"
    if name is not None:
        assert err.get("message") == name, f"expected message {name!r}, got {err}"
        data = err.get("data") or {}
        assert data.get("name") == name, f"expected data.name {name!r}, got {err}"
    return err


def learn_new_ssrcs(pc: RTCPeerConnection) -> None:
    """The server reuses an ended m-section for a later subscription of its kind, with the same
    mid and new SSRCs (docs/protocol.md "Media negotiation"). aiortc 1.x sets a receiver's SSRCs
    up once, when it starts receiving: tell a started receiver's RTP router (and its RTX map)
    about the SSRCs the remote description now names for its m-section. Without this a packet
    of an SSRC aiortc does not know is routed by payload type alone, and dropped when two
    receivers share that payload type."""
    desc = pc.remoteDescription
    if desc is None:
        return
    sections: dict[str, dict] = {}
    current: Optional[dict] = None
    for line in desc.sdp.splitlines():
        if line.startswith("m="):
            current = {"ssrcs": [], "fid": None}
        elif current is None:
            continue
        elif line.startswith("a=mid:"):
            sections[line[6:].strip()] = current
        elif line.startswith("a=ssrc:"):
            ssrc = int(line[7:].split()[0])
            if ssrc not in current["ssrcs"]:
                current["ssrcs"].append(ssrc)
        elif line.startswith("a=ssrc-group:FID "):
            fid = [int(x) for x in line[len("a=ssrc-group:FID "):].split()]
            if len(fid) == 2:
                current["fid"] = fid
    for t in pc.getTransceivers():
        section = sections.get(t.mid or "")
        receiver = t.receiver
        router = getattr(receiver.transport, "_rtp_router", None)
        if not section or router is None or receiver not in router.receivers:
            continue                    # not receiving yet: receive() registers its SSRCs
        for ssrc in section["ssrcs"]:
            router.ssrc_table[ssrc] = receiver
        rtx_map = getattr(receiver, "_RTCRtpReceiver__rtx_ssrc", None)
        if section["fid"] and isinstance(rtx_map, dict):
            rtx_map[section["fid"][1]] = section["fid"][0]


def sdp_media_sections(sdp: str) -> list[dict]:
    """[{kind, mid, direction, codecs:[encoding names], port}] for each m-line."""
    out: list[dict] = []
    for line in sdp.splitlines():
        line = line.strip()
        if line.startswith("m="):
            parts = line[2:].split()
            out.append({"kind": parts[0], "port": parts[1], "mid": None, "direction": "sendrecv", "codecs": []})
        elif not out:
            continue
        elif line.startswith("a=mid:"):
            out[-1]["mid"] = line[6:]
        elif line in ("a=sendonly", "a=recvonly", "a=sendrecv", "a=inactive"):
            out[-1]["direction"] = line[2:]
        elif line.startswith("a=rtpmap:"):
            out[-1]["codecs"].append(line.split()[1].split("/")[0])
    return out


def unique_name(prefix: str) -> str:
    import uuid
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
