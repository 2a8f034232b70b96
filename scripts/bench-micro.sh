#!/usr/bin/env bash
# Runs the packet-path micro benchmarks (bench/, release build) and fails if any benchmark
# made a heap allocation: every "Malloc (total)" row must be 0 at every percentile.
# (ordo-one/benchmark enforces its declared thresholds only when comparing baselines, so this
# script checks the printed table itself.) Output: artifacts/bench-micro.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$ROOT/artifacts"
out="$ROOT/artifacts/bench-micro.txt"
(cd "$ROOT/bench" && swift package --disable-sandbox benchmark --no-progress) | tee "$out"
rows=$(grep -E "Malloc \(total\)" "$out" || true)
[ -n "$rows" ] || { echo "bench-micro: no malloc counts in the output" >&2; exit 1; }
bad=$(echo "$rows" | awk -F'│' '{ for (i = 3; i <= NF - 2; i++) { gsub(/ /, "", $i); if ($i != "" && $i != "0") { print; break } } }')
if [ -n "$bad" ]; then
    echo "bench-micro: the packet path allocated:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "bench-micro: 0 mallocs in every benchmark ($(echo "$rows" | wc -l) benchmarks)"
