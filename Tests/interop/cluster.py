"""Several Minato nodes and one Redis on one machine, each on a "host" of its own: a network
namespace joined by a veth pair to a bridge (README.md "The two commands", docs/architecture.md "Cluster").

    with Cluster(3) as c:                     # namespaces, bridge and veth pairs; nothing runs yet
        c.start_redis()                       # redis-server in its namespace, 198.18.2.2:6379
        for i in (1, 2, 3):
            c.start_node(i)                   # minato n<i> at 198.18.2.1<i>:7880, cluster keys set
        for i in (1, 2, 3):
            c.wait_ready(i)                   # /readyz 200: registered in Redis
        c.admin(1, "GET", "/v1/nodes")        # (status, headers, json), bearer secret, no redirects
        c.cut_redis(2); c.heal_redis(2)       # nftables in n2's namespace: no traffic with Redis
        c.kill_node(3); c.kill_redis()        # SIGKILL (or any signal)

Layout, all of it in 198.18.2.0/24 (198.18.0.0/15 is set aside for benchmarking networks):

    minato-cbr-<pid>     the bridge `br0`; one port per host below (`client`, `redis`, `n<i>`)
    minato-credis-<pid>  eth0 198.18.2.2        redis-server
    minato-cn<i>-<pid>   eth0 198.18.2.1<i>     minato n<i> (HTTP/WebSocket and media)
    (this namespace)     mcl<pid> 198.18.2.100  the test process: aiortc, HTTP, WebSocket clients

Each host is joined to the bridge by a veth pair whose one end is a bridge port; `lo` is up in
every namespace. The test process's namespace is the one scripts/interop.sh made with
`unshare -n`; its veth is the only way out of `lo`, so clients reach the nodes (and Redis) over
the bridge exactly as other hosts would. aiortc in this namespace must gather candidates on
198.18.2.100 instead of 127.0.0.1: `aioice_addresses([CLIENT_ADDR])` (a context manager) does
that for the cluster tests only and puts back minato_client's loopback-only choice afterwards.

Everything is removed on exit, also when the body raises: processes are stopped (SIGTERM, then
SIGKILL after a deadline), the client's veth is deleted (its peer goes with it), the namespaces
are deleted. Namespaces of this layout left by a killed run (a <pid> that no longer exists) are
deleted at start, after killing whatever still runs in them. Needs root.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from conftest import ARTIFACTS, REPO, minato_binary
from impair import nft_binary
from waiting import WaitTimeout, wait_until

SUBNET = "198.18.2"
PREFIX_LEN = 24
REDIS_ADDR = f"{SUBNET}.2"
REDIS_PORT = 6379
CLIENT_ADDR = f"{SUBNET}.100"
NODE_PORT = 7880
REDIS_SERVER = "/usr/bin/redis-server"

# Both at least 32 bytes (the server refuses shorter admin secrets).
ADMIN_SECRET = "interop-cluster-admin-secret-0123456789"
CLUSTER_SECRET = "interop-cluster-link-secret-0123456789abcdef"
LEASE_MS = 2000

NS_PREFIX = "minato-c"
_NS_PATTERN = re.compile(r"^minato-c(?:br|redis|n\d+)-(\d+)$")
CUT_TABLE = "minato_cut"
LOSS_TABLE = "minato_link_loss"


def node_addr(i: int) -> str:
    return f"{SUBNET}.1{i}"


def env_name(path: str) -> str:
    """The environment variable of a configuration key, as ConfigKey.environmentName makes it:
    MINATO_ + the dotted path's parts with camelCase turned into CAMEL_CASE, joined by `_`
    (`media.ice.localAddresses` -> MINATO_MEDIA_ICE_LOCAL_ADDRESSES)."""
    return "MINATO_" + "_".join(re.sub(r"([A-Z])", r"_\1", part).upper() for part in path.split("."))


# The cluster's configuration keys (config/minato.yaml; `cluster.advertiseUrl`, `cluster.drainTimeoutSec`
# are named so in Sources/MinatoCluster). Their variables come from env_name:
# MINATO_CLUSTER_REDIS_URL, MINATO_CLUSTER_NODE_ID, MINATO_CLUSTER_ADVERTISE_URL, ...
KEY_REDIS_URL = "cluster.redisUrl"
KEY_NODE_ID = "cluster.nodeId"
KEY_ADVERTISE_URL = "cluster.advertiseUrl"
KEY_SECRET = "cluster.secret"
KEY_LEASE_MS = "cluster.leaseMs"
KEY_DRAIN_TIMEOUT_SEC = "cluster.drainTimeoutSec"


def _run(cmd: list[str], *, input: Optional[str] = None, check: bool = True, timeout: float = 15) -> str:
    r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}\n{input or ''}")
    return r.stdout


def netns_names() -> list[str]:
    out = _run(["ip", "-j", "netns", "list"], check=False).strip()
    try:
        return [x["name"] for x in json.loads(out or "[]")]
    except ValueError:
        return [line.split()[0] for line in out.splitlines() if line.strip()]


def _netns_pids(name: str) -> list[int]:
    out = _run(["ip", "netns", "pids", name], check=False)
    return [int(x) for x in out.split() if x.isdigit()]


def delete_stale() -> list[str]:
    """Deletes this layout's namespaces (minato-cbr-/credis-/cn<i>-<pid>) whose pid is gone, left
    by a killed run, after SIGKILLing the processes still running in them (a node or Redis the
    killed run started: they would keep the namespace alive after `ip netns delete`)."""
    gone = []
    for name in netns_names():
        m = _NS_PATTERN.match(name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        for pid in _netns_pids(name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _run(["ip", "netns", "delete", name], check=False)
        gone.append(name)
    return gone


# ---- HTTP without redirects --------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
        return None         # urllib then raises HTTPError with the 3xx: the caller sees it as is


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


@dataclass
class Reply:
    status: int
    headers: dict[str, str]     # lower-case names
    text: str

    def header(self, name: str) -> Optional[str]:
        return self.headers.get(name.lower())

    @property
    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.text) if self.text else None
        except ValueError:
            return None

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.header('content-type')} {self.text[:600]!r}"


def request(method: str, url: str, body: Any = None, *, content_type: Optional[str] = None,
            bearer: Optional[str] = None, headers: Optional[dict[str, str]] = None,
            timeout: float = 10) -> Reply:
    """One HTTP request; redirects are returned, not followed. `body`: str/bytes as is, anything
    else as JSON (Content-Type application/json unless `content_type` says otherwise)."""
    data: Optional[bytes] = None
    if body is not None:
        if isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
            content_type = content_type or "application/json"
    req = urllib.request.Request(url, data=data, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    if bearer is not None:
        req.add_header("Authorization", f"Bearer {bearer}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode(errors="replace"))
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode(errors="replace"))


# ---- Redis, by hand: enough RESP for PING and looking at keys -----------------------------------

def redis_command(*args: str, host: str = REDIS_ADDR, port: int = REDIS_PORT, timeout: float = 2.0) -> Any:
    """Sends one command (RESP array of bulk strings) and returns the parsed reply: str for
    simple strings and bulk strings, int, None, list; an error reply raises RuntimeError."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(payload)
        f = s.makefile("rb")

        def parse() -> Any:
            line = f.readline()
            if not line:
                raise ConnectionError("Redis closed the connection")
            kind, rest = line[:1], line[1:].rstrip(b"\r\n").decode()
            if kind == b"+":
                return rest
            if kind == b"-":
                raise RuntimeError(f"Redis error: {rest}")
            if kind == b":":
                return int(rest)
            if kind == b"$":
                n = int(rest)
                if n < 0:
                    return None
                data = f.read(n + 2)
                return data[:-2].decode(errors="replace")
            if kind == b"*":
                n = int(rest)
                return None if n < 0 else [parse() for _ in range(n)]
            raise RuntimeError(f"unexpected Redis reply {line!r}")
        return parse()


def redis_pings(host: str = REDIS_ADDR, port: int = REDIS_PORT, timeout: float = 1.0) -> bool:
    try:
        return redis_command("PING", host=host, port=port, timeout=timeout) == "PONG"
    except (OSError, RuntimeError):
        return False


# ---- aiortc on the client's address -------------------------------------------------------------

@contextlib.contextmanager
def aioice_addresses(addresses: Iterable[str] = (CLIENT_ADDR,)):
    """While in the block, aioice (aiortc's ICE) gathers host candidates on `addresses` only.

    minato_client's patch_aioice() makes it gather only 127.0.0.1 (the suite's lo-only
    namespace); a cluster client must offer its 198.18.2.100 instead (the nodes cannot reach this
    namespace's loopback). The previous function is put back on exit, so the rest of the suite,
    run in the same process, keeps the loopback-only behaviour. Affects what is gathered inside
    the block (setLocalDescription), whenever the peer connection was made."""
    import aioice.ice
    import minato_client  # noqa: F401 - its loopback patch is applied first, and restored last

    chosen = list(addresses)
    previous = aioice.ice.get_host_addresses

    def only(use_ipv4: bool = True, use_ipv6: bool = False) -> list[str]:
        return [a for a in chosen if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]

    aioice.ice.get_host_addresses = only
    try:
        yield chosen
    finally:
        aioice.ice.get_host_addresses = previous


def sdp_candidate_addresses(sdp: str) -> list[str]:
    """The connection address of every `a=candidate:` line of an SDP."""
    out = []
    for line in sdp.splitlines():
        line = line.strip()
        if line.startswith("a=candidate:"):
            parts = line.split()
            if len(parts) >= 5:
                out.append(parts[4])
    return out


# ---- the cluster ---------------------------------------------------------------------------------

class Cluster:
    """A bridge, Redis's host, `n` node hosts and this process's namespace as the client host."""

    def __init__(self, n: int = 3, *, tag: Optional[str] = None, label: str = "cluster") -> None:
        """`label` names the logs (artifacts/interop/<label>-n<i>.log, <label>-redis.log): one per
        test module, so two modules' clusters never write into each other's files."""
        if not 1 <= n <= 9:
            raise ValueError(f"{n} nodes: 1..9 (node i is {SUBNET}.1<i>)")
        self.n = n
        self.label = label
        tag = tag or str(os.getpid())
        self.tag = tag
        self.bridge_ns = f"{NS_PREFIX}br-{tag}"
        self.redis_ns = f"{NS_PREFIX}redis-{tag}"
        self.node_ns = {i: f"{NS_PREFIX}n{i}-{tag}" for i in range(1, n + 1)}
        self.client_if = f"mcl{tag}"[:15]
        self.admin_secret = ADMIN_SECRET
        self.cluster_secret = CLUSTER_SECRET
        self.redis_proc: Optional[subprocess.Popen] = None
        self.procs: dict[int, subprocess.Popen] = {}
        self.node_env: dict[int, dict[str, str]] = {}
        self._logs: dict[Any, Any] = {}
        self._started_once: set[Any] = set()
        self._made_ns: list[str] = []
        self._made_client_link = False
        self._cut: set[int] = set()
        self._redis_dir: Optional[str] = None

    # ---- network -------------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        return [self.bridge_ns, self.redis_ns, *self.node_ns.values()]

    def _in(self, ns: str, *cmd: str, input: Optional[str] = None, check: bool = True) -> str:
        return _run(["ip", "netns", "exec", ns, *cmd], input=input, check=check)

    def start(self) -> "Cluster":
        delete_stale()
        existing = set(netns_names())
        for ns in self.namespaces():            # same pid reused (a second Cluster in this process)
            if ns in existing:
                self._kill_everything_in(ns)
                _run(["ip", "netns", "delete", ns], check=False)
        _run(["ip", "link", "del", self.client_if], check=False)
        try:
            for ns in self.namespaces():
                _run(["ip", "netns", "add", ns])
                self._made_ns.append(ns)
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            br = self.bridge_ns
            _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0"])
            _run(["ip", "-n", br, "link", "set", "br0", "up"])
            # Hosts: one veth pair each, `port` on the bridge, eth0 in the host's namespace.
            hosts = [("redis", self.redis_ns, REDIS_ADDR)] + \
                    [(f"n{i}", ns, node_addr(i)) for i, ns in self.node_ns.items()]
            for port, ns, addr in hosts:
                _run(["ip", "-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
                _run(["ip", "-n", br, "link", "set", port, "master", "br0", "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{addr}/{PREFIX_LEN}", "dev", "eth0"])
                _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            # The client: this namespace.
            _run(["ip", "link", "add", self.client_if, "type", "veth", "peer", "name", "client", "netns", br])
            self._made_client_link = True
            _run(["ip", "-n", br, "link", "set", "client", "master", "br0", "up"])
            _run(["ip", "addr", "add", f"{CLIENT_ADDR}/{PREFIX_LEN}", "dev", self.client_if])
            _run(["ip", "link", "set", self.client_if, "up"])
        except Exception:
            self.stop()
            raise
        return self

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stops every process, deletes the client's veth and the namespaces. Raises (after
        doing all it can) if something could not be removed."""
        errors: list[str] = []
        for i in sorted(self.procs):
            try:
                self._stop_proc(self.procs[i], term_timeout=5)
            except Exception as e:  # noqa: BLE001 - go on removing the rest
                errors.append(f"stopping n{i}: {e!r}")
        if self.redis_proc is not None:
            try:
                self._stop_proc(self.redis_proc, term_timeout=3)
            except Exception as e:  # noqa: BLE001
                errors.append(f"stopping redis: {e!r}")
        for f in self._logs.values():
            with contextlib.suppress(Exception):
                f.close()
        self._logs.clear()
        if self._made_client_link:
            r = subprocess.run(["ip", "link", "del", self.client_if], capture_output=True, text=True)
            if r.returncode != 0 and "Cannot find device" not in r.stderr:
                errors.append(f"ip link del {self.client_if}: {r.stderr.strip()}")
            self._made_client_link = False
        for ns in reversed(self._made_ns):
            self._kill_everything_in(ns)
            r = subprocess.run(["ip", "netns", "delete", ns], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"ip netns delete {ns}: {r.stderr.strip()}")
        self._made_ns = []
        self._cut.clear()
        if self._redis_dir:
            shutil.rmtree(self._redis_dir, ignore_errors=True)
            self._redis_dir = None
        if errors:
            raise RuntimeError("; ".join(errors))

    def _kill_everything_in(self, ns: str) -> None:
        """SIGKILLs what still runs in a namespace of ours (so deleting it frees it), and waits
        until nothing does."""
        pids = _netns_pids(ns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if pids:
            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: not _netns_pids(ns), 5, f"no process left in {ns}", interval=0.05)

    @staticmethod
    def _stop_proc(proc: subprocess.Popen, term_timeout: float) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(term_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def _log(self, key: Any, name: str, header: str):
        """The log file of a process (artifacts/interop/<name>.log): truncated at its first start
        in this cluster, appended to (with a header line) when it is started again."""
        old = self._logs.pop(key, None)
        if old:
            old.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        mode = "ab" if key in self._started_once else "wb"
        self._started_once.add(key)
        f = open(ARTIFACTS / f"{name}.log", mode)
        f.write(f"==== {time.strftime('%H:%M:%S')} $ {header}\n".encode())
        f.flush()
        self._logs[key] = f
        return f

    # ---- Redis -----------------------------------------------------------------------------------

    @property
    def redis_url(self) -> str:
        return f"redis://{REDIS_ADDR}:{REDIS_PORT}"

    @property
    def redis_log_path(self) -> Path:
        return ARTIFACTS / f"{self.label}-redis.log"

    def start_redis(self, timeout: float = 10.0) -> None:
        """Starts an empty Redis (no persistence) in its namespace; returns when it answers PING
        from this (the client's) namespace."""
        if not os.access(REDIS_SERVER, os.X_OK):
            raise RuntimeError(f"{REDIS_SERVER} is missing: install Debian's redis-server "
                               "(`apt-get install -y redis-server`; stop the service it may start)")
        if self.redis_proc is not None and self.redis_proc.poll() is None:
            raise RuntimeError("redis is already running")
        if self._redis_dir is None:
            self._redis_dir = tempfile.mkdtemp(prefix=f"{self.redis_ns}-")
        cmd = [REDIS_SERVER, "--bind", REDIS_ADDR, "--port", str(REDIS_PORT), "--protected-mode", "no",
               "--save", "", "--appendonly", "no", "--dir", self._redis_dir]
        log = self._log("redis", f"{self.label}-redis", " ".join(cmd))
        self.redis_proc = subprocess.Popen(["ip", "netns", "exec", self.redis_ns, *cmd], stdout=log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc = self.redis_proc

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode} during startup\n"
                                   f"{self.tail(self.redis_log_path)}")
            return redis_pings()
        try:
            wait_until(up, timeout, f"Redis answering PING at {REDIS_ADDR}:{REDIS_PORT}", interval=0.05)
        except WaitTimeout as e:
            raise RuntimeError(f"{e}\n{self.tail(self.redis_log_path)}") from None

    def kill_redis(self, sig: int = signal.SIGKILL) -> None:
        """Sends `sig` to redis-server (default SIGKILL: all its data is gone) and waits for it to
        exit."""
        proc = self.redis_proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        proc.wait(10)

    def redis_alive(self) -> bool:
        return self.redis_proc is not None and self.redis_proc.poll() is None

    # ---- nodes -----------------------------------------------------------------------------------

    def node_url(self, i: int) -> str:
        return f"http://{node_addr(i)}:{NODE_PORT}"

    def ws_url(self, i: int) -> str:
        return f"ws://{node_addr(i)}:{NODE_PORT}/ws"

    def log_path(self, i: int) -> Path:
        return ARTIFACTS / f"{self.label}-n{i}.log"

    def env_for(self, i: int, *, cluster: bool = True) -> dict[str, str]:
        """The MINATO_* variables of node i: listen and media address, the admin secret and
        (with `cluster`) the cluster keys."""
        env = {
            env_name("server.host"): node_addr(i),
            env_name("server.port"): str(NODE_PORT),
            env_name("media.ice.localAddresses"): node_addr(i),
            env_name("admin.apiSecret"): self.admin_secret,
        }
        if cluster:
            env.update({
                env_name(KEY_REDIS_URL): self.redis_url,
                env_name(KEY_NODE_ID): f"n{i}",
                env_name(KEY_ADVERTISE_URL): self.node_url(i),
                env_name(KEY_SECRET): self.cluster_secret,
                env_name(KEY_LEASE_MS): str(LEASE_MS),
            })
        return env

    def start_node(self, i: int, *, cluster: bool = True, timeout: float = 20.0, **env_overrides: Optional[str]) -> None:
        """Starts node i (`minato serve`) in its namespace and returns when /healthz answers 200
        from the client's namespace. `env_overrides`: MINATO_* variables to set (or, with None,
        to leave out), e.g. MINATO_CLUSTER_DRAIN_TIMEOUT_SEC="5". `cluster=False` leaves out
        every cluster key (a plain single node, e.g. for a binary without cluster mode)."""
        if i not in self.node_ns:
            raise ValueError(f"no node {i} in a cluster of {self.n}")
        old = self.procs.get(i)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"n{i} is already running (pid {old.pid})")
        binary = minato_binary()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise RuntimeError(f"Minato server binary not found at {binary}: build it first (`swift build`) "
                               "or set MINATO_BIN")
        env = self.env_for(i, cluster=cluster)
        for k, v in env_overrides.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        self.node_env[i] = env
        cmd = [str(binary), "serve", "--log-level", "debug"]
        shown = "".join(f"{k}={v} " for k, v in sorted(env.items()))
        log = self._log(i, f"{self.label}-n{i}", f"ip netns exec {self.node_ns[i]} {shown}{' '.join(cmd)}")
        base = {k: v for k, v in os.environ.items() if not k.startswith("MINATO_")}
        proc = subprocess.Popen(["ip", "netns", "exec", self.node_ns[i], *cmd], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                env={**base, **env})
        self.procs[i] = proc
        last = ["no attempt"]

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"minato n{i} exited with {proc.returncode} during startup"
                                   f"{self._config_hint(i)}\n{self.tail(self.log_path(i))}")
            r = self._get(i, "/healthz", last)
            return r is not None and r.status == 200
        try:
            wait_until(healthy, timeout, f"n{i} healthy at {self.node_url(i)}/healthz", interval=0.1)
        except WaitTimeout:
            self._stop_proc(proc, term_timeout=3)
            raise RuntimeError(f"minato n{i} not healthy at {self.node_url(i)}/healthz within {timeout}s "
                               f"({last[0]})\n{self.tail(self.log_path(i))}") from None

    def _config_hint(self, i: int) -> str:
        """When the server refused a MINATO_CLUSTER_* variable: which cluster keys it knows."""
        try:
            text = self.log_path(i).read_text(errors="replace")
        except OSError:
            return ""
        m = re.search(r"environment variable (MINATO_\w+) names no configuration key; known: (.*)", text)
        if not m:
            return ""
        known = [k for k in re.split(r",\s*", m.group(2).strip()) if k.startswith("MINATO_CLUSTER_")]
        if not known:
            return (f": this binary has no cluster mode (it refuses {m.group(1)} and knows no MINATO_CLUSTER_* "
                    "variable): build the cluster feature first")
        return f": it refuses {m.group(1)}; the cluster variables it knows are {known} (cluster.py's KEY_* paths)"

    def _get(self, i: int, path: str, last: list[str]) -> Optional[Reply]:
        try:
            r = request("GET", self.node_url(i) + path, timeout=2)
            last[0] = f"{r.status} {r.text.strip()[:200]!r}"
            return r
        except (urllib.error.URLError, OSError) as e:
            last[0] = repr(e)
            return None

    def wait_ready(self, i: int, timeout: float = 20.0) -> None:
        """Polls node i's /readyz until it answers 200 (registered in Redis)."""
        last = ["no attempt"]
        proc = self.procs.get(i)

        def ready() -> bool:
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise RuntimeError(f"n{i} is not running (exit {code})\n{self.tail(self.log_path(i))}")
            r = self._get(i, "/readyz", last)
            return r is not None and r.status == 200
        try:
            wait_until(ready, timeout, f"n{i} ready at {self.node_url(i)}/readyz", interval=0.1)
        except WaitTimeout:
            raise WaitTimeout(f"n{i} not ready at {self.node_url(i)}/readyz within {timeout}s (last: {last[0]})\n"
                              f"{self.tail(self.log_path(i))}") from None

    def kill_node(self, i: int, sig: int = signal.SIGKILL, timeout: float = 10.0) -> Optional[int]:
        """Sends `sig` to node i and waits (up to `timeout` s) for it to exit; returns its exit
        status (None if it is still running then, e.g. draining after SIGTERM)."""
        proc = self.procs.get(i)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def alive(self, i: int) -> bool:
        proc = self.procs.get(i)
        return proc is not None and proc.poll() is None

    def node_pid(self, i: int) -> Optional[int]:
        proc = self.procs.get(i)
        return proc.pid if proc is not None else None

    # ---- admin API -------------------------------------------------------------------------------

    def admin(self, i: int, method: str, path: str, body: Any = None, *,
              bearer: Optional[str] = None, timeout: float = 10) -> tuple[int, dict[str, str], Any]:
        """One admin-API request to node i with the bearer secret; redirects are not followed.
        Returns (status, lower-case headers, parsed JSON body or None)."""
        r = request(method, self.node_url(i) + path, body,
                    bearer=self.admin_secret if bearer is None else bearer, timeout=timeout)
        return r.status, r.headers, r.json

    # ---- faults ----------------------------------------------------------------------------------

    def cut_redis(self, i: int) -> None:
        """No packet passes between node i and Redis, in either direction, silently (as a
        broken link: the node's sockets see timeouts, not errors) while everything else goes on.
        nftables in node i's namespace, on its eth0: the netdev ingress hook drops what comes
        from Redis, the egress hook what goes to it (an output-hook drop would fail the node's
        sends with EPERM, which no real network does; see impair.py)."""
        self.heal_redis(i)
        self._in(self.node_ns[i], nft_binary(), "-f", "-", input=f"""table netdev {CUT_TABLE} {{
    chain from_redis {{
        type filter hook ingress device "eth0" priority 0; policy accept;
        ip saddr {REDIS_ADDR} counter drop comment "from redis"
    }}
    chain to_redis {{
        type filter hook egress device "eth0" priority 0; policy accept;
        ip daddr {REDIS_ADDR} counter drop comment "to redis"
    }}
}}
""")
        self._cut.add(i)

    def heal_redis(self, i: int) -> None:
        """Undoes cut_redis(i) (nothing if it was not cut)."""
        # nft 1.0.6 has no `destroy`: add (no-op if present), then delete.
        self._in(self.node_ns[i], nft_binary(), "-f", "-",
                 input=f"add table netdev {CUT_TABLE}\ndelete table netdev {CUT_TABLE}\n")
        self._cut.discard(i)

    def _netdev_counters(self, i: int, table: str, names: tuple[str, ...]) -> dict[str, int]:
        """The packet counters of the rules commented `names` in node i's netdev `table`."""
        out = {n: 0 for n in names}
        listing = json.loads(self._in(self.node_ns[i], nft_binary(), "-j", "list", "table", "netdev", table))
        for item in listing["nftables"]:
            rule = item.get("rule")
            if rule and rule.get("comment") in out:
                for expr in rule["expr"]:
                    if "counter" in expr:
                        out[rule["comment"]] = expr["counter"]["packets"]
        return out

    def cut_counters(self, i: int) -> dict[str, int]:
        """Packets dropped by cut_redis(i) so far: {"from redis": n, "to redis": n}."""
        if i not in self._cut:
            return {"from redis": 0, "to redis": 0}
        return self._netdev_counters(i, CUT_TABLE, ("from redis", "to redis"))

    def lossy_link(self, i: int, j: int, percent: float) -> None:
        """Random loss of `percent` of the UDP datagrams between nodes i and j (100: all), each way: in each
        node's namespace an ingress rule on eth0 drops that share of what comes from the other
        (comment "loss"; counted). Both eth0s split UDP GSO messages before sending
        (gso_max_segs 1), so one drop loses one datagram, as on a lossy link (impair.py)."""
        per_mille = int(round(percent * 10))
        # numgen's range is 0-999: 100% is a plain drop.
        chance = "" if per_mille >= 1000 else f"numgen random mod 1000 < {per_mille} "
        for a, b in ((i, j), (j, i)):
            self._in(self.node_ns[a], "ip", "link", "set", "eth0", "gso_max_segs", "1")
            self._in(self.node_ns[a], nft_binary(), "-f", "-", input=f"""add table netdev {LOSS_TABLE}
delete table netdev {LOSS_TABLE}
table netdev {LOSS_TABLE} {{
    chain lossy {{
        type filter hook ingress device "eth0" priority 0; policy accept;
        ip saddr {node_addr(b)} meta l4proto udp counter comment "seen"
        ip saddr {node_addr(b)} meta l4proto udp {chance}counter drop comment "dropped"
    }}
}}
""")

    def heal_link(self, i: int, j: int) -> None:
        """Undoes lossy_link(i, j)."""
        for a in (i, j):
            self._in(self.node_ns[a], nft_binary(), "-f", "-",
                     input=f"add table netdev {LOSS_TABLE}\ndelete table netdev {LOSS_TABLE}\n")

    def loss_counters(self, i: int) -> dict[str, int]:
        """What lossy_link's rule in node i's namespace saw and dropped: {"seen": n, "dropped": n}."""
        return self._netdev_counters(i, LOSS_TABLE, ("seen", "dropped"))

    def node_reaches_redis(self, i: int, timeout: float = 2.0) -> bool:
        """Does a PING from node i's namespace get Redis's PONG (within `timeout` s)?"""
        code = ("import socket,sys\n"
                f"s=socket.create_connection(({REDIS_ADDR!r},{REDIS_PORT}),{timeout})\n"
                "s.settimeout(%r)\n" % timeout +
                "s.sendall(b'PING\\r\\n')\n"
                "sys.exit(0 if s.recv(64).startswith(b'+PONG') else 1)\n")
        r = subprocess.run(["ip", "netns", "exec", self.node_ns[i], sys.executable, "-c", code],
                           capture_output=True, text=True, timeout=timeout + 10)
        return r.returncode == 0

    # ---- diagnostics -----------------------------------------------------------------------------

    @staticmethod
    def tail(path: Path, lines: int = 60) -> str:
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {path})"
        shown = [t if len(t) <= 600 else t[:600] + f" … ({len(t) - 600} more characters)" for t in text[-lines:]]
        return f"---- {path} (last {len(shown)} lines)\n" + "\n".join(shown)

    def describe(self, lines: int = 40) -> str:
        """Each process's state and its log's tail, for failure reports."""
        parts = [f"redis: {'running' if self.redis_alive() else 'not running'}"]
        for i in sorted(self.node_ns):
            proc = self.procs.get(i)
            state = "never started" if proc is None else ("running" if proc.poll() is None else f"exited {proc.returncode}")
            parts.append(f"n{i} ({node_addr(i)}): {state}{', cut from redis' if i in self._cut else ''}")
        for i in sorted(self.procs):
            parts.append(self.tail(self.log_path(i), lines))
        return "\n".join(parts)


# ---- one running cluster per test module ----------------------------------------------------------

@contextlib.contextmanager
def running_cluster(n: int = 3, *, label: str = "cluster", aioice: bool = True, **node_env: Optional[str]):
    """Redis and nodes 1..n, each ready (/readyz), for a module's fixture; `node_env` are MINATO_*
    variables for every node (see `start_node`), `label` names the logs. With `aioice`, aiortc
    peers of this process gather on the client's address only. A cluster that does not come up
    raises RuntimeError saying why (pytest shows it as the module's error); everything is removed
    on exit."""
    c = Cluster(n, label=label)
    c.start()
    try:
        with aioice_addresses([CLIENT_ADDR]) if aioice else contextlib.nullcontext():
            try:
                c.start_redis()
                for i in range(1, n + 1):
                    c.start_node(i, **node_env)
                for i in range(1, n + 1):
                    c.wait_ready(i)
            except WaitTimeout as e:
                raise RuntimeError(f"the cluster did not start: {e}\n{c.describe()}") from None
            yield c
    finally:
        c.stop()
