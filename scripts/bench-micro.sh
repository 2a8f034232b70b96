#!/usr/bin/env bash
# Runs the packet-path micro benchmarks (bench/, release build) and fails if any benchmark
# made a heap allocation that is not a listed library allocation: every "Malloc (total)" row
# must be 0 at every percentile, or at most the allowance in bench/malloc-allowances.txt.
# (ordo-one/benchmark enforces its declared thresholds only when comparing baselines, so this
# script checks the printed table itself.) Output: artifacts/bench-micro.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/libsrtp-env.sh"   # libsrtp2 on OpenSSL (scripts/build-libsrtp.sh)
mkdir -p "$ROOT/artifacts"
out="$ROOT/artifacts/bench-micro.txt"
(cd "$ROOT/bench" && swift package --disable-sandbox benchmark --no-progress) | tee "$out"
# Every "Malloc (total)" row must be 0 at every percentile, except for the library
# allocations listed in bench/malloc-allowances.txt (name prefix <TAB> allowed count).
python3 - "$out" "$ROOT/bench/malloc-allowances.txt" <<'PYEOF'
import sys
out, allow_file = sys.argv[1], sys.argv[2]
allow = {}
for line in open(allow_file):
    if line.strip() and not line.startswith("#"):
        name, count = line.rstrip("\n").split("\t")
        allow[name] = int(count)
title, checked, bad = None, 0, []
for line in open(out):
    if line and line[0].isalnum() and not line.startswith(("Malloc", "Time", "Throughput", "Baseline", "Host", "Build", "Note", "Running")):
        title = line.strip()
    if "Malloc (total)" in line:
        values = [c.strip() for c in line.split("│")[2:-2] if c.strip()]
        limit = next((v for k, v in allow.items() if title and title.startswith(k)), 0)
        checked += 1
        if any(int(v) > limit for v in values):
            bad.append(f"{title}: mallocs {values} (allowed {limit})")
if checked == 0:
    sys.exit("bench-micro: no malloc counts in the output")
if bad:
    print("bench-micro: the packet path allocated:", *bad, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"bench-micro: no unexpected allocation in {checked} benchmarks "
      f"(library allowances: {', '.join(f'{k} <= {v}' for k, v in allow.items()) or 'none'})")
PYEOF
