"""A second "host" for interop tests: a network namespace joined to the test's own by a veth pair
(README.md "The two commands"), with an nftables policer on its input.

    with Lab() as lab:                      # minato-sub-<pid>, 198.18.0.1/30 here, 198.18.0.2/30 there
        server listens on lab.host_addr     # (HTTP/WS and media: the far side reaches nothing else)
        lab.chromium_wrapper()              # an executable that runs Chromium inside the namespace
        lab.police(37)                      # drop UDP arriving there above 37 kB/s (~300 kbit/s)
        lab.policer_counters()              # {"seen": {...}, "dropped": {...}} packets and bytes
        lab.unpolice()
        lab.readdress("198.18.1.2")         # the far side's address replaced (a handover)

Only addresses of 198.18.0.0/15 (set aside for benchmarking networks), one connected /30, no
routes anywhere else. The namespace's side of the veth is the only way in or out of it, so a
policer on its input hook shapes exactly what the subscriber there receives, as a policing ISP
link would: the excess is dropped at once (no queue; there is no netem or tbf on these kernels).
The test's side sends with `gso_max_segs 1`, so the kernel splits the server's UDP GSO runs into
single datagrams before they cross (the policer then meters and drops datagrams, not bursts).

Several hosts at once: every Lab of one process gets a name of its own (minato-sub-<pid>, then
minato-sub-<pid>x1, x2, …), so a test may hold two or more, each a /30 of its own. With
`routed=True` the far side's default route points at the test's namespace, which forwards
between its veths while such a Lab is up: the test's namespace is then the router of a small
star of hosts (test_turn.py: the server here, coturn on one Lab, a client on another).

    with Lab(host_addr="198.18.0.1", peer_addr="198.18.0.2", routed=True) as turn, \
         Lab(host_addr="198.18.0.5", peer_addr="198.18.0.6", routed=True) as client:
        turn.popen(["turnserver", ...])     # a process on that host
        client.nft_load("block", RULES)     # an nftables table of the host's own; nft_counters()

Everything is removed on exit, also when the body raises: the table goes with the namespace,
the veth pair is deleted from this side, the namespace is deleted, the wrapper's folder removed,
forwarding is put back as it was when the last routed Lab stops. Namespaces left by a killed
run (minato-sub-<pid>[x<n>] of a pid that no longer exists) are deleted at start. Needs root
(scripts/interop.sh runs the suite as root inside `unshare -n`).
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

from impair import nft_binary, rule_counters

PREFIX = "minato-sub-"
TABLE = "lab"
# The n-th Lab made by this process is tagged "<pid>" (n = 0) or "<pid>x<n>".
_SERIAL = itertools.count()
# Routed Labs up now, and the test namespace's net.ipv4.ip_forward before the first of them.
_routed_up = 0
_forward_before: Optional[str] = None


def _run(cmd: list[str], *, input: Optional[str] = None, check: bool = True) -> str:
    r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=15)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}\n{input or ''}")
    return r.stdout


def _netns_names() -> list[str]:
    out = _run(["ip", "-j", "netns", "list"], check=False).strip()
    try:
        return [x["name"] for x in json.loads(out or "[]")]
    except ValueError:
        return [line.split()[0] for line in out.splitlines() if line.strip()]


def delete_stale() -> list[str]:
    """Deletes minato-sub-<pid> namespaces whose pid is gone (left by a killed run)."""
    gone = []
    for name in _netns_names():
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("x", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _run(["ip", "netns", "delete", name], check=False)
            gone.append(name)
    return gone


class Lab:
    """The test's namespace (host side, `host_addr`) and a second one (`name`, `peer_addr`)."""

    def __init__(self, *, host_addr: str = "198.18.0.1", peer_addr: str = "198.18.0.2", prefix_len: int = 30,
                 tag: Optional[str] = None, routed: bool = False) -> None:
        for a in (host_addr, peer_addr):
            first, second = (int(x) for x in a.split(".")[:2])
            if not (first == 198 and second in (18, 19)):
                raise ValueError(f"{a} is not in 198.18.0.0/15")
        if tag is None:
            n = next(_SERIAL)
            tag = str(os.getpid()) + (f"x{n}" if n else "")
        self.name = PREFIX + tag
        self.host_if = f"mnb{tag}s"
        self.peer_if = f"mnb{tag}c"
        if len(self.host_if) > 15:
            raise ValueError(f"tag {tag!r} makes interface names longer than 15 characters")
        self.host_addr, self.peer_addr, self.prefix_len = host_addr, peer_addr, prefix_len
        self.routed = routed
        self.policed_rate: Optional[int] = None
        self._tmp: Optional[str] = None
        self._made_ns = self._made_link = False
        self._counted_route = False
        self._procs: list[subprocess.Popen] = []

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "Lab":
        delete_stale()
        if self.name in _netns_names():          # same pid reused: ours from an earlier run
            _run(["ip", "netns", "delete", self.name], check=False)
        try:
            _run(["ip", "netns", "add", self.name])
            self._made_ns = True
            _run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if,
                  "netns", self.name])
            self._made_link = True
            _run(["ip", "addr", "add", f"{self.host_addr}/{self.prefix_len}", "dev", self.host_if])
            _run(["ip", "link", "set", self.host_if, "gso_max_segs", "1", "up"])
            self.exec("ip", "link", "set", "lo", "up")
            self.exec("ip", "addr", "add", f"{self.peer_addr}/{self.prefix_len}", "dev", self.peer_if)
            self.exec("ip", "link", "set", self.peer_if, "gso_max_segs", "1", "up")
            if self.routed:
                self.exec("ip", "route", "add", "default", "via", self.host_addr)
                self._route_up()
        except Exception:
            self.stop()
            raise
        return self

    def _route_up(self) -> None:
        """The test's namespace forwards between its veths while a routed Lab is up."""
        global _routed_up, _forward_before
        if _routed_up == 0:
            _forward_before = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
            _run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        _routed_up += 1
        self._counted_route = True

    def _route_down(self) -> None:
        global _routed_up
        if not self._counted_route:
            return
        self._counted_route = False
        _routed_up -= 1
        if _routed_up == 0 and _forward_before is not None:
            _run(["sysctl", "-q", "-w", f"net.ipv4.ip_forward={_forward_before}"], check=False)

    def stop(self) -> None:
        errors = []
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._procs = []
        self._route_down()
        if self._made_link:
            # Deleting one end deletes the pair (the namespace's end may already be gone with it).
            r = subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, text=True)
            if r.returncode != 0 and "Cannot find device" not in r.stderr:
                errors.append(f"ip link del {self.host_if}: {r.stderr.strip()}")
            self._made_link = False
        if self._made_ns:
            r = subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"ip netns delete {self.name}: {r.stderr.strip()}")
            self._made_ns = False
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        if errors:
            raise RuntimeError("; ".join(errors))

    def __enter__(self) -> "Lab":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- running things inside ---------------------------------------------------------------

    def prefix(self) -> list[str]:
        """The command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def exec(self, *cmd: str, input: Optional[str] = None) -> str:
        return _run(self.prefix() + list(cmd), input=input)

    def popen(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen:
        """Starts `cmd` inside the namespace (subprocess.Popen's keyword arguments); stop()
        terminates it if it still runs then."""
        proc = subprocess.Popen(self.prefix() + list(cmd), **kwargs)
        self._procs.append(proc)
        return proc

    # ---- nftables tables of the far side's own (blocking, counting) ------------------------------

    def nft_load(self, table: str, body: str) -> None:
        """Replaces the far side's `inet <table>` with `body` (its chains and rules, nft syntax)."""
        self.nft_delete(table)
        self.exec(nft_binary(), "-f", "-", input=f"table inet {table} {{\n{body}\n}}\n")

    def nft_delete(self, table: str) -> None:
        self.exec(nft_binary(), "-f", "-", input=f"add table inet {table}\ndelete table inet {table}\n")

    def nft_counters(self, table: str, names: tuple[str, ...]) -> dict[str, dict[str, int]]:
        """{name: {"packets", "bytes"}} of the counted rules of `inet <table>` commented `names`."""
        return rule_counters(self.exec(nft_binary(), "-j", "list", "table", "inet", table), names)

    def chromium_wrapper(self, chromium: str = "/usr/bin/chromium") -> Path:
        """An executable for Playwright's `executable_path`: `exec ip netns exec NAME chromium "$@"`
        (`ip netns exec` execs in place, so the pid and Playwright's pipes are Chromium's)."""
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=f"{self.name}-")
        path = Path(self._tmp) / "chromium-in-netns"
        path.write_text(f"#!/bin/sh\nexec ip netns exec {self.name} {chromium} \"$@\"\n")
        path.chmod(0o755)
        return path

    def readdress(self, new_addr: str) -> str:
        """Gives the namespace's side a new address, as a handover (Wi-Fi to cellular, a new DHCP
        lease) gives a client: the current one is removed first (its sockets are dead from then
        on), then `new_addr`/32 is added (in 198.18.0.0/15) with a route to `host_addr` from it, and
        the host side gets a route back. Returns the old address; `peer_addr` is the new one."""
        first, second = (int(x) for x in new_addr.split(".")[:2])
        if not (first == 198 and second in (18, 19)):
            raise ValueError(f"{new_addr} is not in 198.18.0.0/15")
        old = self.peer_addr
        old_len = getattr(self, "_peer_len", self.prefix_len)
        self.exec("ip", "addr", "del", f"{old}/{old_len}", "dev", self.peer_if)
        self.exec("ip", "addr", "add", f"{new_addr}/32", "dev", self.peer_if)
        self.exec("ip", "route", "replace", f"{self.host_addr}/32", "dev", self.peer_if, "src", new_addr)
        if old_len == 32:
            _run(["ip", "route", "del", f"{old}/32", "dev", self.host_if], check=False)
        _run(["ip", "route", "replace", f"{new_addr}/32", "dev", self.host_if])
        self.peer_addr, self._peer_len = new_addr, 32
        return old

    # ---- the policer ---------------------------------------------------------------------------

    def police(self, kbytes_per_sec: int, match: str = "meta l4proto udp") -> None:
        """Drops what arrives in the namespace (`match`, default every UDP datagram) above
        `kbytes_per_sec` kB/s (nft `limit rate over`; its bucket holds about one second's worth).
        Two counted rules: "seen" (all matching) and "dropped"."""
        self.unpolice()
        self.exec(nft_binary(), "-f", "-", input=f"""table inet {TABLE} {{
    chain in {{
        type filter hook input priority 0; policy accept;
        {match} counter comment "seen"
        {match} limit rate over {int(kbytes_per_sec)} kbytes/second counter drop comment "dropped"
    }}
}}
""")
        self.policed_rate = int(kbytes_per_sec)

    def unpolice(self) -> None:
        # nft 1.0.6 has no `destroy`: add (no-op if present), then delete.
        self.exec(nft_binary(), "-f", "-", input=f"add table inet {TABLE}\ndelete table inet {TABLE}\n")
        self.policed_rate = None

    def policer_counters(self) -> dict[str, dict[str, int]]:
        """{"seen": {"packets", "bytes"}, "dropped": {...}} since police(); zeros if not policing."""
        if self.policed_rate is None:
            return rule_counters('{"nftables": []}')
        return rule_counters(self.exec(nft_binary(), "-j", "list", "table", "inet", TABLE))
