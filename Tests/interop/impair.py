"""Impairs UDP inside the current network namespace with nftables (there is no netem here).

One table of our own (`minato_impair`) with one chain on the *input* hook. On loopback every
packet is sent and received in the same namespace, so one chain sees every UDP datagram once
and one rule impairs both legs of a call (publisher -> server and server -> subscriber).
Two rules, both with counters:
  1. "seen":    the datagrams the impairment applies to (all UDP, or one port's),
  2. "dropped": `numgen random mod 1000 < N drop` on the same datagrams (N per mille).
Match a port to impair one leg only: `sport=` the publisher's own port drops what it sends
(publisher -> server), `dport=` the subscriber's own port drops what it receives
(server -> subscriber). The client ports are in the clients' SDP (`candidate_port` in
loss_pair.py), so this works whatever ports the server uses.

Why input and not output (README.md "The two commands"): a drop in the output hook (a) makes the
sender's sendmsg/sendmmsg fail with EPERM, which no real network does (a sendmmsg batch then
stops at the dropped packet), and (b) sees a UDP GSO message (the server sends runs of
equal-size packets as one) as one packet, so a "2%" drop loses a burst. Dropping on input after
`ip link set lo gso_max_segs 1` (the kernel then splits GSO messages before delivery) drops
single datagrams silently, like a lossy link. `hook="output"` keeps the old behaviour.

    with UdpLoss(2.0) as loss:        # 2% of every UDP datagram
        ...
        print(loss.counters())        # {"seen": 9200, "dropped": 181}

The table is deleted (and lo's gso_max_segs restored) on exit, also when the body raises. Run
as root in a loopback-only namespace (scripts/interop.sh, bench/loss.sh); `nft` comes from
scripts/interop-setup.sh.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from typing import Optional

TABLE = "minato_impair"


def nft_binary() -> str:
    path = shutil.which("nft") or "/usr/sbin/nft"
    if not os.access(path, os.X_OK):
        raise RuntimeError("nft (Debian package nftables) is missing: run scripts/interop-setup.sh")
    return path


def nft(*args: str, script: Optional[str] = None) -> str:
    """Runs `nft ARGS` (or `nft -f -` with `script` on stdin); raises with nft's message on failure."""
    cmd = [nft_binary(), *(args or ("-f", "-"))]
    r = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}\n{script or ''}")
    return r.stdout


def lo_gso_max_segs(value: Optional[int] = None) -> int:
    """lo's gso_max_segs (the previous value); sets it when `value` is given."""
    r = subprocess.run(["ip", "-d", "-j", "link", "show", "lo"], capture_output=True, text=True, check=True)
    old = int(json.loads(r.stdout)[0].get("gso_max_segs", 65535))
    if value is not None and value != old:
        subprocess.run(["ip", "link", "set", "lo", "gso_max_segs", str(value)], check=True, capture_output=True)
    return old


def delete_table(table: str = TABLE) -> None:
    """Deletes the table if it exists (nft 1.0.6 has no `destroy`: add it first, then delete)."""
    nft(script=f"add table inet {table}\ndelete table inet {table}\n")


def rule_counters(listing: str, names: tuple[str, ...] = ("seen", "dropped")) -> dict[str, dict[str, int]]:
    """The counters of the rules commented `names` in an `nft -j list table …` listing:
    {name: {"packets", "bytes"}}, zeros for a rule that is not there."""
    out = {name: {"packets": 0, "bytes": 0} for name in names}
    for item in json.loads(listing)["nftables"]:
        rule = item.get("rule")
        if rule and rule.get("comment") in out:
            for expr in rule["expr"]:
                if "counter" in expr:
                    out[rule["comment"]] = {"packets": expr["counter"]["packets"], "bytes": expr["counter"]["bytes"]}
    return out


class UdpLoss:
    """Random loss of `percent` % (0.1% steps) of UDP packets sent in this namespace: all of
    them, or only those from `sport` and/or to `dport`. A context manager; `counters()` reads
    how many datagrams matched and how many were dropped so far."""

    def __init__(self, percent: float, *, sport: Optional[int] = None, dport: Optional[int] = None,
                 ssrc: Optional[int] = None, hook: str = "input", table: str = TABLE) -> None:
        if not 0 <= percent <= 100:
            raise ValueError(f"loss {percent}% is not within 0..100")
        self.percent = percent
        self.permille = round(percent * 10)
        self.sport, self.dport = sport, dport
        self.table = table
        if hook not in ("input", "output"):
            raise ValueError(f"hook {hook!r}: input or output")
        self.hook = hook
        self._gso_max_segs: Optional[int] = None
        match = "meta l4proto udp"
        if sport is not None:
            match += f" udp sport {int(sport)}"
        if dport is not None:
            match += f" udp dport {int(dport)}"
        self.ssrc = ssrc
        if ssrc is not None:
            # The RTP header's SSRC (bytes 8..11 after the 8-byte UDP header; SRTP leaves the
            # header in the clear): one RTP stream only, not its RTX, RTCP, STUN or DTLS (whose
            # bytes there are encrypted or random: a false match is a 2^-32 chance).
            match += f" @th,128,32 {int(ssrc):#010x}"
        self.match = match

    def describe(self) -> str:
        where = "every UDP packet"
        if self.sport is not None or self.dport is not None:
            where = " ".join(f"{k} {v}" for k, v in (("from port", self.sport), ("to port", self.dport)) if v is not None)
        if self.ssrc is not None:
            where = f"RTP of SSRC {self.ssrc:#010x} " + (where if where != "every UDP packet" else "")
        return f"{self.percent:g}% of {where.strip()}"

    def start(self) -> "UdpLoss":
        delete_table(self.table)          # a table left behind by a killed run
        if self.hook == "input":          # one datagram per GSO segment from here on
            self._gso_max_segs = lo_gso_max_segs(1)
        nft(script=f"""table inet {self.table} {{
    chain impair {{
        type filter hook {self.hook} priority 0; policy accept;
        {self.match} counter comment "seen"
        {self.match} numgen random mod 1000 < {self.permille} counter drop comment "dropped"
    }}
}}
""")
        return self

    def stop(self) -> None:
        try:
            delete_table(self.table)
        finally:
            if self._gso_max_segs is not None:
                lo_gso_max_segs(self._gso_max_segs)
                self._gso_max_segs = None

    def counters(self) -> dict[str, int]:
        """{"seen": packets matched, "dropped": packets dropped} since start()."""
        counted = rule_counters(nft("-j", "list", "table", "inet", self.table))
        return {name: c["packets"] for name, c in counted.items()}

    def check(self, counters: Optional[dict[str, int]] = None) -> str:
        """Proof that the rule did what it was asked: '' when it dropped something and a share of
        what it saw near `percent` (drop_rate_problem), else what is wrong."""
        return drop_rate_problem(counters if counters is not None else self.counters(), self.permille / 1000)

    def __enter__(self) -> "UdpLoss":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def drop_rate_problem(counters: dict[str, int], p: float, sigmas: float = 5.0) -> str:
    """'' when nft's counters are what random loss of share `p` gives, else the problem.

    Each datagram the rule sees is dropped independently with probability p (`numgen random
    mod 1000 < N`), so dropped ~ Binomial(seen, p): within `sigmas` standard deviations of
    seen x p (5 sigma: a false alarm about once in 1.7 million runs), plus one datagram for
    rounding. Also fails when nothing was seen or nothing dropped (a rule that matches nothing
    would make a loss test pass without loss)."""
    seen, dropped = int(counters.get("seen", 0)), int(counters.get("dropped", 0))
    if seen <= 0:
        return f"the nft rule saw no datagrams ({counters}): is it matching?"
    if p > 0 and dropped <= 0:
        return f"the nft rule dropped nothing of {seen} datagrams seen"
    mean, sd = seen * p, math.sqrt(seen * p * (1 - p))
    if abs(dropped - mean) > sigmas * sd + 1:
        return (f"the nft rule dropped {dropped} of {seen} datagrams ({100 * dropped / seen:.2f}%), outside "
                f"{mean - sigmas * sd:.0f}..{mean + sigmas * sd:.0f} ({sigmas:g} sigma of {100 * p:g}%)")
    return ""
