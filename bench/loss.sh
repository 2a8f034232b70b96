#!/usr/bin/env bash
# The loss benchmark (make bench-loss): one aiortc publisher -> SFU -> one aiortc subscriber
# (VP8 320x240 30 fps, frame index in the picture) at 0, 1, 2 and 5% random loss of every UDP
# datagram (both legs, nftables), 15 s per level, through Minato and through Janus 1.1.2 in the
# same run, each server in its own loopback-only network namespace (unshare -n) with its peers.
# Writes bench/results/loss.{json,md,png}; raw results and logs in artifacts/bench/.
# Installs what is missing first (Debian packages, nftables, the Python venv, the janus package).
# Server binary: $MINATO_BIN, else .build/release/minato if present, else .build/debug/minato.
# env: LOSS_LEVELS (default 0,1,2,5), LOSS_WINDOW (seconds per level, default 15),
#      LOSS_OUT_DIR (default bench/results).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
LEVELS="${LOSS_LEVELS:-0,1,2,5}"
WINDOW="${LOSS_WINDOW:-15}"
OUT_DIR="${LOSS_OUT_DIR:-bench/results}"

bash scripts/install-deps.sh
bash scripts/interop-setup.sh          # ip, nft, the venv with aiortc and matplotlib
bash scripts/janus-run.sh --setup

BIN="${MINATO_BIN:-}"
if [ -z "$BIN" ]; then
    BIN="$ROOT/.build/debug/minato"
    [ -x "$ROOT/.build/release/minato" ] && BIN="$ROOT/.build/release/minato"
fi
[ -x "$BIN" ] || { echo "bench-loss: no server binary at $BIN: build it (swift build) or set MINATO_BIN" >&2; exit 2; }

mkdir -p artifacts/bench "$OUT_DIR"
raws=()
for server in minato janus; do
    raw="$ROOT/artifacts/bench/loss-$server.json"
    echo "bench-loss: $server at $LEVELS% loss, ${WINDOW} s each, in its own loopback-only namespace" >&2
    unshare -n sh -c 'ip link set lo up; exec "$@"' loss .venv-interop/bin/python bench/loss.py run \
        --server "$server" --levels "$LEVELS" --window "$WINDOW" --minato-bin "$BIN" \
        --log-dir "$ROOT/artifacts/bench" --out "$raw"
    raws+=("$raw")
done
.venv-interop/bin/python bench/loss.py report --out-dir "$OUT_DIR" --minato-bin "${BIN#"$ROOT"/}" "${raws[@]}"
echo "bench-loss: wrote $OUT_DIR/loss.json, $OUT_DIR/loss.md, $OUT_DIR/loss.png" >&2
