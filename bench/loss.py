#!/usr/bin/env python3
"""The loss benchmark (make bench-loss, bench/loss.sh): one aiortc publisher -> SFU -> one aiortc
subscriber, VP8 320x240 30 fps with the frame index in the picture (Tests/interop/loss_pair.py),
random loss of every UDP datagram (both legs; nftables, Tests/interop/impair.py) at each level
for one window, through Minato and through Janus 1.1.2.

  loss.py run --server minato|janus --out RAW.json [--levels 0,1,2,5] [--window 15]
              [--link-rtt-ms 10] [--minato-bin BIN] [--log-dir DIR]   # in a loopback-only namespace
  loss.py report RAW.json... [--out-dir bench/results]   # -> loss.json, loss.md, loss.png
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "interop"))

DEFINITIONS = """\
- **Each level**: a fresh publisher and subscriber (new room), 3 s of clean video, then the loss
  for the window; frames still in flight get 2 s to arrive. The subscriber's receiver reports
  claim a round trip of `--link-rtt-ms` (default 10 ms; DLSR shortened by that much,
  `loss_pair.simulate_link_rtt`), for both servers: Janus 1.1.2 keeps packets for
  retransmission only after it has measured a non-zero RTT in whole milliseconds, which on
  loopback (~0.1 ms) it may never do.
- **loss %**: the share of UDP datagrams dropped at random by nftables in the namespace (input
  hook, `numgen random mod 1000`), on both legs (publisher -> server and server -> subscriber),
  RTP, RTCP, STUN and DTLS alike; **nft %** is the share nft actually dropped in the window.
- **decoded %**: of the frames the publisher sent during the window (VP8 320x240, 30 fps), the
  share the subscriber decoded, by the frame index drawn into the picture.
- **frozen s**: the sum of the freezes in the window, each measured in the sender's time: a
  freeze is an interval between two consecutive decoded frames longer than max(3 frame
  intervals, 1 frame interval + 150 ms) = 183 ms at 30 fps (W3C webrtc-stats'
  totalFreezesDuration definition, applied to the frame indices). **longest s**: the longest
  interval between two decoded frames (the window's edges count as decoded).
- **Why a number can jump between runs**: aiortc's receiver NACKs a missing packet again only
  when a new gap appears and forgets it 128 packets later; its jitter buffer then waits up to
  512 packets (~8 s here) before it gives up, and a keyframe does not end the wait. So one
  packet that is never repaired freezes the picture for seconds. Janus keeps packets for
  retransmission 200 ms (`min_nack_queue`): when a NACK or its retransmission is lost, the next
  NACK usually comes too late. Whether that happens within a window is luck, so Janus's
  numbers at 2-5% swing between ~100% and ~50% from run to run.
"""


def in_loopback_namespace() -> bool:
    with open("/proc/self/net/dev") as f:
        return sorted(ln.split(":")[0].strip() for ln in f.read().splitlines()[2:] if ":" in ln) == ["lo"]


async def run_levels(server: str, levels: list[float], window: float, link_rtt_ms: float, log_dir: Path,
                     http: str | None, url: str | None) -> list[dict]:
    from impair import UdpLoss
    from loss_pair import janus_pair, measure, minato_pair, simulate_link_rtt, summary
    from minato_client import create_room, unique_name
    if link_rtt_ms > 0:
        simulate_link_rtt(link_rtt_ms)
    rows = []
    for level in levels:
        if server == "minato":
            room = await create_room(url, unique_name("bench-loss"))
            pair = await minato_pair(url, room["id"], log_dir)
        else:
            pair = await janus_pair(log_dir)
        try:
            r = await measure(pair, UdpLoss(level), window, http=http)
        finally:
            await pair.close()
        r["server"], r["linkRttMs"] = server, link_rtt_ms
        rows.append(r)
        print(summary(f"{server} {level:g}%", r), flush=True)
    return rows


def run(args: argparse.Namespace) -> int:
    if not in_loopback_namespace():
        sys.exit("loss.py run: not in a loopback-only network namespace; use bench/loss.sh "
                 "(unshare -n sh -c 'ip link set lo up; exec ...')")
    levels = [float(x) for x in args.levels.split(",")]
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    if args.server == "minato":
        from conftest import Server
        srv = Server(Path(args.minato_bin), log_dir / "loss-minato.log")
        srv.start()
        stop, http, url = srv.stop, srv.http, srv.url
    else:
        import janus_probe
        proc = janus_probe.start_janus(log_dir / "loss-janus.log")
        stop, http, url = (lambda: janus_probe.stop_janus(proc)), None, None
    try:
        rows = asyncio.run(asyncio.wait_for(run_levels(args.server, levels, args.window, args.link_rtt_ms, log_dir, http, url),
                                            len(levels) * (args.window + 60)))
    finally:
        stop()
    Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


def write_markdown(rows: list[dict], servers: list[str], levels: list[float], path: Path, meta: dict) -> None:
    by = {(r["server"], r["lossPct"]): r for r in rows}
    head = "| loss % |" + "".join(f" {s}: decoded % | {s}: frozen s | {s}: longest s | {s}: nft % |" for s in servers)
    lines = [f"# Loss benchmark ({meta['date']})", "",
             f"One aiortc publisher -> SFU -> one aiortc subscriber, VP8 320x240 at 30 fps, "
             f"{meta['windowSec']:g} s per level, each server in its own loopback-only namespace, same run. "
             f"Minato: `{meta['minatoBin']}`; Janus 1.1.2 (Debian); round trip claimed in receiver reports: "
             f"{', '.join(f'{x:g}' for x in meta['linkRttMs'])} ms.", "",
             head, "|---:|" + "---:|---:|---:|---:|" * len(servers)]
    for lv in levels:
        cells = []
        for s in servers:
            r = by.get((s, lv))
            cells += ([f"{r['decodedPct']:.1f}", f"{r['frozenSec']:.2f}", f"{r['longestFreezeSec']:.2f}",
                       f"{r['nftDroppedPct']:.2f}"] if r else ["–"] * 4)
        lines.append(f"| {lv:g} | " + " | ".join(cells) + " |")
    lines += ["", DEFINITIONS]
    path.write_text("\n".join(lines))


def write_chart(rows: list[dict], servers: list[str], levels: list[float], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"minato": "#1f6fb4", "janus": "#c2572b"}
    by = {(r["server"], r["lossPct"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(servers))
    for ax, key, title, unit, fmt in ((axes[0], "decodedPct", "Frames decoded", "% of frames sent", "%.1f"),
                                      (axes[1], "frozenSec", "Frozen time", "s (of the window)", "%.1f")):
        for i, s in enumerate(servers):
            xs = [k + (i - (len(servers) - 1) / 2) * width for k in range(len(levels))]
            ys = [by[(s, lv)][key] if (s, lv) in by else 0 for lv in levels]
            ax.bar_label(ax.bar(xs, ys, width, label=s, color=colors.get(s)), fmt=fmt, fontsize=8)
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels([f"{lv:g}%" for lv in levels])
        ax.set_xlabel("random UDP loss, both legs")
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.legend(loc="lower left" if key == "decodedPct" else "upper left")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 110)
    axes[1].set_ylim(0, max([r["frozenSec"] for r in rows] + [1]) * 1.15)
    fig.suptitle("aiortc VP8 320x240 30 fps through the SFU under loss: Minato vs Janus 1.1.2")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(args: argparse.Namespace) -> int:
    rows = [r for raw in args.raw for r in json.loads(Path(raw).read_text())]
    servers = [s for s in ("minato", "janus") if any(r["server"] == s for r in rows)]
    levels = sorted({r["lossPct"] for r in rows})
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "windowSec": max(r["windowSec"] for r in rows), "minatoBin": args.minato_bin,
            "linkRttMs": sorted({r.get("linkRttMs", 0) for r in rows})}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "loss.json").write_text(json.dumps({"meta": meta, "definitions": DEFINITIONS, "results": rows}, indent=1))
    write_markdown(rows, servers, levels, out / "loss.md", meta)
    write_chart(rows, servers, levels, out / "loss.png")
    print((out / "loss.md").read_text())
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--server", choices=("minato", "janus"), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--levels", default="0,1,2,5")
    r.add_argument("--window", type=float, default=15.0)
    r.add_argument("--link-rtt-ms", type=float, default=10.0,
                   help="round trip the subscriber's receiver reports claim (0: loopback's own)")
    r.add_argument("--minato-bin", default=str(REPO / ".build" / "debug" / "minato"))
    r.add_argument("--log-dir", default=str(REPO / "artifacts" / "bench"))
    p = sub.add_parser("report")
    p.add_argument("raw", nargs="+")
    p.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    p.add_argument("--minato-bin", default="?")
    args = ap.parse_args()
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
