#!/usr/bin/env python3
"""Rooms across nodes (make bench-cluster, after bench/cluster.py): a 1 -> N broadcast spread
over three nodes, once with `cluster.cascade` off and once on. Redis and three Minato nodes in
namespaces of their own (Tests/interop/cluster.py); the load is `minato-bench cascade` (Swift
client SDK) in this process's namespace: one synthetic video publisher (500 kbit/s, 1200-byte
packets) joined through n1, where the room is made, and --subscribers-per-node subscribers
joined through each node (3 probes per node read every packet; the others are muted by a
socket filter once they received, so the generator's CPU stays small).

Over a --window s window, per node: CPU (utime + stime of its process), bytes its eth0 sent
(its egress), RTP packets it forwarded (`minato_rtp_packets_forwarded_total`) and received;
CPU per forwarded packet; the probes' loss and latency (publisher send -> subscriber receipt,
p50/p99). Before that, per node 5 subscriptions again on a connection that is up: subscribe -> first
packet (a consumer starts at a keyframe, so this is the keyframe latency; through a relay the
request crosses it). From the
cascade run's n1 metrics: the relay setup time.

Must run in a fresh loopback-only network namespace:
  unshare -n sh -c 'ip link set lo up; exec .venv-interop/bin/python bench/cascade.py [--quick]'
Server: $MINATO_BIN, else .build/release/minato if present, else .build/debug/minato; the
generator: .build/release/minato-bench if present, else .build/debug/minato-bench.
Writes bench/results/cascade.{json,md}; logs in artifacts/bench/cascade/.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "interop"))
LOG_DIR = REPO / "artifacts" / "bench" / "cascade"

_spec = importlib.util.spec_from_file_location("bench_cluster", REPO / "bench" / "cluster.py")
bench_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_cluster)  # type: ignore[union-attr]

NODES = (1, 2, 3)
NODE_ENV = {
    "MINATO_LOG_LEVEL": "info",
    "MINATO_MEDIA_MAX_TRANSPORTS": "5000",
    "MINATO_ROOMS_MAX_MEMBERS_PER_ROOM": "2000",
    "MINATO_ROOMS_MAX_SUBSCRIBERS_CAP": "1999",
    "MINATO_ROOMS_DEFAULT_MAX_SUBSCRIBERS": "1999",
    "MINATO_ROOMS_MAX_MEMBERS_PER_CONNECTION": "10000",
    "MINATO_SERVER_MAX_IN_FLIGHT_REQUESTS": "1024",
    "MINATO_SERVER_MAX_CONNECTIONS_PER_ADDRESS": "10000",
}

DEFINITIONS = """\
- **egress**: bytes the node's network interface sent during the window (its veth `tx_bytes`:
  RTP to subscribers and relays, RTCP, signaling), as Mbit/s.
- **egress bytes per packet received**: that egress over the RTP packets the node received
  in the same window (for n1 the publisher's): compares the runs even if the publisher's rate
  differed between them.
- **media threads CPU**: the same for the node's media worker threads only; the rest is
  signaling (the other nodes relay their members' requests to n1), the lease and metrics.
- **CPU**: the node process's utime + stime over the window, in % of one core; **µs per
  forwarded packet**: that CPU time over the RTP packets it forwarded
  (`minato_rtp_packets_forwarded_total`: to its subscribers, and with cascade to relays). A
  relay's receiving node decrypts the stream once and forwards it to its subscribers; its
  sending node forwards it once per relay.
- **loss, latency**: from the probes (3 per node): packets not received of those the
  publisher sent; latency from the publisher's send stamp to the probe's receipt (one process,
  one clock), p50/p99 of every 10th packet. A hop adds the difference to n1's.
- **keyframe**: once every subscriber receives (before the muting: a client that sees no media
  asks for keyframes), one member per node, its receiving connection up, unsubscribes and
  subscribes again 5 times, 700 ms apart (keyframe requests to one publication are at most one
  per 500 ms): from `subscribe` to the first packet, which the server sends only from a keyframe
  on (a new subscription asks the publisher for one; through a relay the request crosses it,
  and the relayed stream is already there).
- **relay setup**: `minato_cluster_relay_setup_seconds` on n1 (both transports made over the
  node link and given each other's parameters; ICE and DTLS then connect on their own).
- Everything (Redis, three nodes, the generator) shares this machine's CPUs.
"""


def node_counters(c: Any, i: int) -> dict[str, float]:
    from cluster import request
    r = request("GET", c.node_url(i) + "/metrics", bearer=c.admin_secret)
    out: dict[str, float] = {}
    for line in r.text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def media_cpu_seconds(pid: int) -> float:
    """CPU of the process's media worker threads (named minato-media-*) only: the rest of a
    node's CPU is signaling (a node through which clients reach a room elsewhere relays their
    requests), the lease, metrics."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        if comm.startswith("minato-media"):
            fields = text.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def tx_bytes(c: Any, i: int) -> int:
    return int(subprocess.run(["ip", "netns", "exec", c.node_ns[i], "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                              capture_output=True, text=True, check=True).stdout.strip())


def sample(c: Any) -> dict:
    return {i: {"cpu": cpu_seconds(c.node_pid(i)), "media": media_cpu_seconds(c.node_pid(i)), "tx": tx_bytes(c, i),
                "m": node_counters(c, i), "t": time.monotonic()}
            for i in NODES}


def run_mode(cascade: bool, args: Any, bench_bin: Path, log: Any) -> dict:
    from cluster import CLIENT_ADDR, Cluster
    label = "cascade-on" if cascade else "cascade-off"
    c = Cluster(len(NODES), label=label)
    c.start()
    try:
        c.start_redis()
        for i in NODES:
            c.start_node(i, MINATO_CLUSTER_CASCADE="true" if cascade else "false", **NODE_ENV)
        for i in NODES:
            c.wait_ready(i)
        out_file = LOG_DIR / f"{label}.json"
        cmd = [str(bench_bin), "cascade", *[a for i in NODES for a in ("--url", c.ws_url(i))],
               "--ice-address", CLIENT_ADDR, "--subscribers-per-node", str(args.subscribers_per_node),
               "--window", str(args.window), "--out", str(out_file)]
        log(f"{label}: {' '.join(cmd[1:])}")
        with open(LOG_DIR / f"{label}-generator.log", "w") as err:
            gen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO)
            assert gen.stdout is not None
            line = gen.stdout.readline()
            if '"ready"' not in line:
                gen.wait(30)
                raise RuntimeError(f"{label}: the generator did not get ready: {line!r} "
                                   f"(see {LOG_DIR / (label + '-generator.log')})")
            before = sample(c)
            line = gen.stdout.readline()
            after = sample(c)
            if '"measured"' not in line:
                raise RuntimeError(f"{label}: the generator stopped in its window: {line!r}")
            if gen.wait(300) != 0:
                raise RuntimeError(f"{label}: the generator failed (exit {gen.returncode})")
        result = json.loads(out_file.read_text())
        nodes = {}
        for i in NODES:
            a, b = before[i], after[i]
            secs = b["t"] - a["t"]
            fw = b["m"].get("minato_rtp_packets_forwarded_total", 0) - a["m"].get("minato_rtp_packets_forwarded_total", 0)
            rx = b["m"].get("minato_rtp_packets_received_total", 0) - a["m"].get("minato_rtp_packets_received_total", 0)
            cpu = b["cpu"] - a["cpu"]
            wake = b["m"].get("minato_worker_agent_timer_wakeups_total", 0) - a["m"].get("minato_worker_agent_timer_wakeups_total", 0)
            probe = result["nodes"][i - 1]
            nodes[f"n{i}"] = {
                "egressMbps": round((b["tx"] - a["tx"]) * 8 / secs / 1e6, 2),
                "cpuPercent": round(cpu / secs * 100, 1),
                "forwardedPps": round(fw / secs), "receivedPps": round(rx / secs),
                "usPerForwardedPacket": round(cpu / fw * 1e6, 2) if fw else None,
                "mediaCpuPercent": round((b["media"] - a["media"]) / secs * 100, 1),
                "mediaUsPerForwardedPacket": round((b["media"] - a["media"]) / fw * 1e6, 2) if fw else None,
                # Per packet the node received (the publisher's, or the relayed stream's): the
                # window's rates compare across runs even if a run's publisher was slower.
                "egressBytesPerReceivedPacket": round((b["tx"] - a["tx"]) / rx) if rx else None,
                "agentTimerWakeupsPerSec": round(wake / secs, 1),
                "transportsDirect": b["m"].get("minato_transports_direct"),
                "transports": b["m"].get("minato_transports"),
                # Node-link and gateway counters over the window (what the signaling did).
                "clusterCounters": {k: round(v - a["m"].get(k, 0), 3) for k, v in b["m"].items()
                                    if k.startswith("minato_cluster") and v != a["m"].get(k, 0)},
                "lossPercent": probe["lossPercent"], "latencyP50Ms": probe["latencyP50Ms"],
                "latencyP99Ms": probe["latencyP99Ms"], "keyFrameMs": probe["keyFrameMs"],
            }
        setup = None
        m = after[1]["m"]
        count = m.get("minato_cluster_relay_setup_seconds_count")
        total = m.get("minato_cluster_relay_setup_seconds_sum")
        if count:
            setup = {"relays": int(count), "meanMs": round(total / count * 1000, 1)}
        return {"cascade": cascade, "publisherPps": result["publisherPacketsPerSec"], "windowSec": result["windowSec"],
                "setupSec": result["setupSec"], "nodes": nodes, "relaySetup": setup}
    except BaseException:
        print(c.describe(), file=sys.stderr)
        raise
    finally:
        c.stop()


def markdown(out: dict) -> str:
    meta = out["meta"]
    lines = [f"# Rooms across nodes: a 1 -> {3 * meta['subscribersPerNode']} broadcast over three nodes ({meta['date']})", "",
             f"Redis + 3 Minato nodes in network namespaces on one bridge; `minato-bench cascade` in a fourth. "
             f"Server `{meta['binary']}` ({meta['build']} build); machine: {meta['nproc']} CPUs ({meta['cpu']}); "
             f"commit {meta['commit']}. One publisher (500 kbit/s video) joined through n1, where the room is; "
             f"{meta['subscribersPerNode']} subscribers joined through each node; window {meta['window']} s.", ""]
    for run in out["runs"]:
        lines += [f"## cluster.cascade: {'true' if run['cascade'] else 'false'}", "",
                  f"Publisher: {run['publisherPps']} packets/s; setting up {run['setupSec']} s.", "",
                  "| node | egress Mbit/s | egress bytes per packet received | CPU % | media threads CPU % | "
                  "forwarded pkt/s | received pkt/s | µs/forwarded pkt | media µs/forwarded pkt | loss % | "
                  "latency p50 ms | p99 ms | keyframe ms (5 subscriptions) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, n in run["nodes"].items():
            lines.append(f"| {name} | {n['egressMbps']} | {n['egressBytesPerReceivedPacket']} | {n['cpuPercent']} | "
                         f"{n['mediaCpuPercent']} | {n['forwardedPps']} | {n['receivedPps']} | "
                         f"{n['usPerForwardedPacket']} | {n['mediaUsPerForwardedPacket']} | {n['lossPercent']} | "
                         f"{n['latencyP50Ms']} | {n['latencyP99Ms']} | "
                         f"{', '.join(str(x) for x in n['keyFrameMs'])} |")
        if run.get("relaySetup"):
            lines += ["", f"Relay setup on n1: {run['relaySetup']['relays']} relays, mean {run['relaySetup']['meanMs']} ms."]
        lines.append("")
    off = next((r for r in out["runs"] if not r["cascade"]), None)
    on = next((r for r in out["runs"] if r["cascade"]), None)
    if off and on:
        a, b = off["nodes"]["n1"]["egressMbps"], on["nodes"]["n1"]["egressMbps"]
        pa, pb = off["nodes"]["n1"]["egressBytesPerReceivedPacket"], on["nodes"]["n1"]["egressBytesPerReceivedPacket"]
        lines += ["## The publisher's node", "",
                  f"n1's egress: **{a} Mbit/s** without cascade, **{b} Mbit/s** with it; per packet the "
                  f"publisher sent, {pa} bytes against {pb} (**{pa / pb:.2f}x less**; 300 subscriber streams "
                  f"against 100 and two relays would be {300 / 102:.2f}x)." if pb else
                  f"n1's egress: {a} Mbit/s without cascade, {b} with it.", ""]
    lines += ["## Definitions", "", out["definitions"]]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers-per-node", type=int, default=100)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="10 subscribers per node, 5 s window (checks the script)")
    ap.add_argument("--minato-bin", default=None)
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    if args.quick:
        args.subscribers_per_node, args.window = 10, 5.0
    if not bench_cluster.in_loopback_namespace():
        sys.exit("bench/cascade.py: not in a loopback-only network namespace; use `make bench-cluster`")
    binary, source = bench_cluster.resolve_binary(args.minato_bin)
    os.environ["MINATO_BIN"] = str(binary)
    bench_bin = binary.parent / "minato-bench"
    if not (bench_bin.is_file() and os.access(bench_bin, os.X_OK)):
        sys.exit(f"bench/cascade.py: no minato-bench beside {binary}: build it")
    import cluster as harness
    harness.ARTIFACTS = LOG_DIR
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    t_begin = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t_begin:6.1f}s] {msg}", flush=True)

    shown = str(binary.relative_to(REPO)) if binary.is_relative_to(REPO) else str(binary)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "binary": shown,
            "build": bench_cluster.build_kind(binary), "subscribersPerNode": args.subscribers_per_node,
            "window": args.window, "quick": args.quick, "commit": bench_cluster.git_commit(), **bench_cluster.machine()}
    out: dict = {"meta": meta, "definitions": DEFINITIONS, "runs": []}
    for cascade in (False, True):
        run = run_mode(cascade, args, bench_bin, log)
        out["runs"].append(run)
        log(f"cascade={cascade}: " + "; ".join(f"{k}: egress {v['egressMbps']} Mbit/s, CPU {v['cpuPercent']}%, "
                                                 f"{v['usPerForwardedPacket']} µs/pkt, loss {v['lossPercent']}%, "
                                                 f"p50 {v['latencyP50Ms']} p99 {v['latencyP99Ms']} ms, "
                                                 f"keyframe {v['keyFrameMs']} ms" for k, v in run["nodes"].items()))
    dest = Path(args.out_dir)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "cascade.json").write_text(json.dumps(out, indent=1) + "\n")
    (dest / "cascade.md").write_text(markdown(out) + "\n")
    log(f"wrote {dest / 'cascade.json'} and {dest / 'cascade.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
