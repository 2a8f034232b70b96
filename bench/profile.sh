#!/usr/bin/env bash
# Where the release server's CPU goes per forwarded packet in one scenario: runs
# `minato-bench run --server minato` in a fresh loopback-only namespace, attaches `perf record` to
# the server for SECONDS once the streams flow, and prints the samples by part (kernel, SRTP
# crypto, libsrtp, Minato's Swift code, Swift runtime, libc/GLib/shims) as shares and as µs per
# forwarded packet (the share times the run's own CPU per forwarded packet). The table in
# docs/architecture.md "Per forwarded packet, by scenario" is its output.
#   bench/profile.sh [SCENARIO] [SECONDS]     (default fanout-1-10 10; needs perf and a release build)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SCENARIO="${1:-fanout-1-10}"
SECONDS_RECORDED="${2:-10}"
BIN="$ROOT/.build/release"
command -v perf >/dev/null || { echo "profile: perf is missing (apt-get install linux-perf)" >&2; exit 2; }
[ -x "$BIN/minato" ] && [ -x "$BIN/minato-bench" ] || { echo "profile: build first (scripts/release-build.sh minato minato-bench)" >&2; exit 2; }
out="${PROFILE_KEEP:-$(mktemp -d)}"; [ -n "${PROFILE_KEEP:-}" ] || trap 'rm -rf "$out"' EXIT; mkdir -p "$out"
# The window must cover the recording: set-up takes a few seconds, then perf starts.
unshare -n sh -c 'ip link set lo up; exec "$@"' profile "$BIN/minato-bench" run --server minato \
    --scenarios "$SCENARIO" --duration $((SECONDS_RECORDED + 10)) --minato-bin "$BIN/minato" \
    --log-dir "$out" --out "$out/result.json" > "$out/bench.log" 2>&1 &
bench=$!
pid=""
for _ in $(seq 1 100); do
    pid="$(pgrep -f "^$BIN/minato serve" | head -1 || true)"
    [ -n "$pid" ] && break
    sleep 0.2
done
[ -n "$pid" ] || { echo "profile: the server did not start" >&2; cat "$out/bench.log" >&2; exit 1; }
# The scenario's set-up (joins, publishes, subscribes) and the first seconds of flow.
sleep 8
perf record -q -g -F 999 -p "$pid" -o "$out/perf.data" -- sleep "$SECONDS_RECORDED" 2>/dev/null
wait "$bench" || { echo "profile: the benchmark failed" >&2; cat "$out/bench.log" >&2; exit 1; }
perf report -i "$out/perf.data" --stdio --no-children -g none --sort dso,sym 2>/dev/null > "$out/report.txt"
# On loopback the kernel delivers each sent packet to the receiving socket in the sender's
# context (net_rx_action -> process_backlog): the load generator's side, charged to the server.
perf report -i "$out/perf.data" --stdio --children -g none --sort sym 2>/dev/null > "$out/children.txt"
awk '/\] process_backlog$/ && !done {gsub("%", "", $1); print $1; done = 1}' "$out/children.txt" > "$out/backlog.txt"
python3 - "$out/report.txt" "$out/result.json" "$SCENARIO" "$out/backlog.txt" <<'PY'
import json, re, sys
report, result, scenario, backlog = sys.argv[1:5]
receiving = float(open(backlog).read().strip() or 0)
us = next(r["cpuMicrosPerForwardedPacket"] for r in json.load(open(result)) if r["scenario"] == scenario)
parts = {}
order = ["kernel: UDP send/receive, scheduling, polling", "libgcrypt, nettle (AES-GCM / AES-CM, HMAC-SHA1)",
         "OpenSSL (libcrypto, libssl)", "libsrtp (stream lookup, replay window, headers)",
         "Minato's Swift code (engine, flush, direct receive)", "Swift runtime (retain/release, exclusivity, metadata)",
         "libc, GLib, libnice, C shims", "other"]
for line in open(report):
    m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)", line)
    if not m:
        continue
    share, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
    if dso.startswith("[kernel") or dso == "[unknown]" and sym.startswith("0xffff"):
        k = order[0]
    elif "libgcrypt" in dso or "libnettle" in dso:
        k = order[1]
    elif "libcrypto" in dso or "libssl" in dso:
        k = order[2]
    elif dso == "minato":
        if sym.startswith("srtp_") or sym.startswith("minato_stream_list") or sym.startswith("minato_gcm") \
                or sym.startswith("minato_icm") or sym.startswith("minato_hmac"):
            k = order[3]
        elif sym.startswith("swift_") or sym.startswith("_swift") or "swift::" in sym:
            k = order[5]
        elif sym.startswith("$s") or sym.startswith("_$s"):
            k = order[4]
        else:
            k = order[6]
    elif any(x in dso for x in ("libc.so", "libglib", "libnice", "libgio", "libgobject", "libm.so", "ld-linux")):
        k = order[6]
    elif "libswift" in dso:
        k = order[5]
    else:
        k = order[7]
    parts[k] = parts.get(k, 0.0) + share
total = sum(parts.values()) or 1.0
print(f"{scenario}: {us} µs of server CPU per forwarded packet")
print("| part | µs per forwarded packet | share |\n|---|---:|---:|")
for k in order:
    if k in parts:
        print(f"| {k} | {us * parts[k] / total:.2f} | {100 * parts[k] / total:.0f}% |")
        if k == order[0] and receiving > 0:
            print(f"| … of which the receiving side on loopback (`process_backlog`) | {us * receiving / total:.2f} | {100 * receiving / total:.0f}% |")
PY
