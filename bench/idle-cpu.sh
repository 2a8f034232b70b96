#!/usr/bin/env bash
# Idle CPU of `minato serve` with no rooms: starts the given binary in its own loopback-only
# network namespace on embedded defaults, waits WARMUP seconds, then reads utime+stime from
# /proc/<pid>/stat over WINDOW seconds. Prints "<binary> cpu_ms=<n> window_s=<s> ms_per_s=<x>".
#   bench/idle-cpu.sh path/to/minato [WINDOW=30] [WARMUP=5]
set -euo pipefail
BIN="$1"; WINDOW="${2:-30}"; WARMUP="${3:-5}"
exec unshare -n bash -c '
    set -euo pipefail
    ip link set lo up
    "$0" serve >/tmp/idle-cpu-$$.log 2>&1 &
    pid=$!
    sleep "$2"
    ticks() { awk "{print \$14 + \$15}" /proc/$pid/stat; }
    hz=$(getconf CLK_TCK)
    a=$(ticks); sleep "$1"; b=$(ticks)
    kill $pid; wait $pid 2>/dev/null || true
    ms=$(( (b - a) * 1000 / hz ))
    echo "$0 cpu_ms=$ms window_s=$1 ms_per_s=$(awk "BEGIN{printf \"%.2f\", $ms/$1}")"
' "$BIN" "$WINDOW" "$WARMUP"
