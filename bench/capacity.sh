#!/usr/bin/env bash
# Capacity of one server core (issue 26 item 3; README "Benchmarks"): `minato-bench capacity`
# for Minato and Janus, video rooms then audio rooms, each run in its own loopback-only network
# namespace. The server is pinned to CPU 0 (taskset; Minato with one media worker), the load
# generator to CPU 1. Rooms of 1 publisher (1 Mbit/s VP8-shaped video + Opus, or Opus only) and
# 99 subscribers are added one at a time; after each, a 10 s window measures every stream.
# 3 subscribers per room read every packet (loss, latency); the kernel drops the RTP of the
# other 96 with a socket filter after they received their first packets, so the generator's
# core is not the bound (the server still encrypts and sends every packet to every subscriber).
#   bench/capacity.sh [minato-bench capacity options]   -> bench/results/capacity.{json,md,png}
# About 15-25 minutes on 2 cores. Needs 2 CPUs. Installs what is missing and builds in release
# mode first.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/libsrtp-env.sh"
cd "$ROOT"
[ "$(nproc)" -ge 2 ] || { echo "bench/capacity.sh: needs 2 CPUs (server on one, generator on the other)" >&2; exit 1; }
bash scripts/install-deps.sh
bash scripts/interop-setup.sh          # iproute2, the venv with matplotlib for the chart
bash scripts/janus-run.sh --setup
bash scripts/release-build.sh minato minato-bench
BIN="$ROOT/.build/release"
OUT="bench/results"
mkdir -p "$OUT" artifacts/bench
raws=()
for kind in video audio; do
    for server in minato janus; do
        raw="$ROOT/artifacts/bench/capacity-$server-$kind.json"
        echo "bench: capacity of $server, $kind rooms" >&2
        unshare -n sh -c 'ip link set lo up; exec taskset -c 1 "$@"' capacity "$BIN/minato-bench" capacity \
            --server "$server" --kind "$kind" --server-cpus 0 --minato-bin "$BIN/minato" \
            --janus-run "$ROOT/scripts/janus-run.sh" --log-dir "$ROOT/artifacts/bench" --out "$raw" "$@"
        raws+=("$raw")
    done
done
.venv-interop/bin/python bench/capacity.py "$OUT/capacity" "${raws[@]}"
echo "bench: wrote $OUT/capacity.json, $OUT/capacity.md, $OUT/capacity.png" >&2
