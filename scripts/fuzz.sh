#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (with AddressSanitizer) and runs each for SECONDS
# (default 600). Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# New inputs go to artifacts/fuzz/<target>/ (the committed seeds in fuzz/corpus/ are read
# only); a crash stops that fuzzer, leaves crash-* in artifacts/fuzz/ and fails the script.
# The JSON-RPC target starts a real media worker that binds UDP ports on 127.0.0.1, so every
# run happens inside a loopback-only network namespace.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/libsrtp-env.sh"   # libsrtp2 on OpenSSL (scripts/build-libsrtp.sh)
SECONDS_EACH="${1:-600}"; shift || true
[ "$SECONDS_EACH" -ge 1 ] 2>/dev/null || { echo "fuzz: SECONDS must be a positive number" >&2; exit 2; }
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(FuzzRtp FuzzRtcp FuzzSdp FuzzDemux FuzzRouter FuzzJsonRpc FuzzDataChannel)
cd "$ROOT/fuzz"
bash "$ROOT/scripts/install-deps.sh"
mkdir -p "$ROOT/artifacts/fuzz"
FLAGS=(-c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -g)
echo "fuzz: building ${TARGETS[*]}" >&2
for t in "${TARGETS[@]}"; do
    if ! swift build "${FLAGS[@]}" --product "$t" >"$ROOT/artifacts/fuzz-build-$t.log" 2>&1; then
        grep -E "error" "$ROOT/artifacts/fuzz-build-$t.log" | head -n 20 >&2
        echo "fuzz: building $t failed (artifacts/fuzz-build-$t.log)" >&2
        exit 1
    fi
done
BIN="$(swift build "${FLAGS[@]}" --show-bin-path)"
status=0
printf '%-12s %10s %8s %8s %6s %s\n' target execs exec/s cov ft result >&2
for t in "${TARGETS[@]}"; do
    work="$ROOT/artifacts/fuzz/$t"; mkdir -p "$work"
    log="$ROOT/artifacts/fuzz/$t.log"
    set +e
    SWIFT_BACKTRACE=enable=no unshare -n sh -c 'ip link set lo up; exec "$@"' fuzz "$BIN/$t" "$work" "$ROOT/fuzz/corpus/$t" \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 -artifact_prefix="$ROOT/artifacts/fuzz/$t-" \
        -rss_limit_mb=4096 -timeout=20 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    eps=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n1 | grep -Eo '[0-9]+' || echo 0)
    ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -n1 | grep -Eo '[0-9]+' || echo 0)
    result=ok; [ $rc -eq 0 ] || { result="FAILED (exit $rc, see $log)"; status=1; }
    printf '%-12s %10s %8s %8s %6s %s\n' "$t" "$execs" "$eps" "$cov" "$ft" "$result"
    [ $rc -eq 0 ] || tail -n 40 "$log" >&2
done
exit $status
