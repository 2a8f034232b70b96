#!/usr/bin/env bash
# Per-thread idle cost of `minato serve` with no rooms, from /proc/<pid>/task/<tid>/schedstat
# (nanoseconds on CPU and times scheduled, exact, unlike utime/stime's 10 ms ticks), summed by
# thread over WINDOW seconds, in its own loopback-only network namespace. (Threads inherit their
# creator's name unless they set one: before 57f06bb+1 the media workers showed up as
# "oot.default-qos", the name of the dispatch thread that created them.)
#   bench/idle-threads.sh path/to/minato [WINDOW=30] [WARMUP=5]
set -euo pipefail
exec unshare -n bash -c '
    ip link set lo up
    "$0" serve >/tmp/idle-threads-$$.log 2>&1 &
    pid=$!
    sleep "$2"
    snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(tr " " _ <$t/comm) $(cut -d" " -f1,3 $t/schedstat)"; done | sort; }
    snap >/tmp/idle-a-$$; sleep "$1"; snap >/tmp/idle-b-$$
    kill $pid; wait $pid 2>/dev/null || true
    join /tmp/idle-a-$$ /tmp/idle-b-$$ | awk -v w="$1" "{ns=\$6-\$3; n=\$7-\$4; tns+=ns; printf \"%-7s %-16s cpu_ms=%8.2f wakeups=%6d (per s: %.3f ms, %.1f)\\n\", \$1, \$2, ns/1e6, n, ns/1e6/w, n/w} END {printf \"total cpu_ms=%.2f (%.3f ms/s)\\n\", tns/1e6, tns/1e6/w}"
    rm -f /tmp/idle-a-$$ /tmp/idle-b-$$
' "$1" "${2:-30}" "${3:-5}"
