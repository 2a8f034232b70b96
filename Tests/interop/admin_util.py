"""Helpers for the auth and admin-API interop tests (test_auth, test_admin, test_admin_openapi):
HS256 client tokens minted with PyJWT, the REST admin API over loopback, Prometheus text,
the server's UDP media sockets, and a WebSocket that the server is expected to close.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Optional

import jwt
import websockets

from waiting import await_until

# At least 32 bytes: HS256 keys shorter than the hash output trip an assertion in the server's
# JWT library (debug builds); test_auth.test_auth_secret_of_16_bytes covers the documented minimum.
AUTH_SECRET = "interop-auth-secret-0123456789abcdef"
ADMIN_SECRET = "interop-admin-api-secret-0123456789"
APP_ID = "interop-app"

ROOM_METHODS = ("create", "close", "updateMetadata")
MEMBER_METHODS = ("publish", "subscribe", "updateMetadata")

# Default media UDP port range of the server (config media.ice.portMin/portMax).
MEDIA_PORT_MIN, MEDIA_PORT_MAX = 40000, 40999


# ---- tokens ------------------------------------------------------------------------------------

def rule(name: str = "*", methods: Iterable[str] = ROOM_METHODS, member: Optional[str] = "*",
         member_methods: Iterable[str] = MEMBER_METHODS, sfu: Optional[dict] = None) -> dict:
    """One scope.rooms[] entry. member=None leaves out the `member` object."""
    r: dict[str, Any] = {"name": name, "methods": list(methods)}
    if member is not None:
        r["member"] = {"name": member, "methods": list(member_methods)}
    if sfu is not None:
        r["sfu"] = sfu
    return r


def claims(rooms: Optional[list[dict]] = None, *, app: str = APP_ID, ttl: float = 3600,
           exp: Optional[int] = None, admin: Optional[bool] = None, version: int = 3) -> dict:
    now = int(time.time())
    scope: dict[str, Any] = {"appId": app, "rooms": rooms if rooms is not None else [rule()]}
    if admin is not None:
        scope["admin"] = admin
    return {"jti": str(uuid.uuid4()), "iat": now, "exp": exp if exp is not None else int(now + ttl),
            "version": version, "scope": scope}


def sign(payload: dict, secret: str = AUTH_SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode(payload, secret, algorithm=algorithm)


def mint(rooms: Optional[list[dict]] = None, *, secret: str = AUTH_SECRET, **kw: Any) -> str:
    """A valid-looking SkyWay v3 token (HS256) with `rooms` rules (default: everything)."""
    return sign(claims(rooms, **kw), secret)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_token(ws_url: str, token: str) -> str:
    return f"{ws_url}?token={token}"


# ---- REST --------------------------------------------------------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.headers.get('content-type')} {self.text[:600]}"


def http(method: str, url: str, body: Any = None, *, bearer: Optional[str] = None,
         headers: Optional[dict] = None, raw: Optional[bytes] = None, timeout: float = 10) -> HttpResponse:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if bearer is not None:
        req.add_header("Authorization", f"Bearer {bearer}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return HttpResponse(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode())
    except urllib.error.HTTPError as e:
        return HttpResponse(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode())


class Admin:
    """The REST admin API of one server, with a bearer credential."""

    def __init__(self, base: str, bearer: Optional[str] = ADMIN_SECRET) -> None:
        self.base = base.rstrip("/")
        self.bearer = bearer

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> HttpResponse:
        kw.setdefault("bearer", self.bearer)
        return http(method, self.base + path, body, **kw)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        r = self.call(method, path, body)
        assert r.status == status, f"{method} {path}: expected {status}, got {r}"
        assert r.headers.get("content-type", "").startswith("application/json"), f"{method} {path}: {r}"
        return r.json

    def room(self, room_id: str) -> dict:
        return self.ok("GET", f"/v1/rooms/{room_id}")["room"]

    def create_room(self, name: Optional[str] = None, **extra: Any) -> dict:
        body = {**({"name": name} if name is not None else {}), **extra}
        return self.ok("POST", "/v1/rooms", body, status=201)["room"]


def assert_http_error(r: HttpResponse, status: int, name: str) -> dict:
    """Exactly {"error":{"name":name,"detail":<non-empty string>}} with HTTP `status`, JSON."""
    assert r.status == status, f"expected HTTP {status} {name}, got {r}"
    assert r.headers.get("content-type", "").startswith("application/json"), f"not JSON: {r}"
    body = r.json
    assert isinstance(body, dict) and set(body) == {"error"}, f"error body shape: {r}"
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"name", "detail"}, f"error object shape: {r}"
    assert err["name"] == name, f"expected error name {name!r}, got {r}"
    assert isinstance(err["detail"], str) and err["detail"], f"empty detail: {r}"
    return err


# ---- Prometheus --------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(base: str) -> dict[tuple[str, frozenset], float]:
    r = http("GET", base.rstrip("/") + "/metrics")
    assert r.status == 200, f"/metrics: {r}"
    assert r.headers.get("content-type", "").startswith("text/plain"), f"/metrics content type: {r.headers}"
    out: dict[tuple[str, frozenset], float] = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"/metrics: not a Prometheus sample line: {line!r}"
        labels = frozenset(_LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(samples: dict[tuple[str, frozenset], float], metric_name: str, /, **labels: str) -> Optional[float]:
    return samples.get((metric_name, frozenset(labels.items())))


# ---- UDP sockets -------------------------------------------------------------------------------

def server_udp_ports(pid: int, lo: int = MEDIA_PORT_MIN, hi: int = MEDIA_PORT_MAX) -> list[int]:
    """Local ports in [lo, hi] of the UDP sockets process `pid` holds open (its fds matched to
    /proc/PID/net/udp{,6} by inode). Clients' sockets in the same namespace are not counted."""
    inodes: set[str] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    ports: list[int] = []
    for table in ("udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[9] not in inodes:
                continue
            port = int(parts[1].rsplit(":", 1)[1], 16)
            if lo <= port <= hi:
                ports.append(port)
    return sorted(ports)


# ---- WebSocket close ---------------------------------------------------------------------------

async def expect_close(url: str, timeout: float = 5) -> tuple[int, str]:
    """Connects and returns the (code, reason) of the close frame the server sends before any
    message (e.g. a bad ?token=)."""
    ws = await websockets.connect(url, proxy=None, open_timeout=5)
    try:
        msg = await asyncio.wait_for(ws.recv(), timeout)
        raise AssertionError(f"expected the server to close the socket, it sent {msg[:200]!r}")
    except websockets.ConnectionClosed as e:
        assert e.rcvd is not None, f"the connection ended without a close frame from the server ({e!r})"
        return e.rcvd.code, e.rcvd.reason
    finally:
        await ws.close()


def close_info(conn: Any) -> tuple[Optional[int], Optional[str]]:
    """Close code and reason the server sent on a minato_client.Connection (after it closed)."""
    return conn.ws.close_code, conn.ws.close_reason


# ---- waiting -----------------------------------------------------------------------------------

async def poll(pred, timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    """Polls pred() (sync or async) until it returns a truthy value; that value, or WaitTimeout
    (a TimeoutError). The suite's one async wait (waiting.await_until) under its older name."""
    return await await_until(pred, timeout, what, interval=interval)


async def wait_notification(conn: Any, method: str, timeout: float, start: int = 0) -> dict:
    async def find() -> Optional[dict]:
        return next((n for n in conn.notifications[start:] if n.get("method") == method), None)
    return await poll(find, timeout, what=f"{conn.label}: notification {method}")


class BackgroundLoop:
    """An asyncio loop on its own thread, so clients (keepalives, media) stay live while a
    synchronous test (schemathesis) runs on the main thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bg-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
