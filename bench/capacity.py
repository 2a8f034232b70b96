"""Merges `minato-bench capacity` outputs into PREFIX.json, a table PREFIX.md and a chart
PREFIX.png (server CPU and p99 latency against subscriber streams, per server and kind).
The capacity of a run is the most streams of a step with < 1% loss and p99 < 50 ms.
Usage: capacity.py PREFIX RUN.json..."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"minato": "#1f6fb4", "janus": "#c2572b"}


def capacity(steps):
    passed = [s["streams"] for s in steps if s["passed"]]
    return max(passed) if passed else 0


def main(prefix, inputs):
    runs = {}
    for path in inputs:
        steps = json.load(open(path))
        if steps:
            runs[(steps[0]["server"], steps[0]["kind"])] = steps
    json.dump([s for steps in runs.values() for s in steps], open(prefix + ".json", "w"), indent=2, sort_keys=True)

    lines = ["| kind | server | rooms | streams | all streams | out pkt/s | server CPU % | µs/out pkt | "
             "generator CPU % | loss % | p50 ms | p99 ms | RSS MB | |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (server, kind), steps in runs.items():
        for s in steps:
            verdict = "pass" if s["passed"] else "FAIL" + (f" ({s['error']})" if s.get("error") else "")
            lines.append(f"| {kind} | {server} | {s['rooms']} | {s['streams']} | {s['allStreams']} | {int(s['outPps'])} | "
                         f"{s['serverCpuPercent']:.1f} | {s['serverMicrosPerOutPacket']:.2f} | "
                         f"{s['generatorCpuPercent']:.1f} | {s['lossPercent']:.3f} | {s['latencyP50Ms']:.2f} | "
                         f"{s['latencyP99Ms']:.2f} | {s['serverRssMB']:.1f} | {verdict} |")
    lines.append("")
    for kind in ("video", "audio"):
        parts = []
        for server in ("minato", "janus"):
            if (server, kind) in runs:
                parts.append(f"{server} {capacity(runs[(server, kind)])}")
        if parts:
            what = "video subscriber streams (each subscriber also gets the Opus stream)" if kind == "video" \
                else "Opus subscriber streams"
            lines.append(f"- Capacity, {what}, one core, < 1% loss and p99 < 50 ms: " + ", ".join(parts))
    text = "\n".join(lines) + "\n"
    open(prefix + ".md", "w").write(text)
    print(text)

    kinds = [k for k in ("video", "audio") if any(key[1] == k for key in runs)]
    fig, axes = plt.subplots(2, len(kinds), figsize=(6 * len(kinds), 7), squeeze=False)
    for col, kind in enumerate(kinds):
        cpu_ax, lat_ax = axes[0][col], axes[1][col]
        for server in ("minato", "janus"):
            steps = runs.get((server, kind))
            if not steps:
                continue
            ok = [s for s in steps if not s.get("error") or s["streams"] > 0]
            xs = [s["streams"] for s in ok]
            cpu_ax.plot(xs, [s["serverCpuPercent"] for s in ok], "o-", color=COLORS[server], label=server)
            lat_ax.plot(xs, [s["latencyP99Ms"] for s in ok], "o-", color=COLORS[server], label=f"{server} p99")
            cap = capacity(steps)
            if cap:
                cpu_ax.axvline(cap, color=COLORS[server], linestyle=":", linewidth=1)
                cpu_ax.annotate(f"{server}: {cap}", (cap, 5), color=COLORS[server], fontsize=8, rotation=90,
                                ha="right", va="bottom")
        cpu_ax.set_title(f"{kind} rooms: server CPU on one core")
        cpu_ax.set_ylabel("%")
        cpu_ax.set_ylim(0, 110)
        lat_ax.axhline(50, color="grey", linestyle="--", linewidth=1)
        lat_ax.set_yscale("log")
        lat_ax.set_title(f"{kind} rooms: latency p99 (probe subscribers)")
        lat_ax.set_ylabel("ms (log scale)")
        lat_ax.set_xlabel("subscriber streams" + (" (video; each also gets audio)" if kind == "video" else " (Opus)"))
        for ax in (cpu_ax, lat_ax):
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(prefix + ".png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
