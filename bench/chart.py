"""Draws bench/results/<name>.png from <name>.json: CPU per forwarded packet and loss, Minato vs
Janus, per scenario. Usage: chart.py RESULTS.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    rows = json.load(open(src))
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    servers = [s for s in ("minato", "janus") if any(r["server"] == s for r in rows)]
    colors = {"minato": "#1f6fb4", "janus": "#c2572b"}
    fig, (cpu, loss) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(servers))
    for i, server in enumerate(servers):
        by = {r["scenario"]: r for r in rows if r["server"] == server}
        xs = [k + (i - (len(servers) - 1) / 2) * width for k in range(len(scenarios))]
        c = [by[s]["cpuMicrosPerForwardedPacket"] if s in by else 0 for s in scenarios]
        lo = [by[s]["lossPercent"] if s in by else 0 for s in scenarios]
        bars = cpu.bar(xs, c, width, label=server, color=colors[server])
        cpu.bar_label(bars, fmt="%.1f", fontsize=8)
        bars = loss.bar(xs, lo, width, label=server, color=colors[server])
        loss.bar_label(bars, fmt="%.2f", fontsize=8)
    worst = max([r["lossPercent"] for r in rows] + [0])
    loss.set_ylim(0, max(1.0, worst * 1.3))
    for ax, title, unit in ((cpu, "Server CPU per forwarded packet", "µs (user+sys)"), (loss, "Loss", "%")):
        ax.set_xticks(range(len(scenarios)))
        ax.set_xticklabels(scenarios, rotation=15)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Minato vs Janus 1.1.2, same load generator, same run (loopback, 2 vCPU)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
