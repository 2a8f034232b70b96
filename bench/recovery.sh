#!/usr/bin/env bash
# The recovery benchmark (make bench-recovery): the two cases of
# Tests/interop/test_recovery_browser.py, RECOVERY_RUNS times each (default 10) in one call:
# a Chromium page in a second network namespace (the browser SDK) publishing and subscribing
# beside another page, (1) its address replaced mid-call (the SDK restarts ICE by itself) and
# (2) TCP to the signaling port dropped for 8 s (media must go on; the SDK reconnects and takes
# its member back). Prints, per case and leg, the time from the change until decoding resumed
# and the frames lost, p50 and max, and writes bench/results/recovery.{json,md}. Everything runs
# in a fresh loopback-only namespace (unshare -n, needs root), as scripts/interop.sh does.
# Server binary: $MINATO_BIN, else .build/release/minato if present, else .build/debug/minato.
# env: RECOVERY_RUNS (default 10), RECOVERY_OUT_DIR (default bench/results).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RUNS="${RECOVERY_RUNS:-10}"
OUT_DIR="${RECOVERY_OUT_DIR:-bench/results}"

bash scripts/interop-setup.sh          # ip, nft, Chromium, the venv with Playwright

BIN="${MINATO_BIN:-}"
if [ -z "$BIN" ]; then
    BIN="$ROOT/.build/debug/minato"
    [ -x "$ROOT/.build/release/minato" ] && BIN="$ROOT/.build/release/minato"
fi
[ -x "$BIN" ] || { echo "bench-recovery: no server binary at $BIN: build it (swift build) or set MINATO_BIN" >&2; exit 2; }

mkdir -p artifacts/interop "$OUT_DIR"
rm -f artifacts/interop/recovery-address-change.json artifacts/interop/recovery-signaling-drop.json
echo "bench-recovery: $RUNS address changes and $RUNS signaling drops, server $BIN" >&2
status=0
MINATO_BIN="$BIN" RECOVERY_RUNS="$RUNS" unshare -n sh -c 'ip link set lo up; exec "$@"' recovery \
    .venv-interop/bin/python -m pytest Tests/interop/test_recovery_browser.py -v -p no:cacheprovider \
    --timeout=$((240 + 60 * RUNS)) || status=$?
.venv-interop/bin/python bench/recovery.py --runs "$RUNS" --out-dir "$OUT_DIR" --minato-bin "${BIN#"$ROOT"/}" \
    artifacts/interop/recovery-address-change.json artifacts/interop/recovery-signaling-drop.json
echo "bench-recovery: wrote $OUT_DIR/recovery.json, $OUT_DIR/recovery.md" >&2
exit "$status"
