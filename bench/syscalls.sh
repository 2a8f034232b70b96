#!/usr/bin/env bash
# Syscalls per forwarded packet (issue 26 item 2, "measure first"): runs minato-bench scenarios
# against the release server, each in its own loopback-only namespace, and counts the server's
# syscalls with perf's syscall tracepoints over 10 s of each measuring window (every thread of
# the process). Prints one line per scenario: forwarded packets in those 10 s (from the
# scenario's forwarded pps), sendmmsg, recvmsg (libnice), recvmmsg (direct receive) and all
# syscalls, each per forwarded packet.
# Usage: bench/syscalls.sh [scenario ...]   (default: fanout-1-10 audio-50; after a release
# build of the server and minato-bench, e.g. `make bench-quick`). Needs perf (linux-perf) with
# tracepoints readable.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/.build/release"
OUT="$ROOT/artifacts/bench"
mkdir -p "$OUT"
[ -x "$BIN/minato-bench" ] && [ -x "$BIN/minato" ] || { echo "syscalls: build minato and minato-bench in release first (make bench-quick)" >&2; exit 2; }
command -v perf >/dev/null || { echo "syscalls: perf is missing (apt-get install linux-perf)" >&2; exit 2; }
EVENTS='raw_syscalls:sys_enter,syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmsg,syscalls:sys_enter_recvmmsg'
[ $# -gt 0 ] || set -- fanout-1-10 audio-50
for scenario in "$@"; do
    unshare -n bash -c '
        set -euo pipefail
        ip link set lo up
        scenario=$1 BIN=$2 OUT=$3 EVENTS=$4
        "$BIN/minato-bench" run --server minato --scenarios "$scenario" --duration 20 --minato-bin "$BIN/minato" \
            --log-dir "$OUT" --out "$OUT/syscalls-$scenario.json" 2> "$OUT/syscalls-$scenario.err" &
        bench=$!
        for _ in $(seq 1 240); do grep -q measuring "$OUT/syscalls-$scenario.err" && break; sleep 0.5; done
        pid=$(pgrep -n -f "$BIN/minato serve")
        sleep 2
        perf stat -x, -e "$EVENTS" -p "$pid" -- sleep 10 2> "$OUT/syscalls-$scenario.perf"
        wait "$bench"
    ' syscalls "$scenario" "$BIN" "$OUT" "$EVENTS"
    python3 - "$scenario" "$OUT/syscalls-$scenario.json" "$OUT/syscalls-$scenario.perf" <<'PY'
import json, sys
scenario, result, perf = sys.argv[1:]
r = json.load(open(result))[0]
counts = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].isdigit():
        counts[f[2].split(":")[-1]] = int(f[0])
packets = r["forwardedPps"] * 10
def per(name):
    return counts.get(name, 0) / packets if packets else 0
print(f"{scenario}: {packets:.0f} packets forwarded in 10 s; per forwarded packet: "
      f"sendmmsg {per('sys_enter_sendmmsg'):.3f}, recvmsg {per('sys_enter_recvmsg'):.3f}, "
      f"recvmmsg {per('sys_enter_recvmmsg'):.3f}, "
      f"all syscalls {per('sys_enter'):.3f}")
PY
done
