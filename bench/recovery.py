"""Report of `make bench-recovery` (bench/recovery.sh): reads the per-run results that
Tests/interop/test_recovery_browser.py wrote (artifacts/interop/recovery-address-change.json,
recovery-signaling-drop.json) and prints, per case and leg, the time until decoding resumed and
the frames lost, p50 and max; writes <out-dir>/recovery.json (every run) and recovery.md."""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

CASES = {"recovery-address-change.json": "address change", "recovery-signaling-drop.json": "signaling drop (8 s)"}
LEGS = {"lab->peer": "the recovering page's camera, decoded by the other page",
        "peer->lab": "the other page's camera, decoded by the recovering page"}


def p50_max(values: list[float]) -> tuple[float | None, float | None]:
    return (statistics.median(values), max(values)) if values else (None, None)


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--minato-bin", default="")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    report: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "runsRequested": args.runs, "minatoBin": args.minato_bin, "cases": {}}
    lines = ["# Recovery benchmark (`make bench-recovery`)", "",
             f"{report['date']}, server `{args.minato_bin}`; Chromium pages with the browser SDK, the recovering one "
             "in a second network namespace (Tests/interop/test_recovery_browser.py). \"Decoding resumed\": from the "
             "change to the first decoded frame after which decoding goes on for 2 s without a 0.5 s gap; \"frames "
             "lost\": the frame rate before times that span, minus the frames decoded in it.", "",
             "| case | leg | runs | decoding resumed p50 / max (s) | frames lost p50 / max | longest stall p50 / max (s) |",
             "|---|---|---|---|---|---|"]
    notes: list[str] = []
    for f in args.files:
        path = Path(f)
        case = CASES.get(path.name, path.stem)
        if not path.is_file():
            print(f"bench-recovery: {case}: no results ({path} missing)")
            lines.append(f"| {case} | - | 0 | - | - | - |")
            continue
        runs = json.loads(path.read_text())["runs"]
        for r in runs:
            for leg in LEGS:
                r.get(leg, {}).pop("samples", None)
        report["cases"][case] = {"runs": runs}
        for leg in LEGS:
            resumed = [r[leg]["resumedSec"] for r in runs if leg in r]
            lost = [r[leg]["framesLost"] for r in runs if leg in r]
            stall = [r[leg]["stallSec"] for r in runs if leg in r]
            (rp, rm), (lp, lm), (sp, sm) = p50_max(resumed), p50_max(lost), p50_max(stall)
            report["cases"][case][leg] = {"resumedSec": {"p50": rp, "max": rm}, "framesLost": {"p50": lp, "max": lm},
                                          "stallSec": {"p50": sp, "max": sm}, "runs": len(resumed)}
            print(f"bench-recovery: {case}, {leg} ({LEGS[leg]}), {len(resumed)} runs: decoding resumed p50 {fmt(rp)} s "
                  f"max {fmt(rm)} s; frames lost p50 {fmt(lp, 0)} max {fmt(lm, 0)}; longest stall p50 {fmt(sp)} s max {fmt(sm)} s")
            lines.append(f"| {case} | {leg} | {len(resumed)} | {fmt(rp)} / {fmt(rm)} | {fmt(lp, 0)} / {fmt(lm, 0)} | "
                         f"{fmt(sp)} / {fmt(sm)} |")
        extra = [("signalingReconnectedSec", "signaling back after the change (s)"),
                 ("detectSec", "silent socket noticed after the drop began (s)"),
                 ("reconnectedAfterUnblockSec", "reconnected after the drop ended (s)")]
        for key, label in extra:
            vals = [r[key] for r in runs if r.get(key) is not None]
            if vals:
                p, m = p50_max(vals)
                report["cases"][case][key] = {"p50": p, "max": m}
                print(f"bench-recovery: {case}: {label} p50 {fmt(p)} max {fmt(m)}")
                notes.append(f"- {case}: {label}: p50 {fmt(p)}, max {fmt(m)}.")
    lines += [""] + notes
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recovery.json").write_text(json.dumps(report, indent=1))
    (out / "recovery.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
