#!/usr/bin/env bash
# Runs the aiortc interop suite (Tests/interop) inside a fresh loopback-only network namespace:
# the Minato server (started by the tests) and every peer live in it, so nothing leaves `lo`.
# Usage: scripts/interop.sh [pytest args...]   e.g. scripts/interop.sh -k fanout -x
# Server binary: $MINATO_BIN or .build/debug/minato. Logs: artifacts/interop/. The summary ends
# with the 25 slowest setups, calls and teardowns (CI time).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv-interop/bin/python ]; then
    echo "interop: .venv-interop missing; run scripts/interop-setup.sh first" >&2
    exit 2
fi
mkdir -p artifacts/interop
exec unshare -n sh -c 'ip link set lo up; exec .venv-interop/bin/python -m pytest Tests/interop -v --timeout=120 --durations=25 -p no:cacheprovider "$@"' interop "$@"
