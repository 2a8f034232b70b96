#!/usr/bin/env bash
# The RTP throughput benchmark, Minato and Janus side by side (README "Benchmarks").
#   bench/run.sh quick   fan-out 1->10 on both servers, 20 s window     -> bench/results/quick.{json,md,png}
#   bench/run.sh full    every scenario on both servers, 30 s windows    -> bench/results/full.{json,md,png}
#                        and data fan-out 1->10 on Minato                -> bench/results/data-fanout.json
#   bench/run.sh smoke   fan-out 1->10 on Minato only, 10 s, fails on loss > 5% or no packets, then
#                        one step of the capacity benchmark (`minato-bench capacity --check`) (CI;
#                        debug builds of both from `make test`'s .build, so CI builds nothing
#                        more)                                                  -> artifacts/bench/smoke.json
# Extra arguments go to `minato-bench run` (e.g. --video-bitrate 4000000 --duration 60).
# Each server runs in its own loopback-only network namespace (unshare -n) together with the
# load generator; nothing leaves `lo`. Installs what is missing first (Debian packages, the
# janus package, the Python venv for the chart) and builds the server and `minato-bench` (root
# package products) in release mode (the first build takes about 10 minutes on 2 cores).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/libsrtp-env.sh"   # libsrtp2 on OpenSSL (scripts/build-libsrtp.sh)
cd "$ROOT"
MODE="${1:-quick}"
[ $# -gt 0 ] && shift
case "$MODE" in
    quick) SCENARIOS="fanout-1-10"; DURATION=20; SERVERS="minato janus"; OUTDIR="bench/results"; CHECK=() ;;
    full)  SCENARIOS="fanout-1-1,fanout-1-10,fanout-1-10-cm,fanout-1-50,all-to-all-10,audio-50,audio-50-loudest-3"; DURATION=30; SERVERS="minato janus"
           OUTDIR="bench/results"; CHECK=() ;;
    smoke) SCENARIOS="fanout-1-10"; DURATION=10; SERVERS="minato"; OUTDIR="artifacts/bench"; CHECK=(--max-loss 5) ;;
    *) echo "usage: bench/run.sh quick|full|smoke [minato-bench run options]" >&2; exit 2 ;;
esac

bash scripts/install-deps.sh
bash scripts/interop-setup.sh          # iproute2 (ip), the venv with matplotlib for the chart
case " $SERVERS " in *" janus "*) bash scripts/janus-run.sh --setup ;; esac

if [ "$MODE" = smoke ]; then
    # `make test` already built both (debug): nothing to compile in CI.
    echo "bench: building the server and minato-bench (debug)" >&2
    swift build --product minato
    swift build --product minato-bench
    BIN="$ROOT/.build/debug"
else
    echo "bench: building the server and minato-bench (release)" >&2
    bash scripts/release-build.sh minato minato-bench
    BIN="$ROOT/.build/release"
fi
SERVER_BIN="$BIN/minato"
mkdir -p "$OUTDIR" artifacts/bench
raws=()
for server in $SERVERS; do
    raw="$ROOT/artifacts/bench/$MODE-$server.json"
    echo "bench: $server ($SCENARIOS, ${DURATION} s windows) in its own loopback-only namespace" >&2
    unshare -n sh -c 'ip link set lo up; exec "$@"' bench "$BIN/minato-bench" run --server "$server" \
        --scenarios "$SCENARIOS" --duration "$DURATION" --minato-bin "$SERVER_BIN" \
        --janus-run "$ROOT/scripts/janus-run.sh" --log-dir "$ROOT/artifacts/bench" --out "$raw" \
        ${CHECK[@]+"${CHECK[@]}"} "$@"
    raws+=("$raw")
done
if [ "$MODE" = smoke ]; then
    # The capacity benchmark's path, one step: a room of 1 publisher and 99 subscribers, 96 of
    # them muted by a socket filter once every stream arrived; fails if a stream delivers
    # nothing, a muted subscriber reads a packet, or the probes lose more than 5%.
    echo "bench: capacity smoke (one room, Minato pinned to CPU 0) in its own loopback-only namespace" >&2
    unshare -n sh -c 'ip link set lo up; exec "$@"' bench "$BIN/minato-bench" capacity --server minato --kind video \
        --max-rooms 1 --window 3 --stop-after 1 --check --minato-bin "$SERVER_BIN" --log-dir "$ROOT/artifacts/bench" \
        --out "$ROOT/artifacts/bench/capacity-smoke.json"
fi
"$BIN/minato-bench" report --name "$MODE" --out-dir "$OUTDIR" "${raws[@]}"
if [ "$MODE" != smoke ]; then
    .venv-interop/bin/python bench/chart.py "$OUTDIR/$MODE.json" "$OUTDIR/$MODE.png"
    echo "bench: wrote $OUTDIR/$MODE.json, $OUTDIR/$MODE.md, $OUTDIR/$MODE.png" >&2
fi
if [ "$MODE" = full ]; then
    # Data fan-out 1 -> 10, 1 KiB messages, Minato only (DataBench.swift): latency at 1000/s, then
    # messages a second when offered as fast as the publisher's channel takes them.
    echo "bench: data fan-out on minato in its own loopback-only namespace" >&2
    unshare -n sh -c 'ip link set lo up; exec "$@"' bench "$BIN/minato-bench" data --minato-bin "$SERVER_BIN" \
        --log-dir "$ROOT/artifacts/bench" --out "$OUTDIR/data-fanout.json"
    echo "bench: wrote $OUTDIR/data-fanout.json" >&2
fi
