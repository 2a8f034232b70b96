#!/usr/bin/env bash
# Runs Janus 1.1.2 (Debian `janus`) in the foreground as the baseline SFU next to Minato:
#  - installs the `janus` package if missing (idempotent; needs root or sudo, and a network:
#    so outside the namespace, via --setup),
#  - builds the getifaddrs LD_PRELOAD shim (scripts/janus-getifaddrs.c) into BUILD_DIR if it is
#    missing or older than its source (Janus ignores loopback interfaces without it),
#  - checks that this is a loopback-only network namespace with `lo` up and port 8088 free,
#  - execs `janus -F CONF -C CONF/janus.jcfg -o [extra args]` (the PID stays the caller's).
# It does NOT create the namespace: the caller runs it inside one, e.g.
#   unshare -n bash -c 'ip link set lo up; scripts/janus-run.sh > artifacts/janus.log 2>&1 & ...'
# Usage: scripts/janus-run.sh [--build-dir DIR] [--conf DIR] [-- extra janus options]
#        scripts/janus-run.sh --setup [--build-dir DIR]   # install + build only, outside the namespace
#   (apt cannot reach a mirror from inside the namespace: if janus is missing there, run --setup first.)
#   env: JANUS_BUILD_DIR (default .build-janus), JANUS_CONF (default config/janus),
#        JANUS_ALLOW_HOST_NET=1 skips the loopback-only check (not for this repo's tests).
# API: http://127.0.0.1:8088/janus. Stop: SIGINT or SIGTERM to the PID (clean shutdown).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${JANUS_BUILD_DIR:-$ROOT/.build-janus}"
CONF="${JANUS_CONF:-$ROOT/config/janus}"
SETUP_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --setup) SETUP_ONLY=1; shift ;;
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --conf) CONF="$2"; shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
die() { echo "janus-run: error: $*" >&2; exit 1; }
# Interfaces of this process's network namespace (/sys/class/net would show the host's).
ifaces="$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' /proc/self/net/dev | sort | tr '\n' ' ')"

# 1. The package.
# (Outputs are captured before matching: with pipefail, `cmd | grep -q` fails at random when
# grep exits first and cmd gets SIGPIPE.)
status="$(dpkg-query -W -f='${Status}' janus 2>/dev/null || true)"
if [ "$status" != "install ok installed" ]; then
    [ "$ifaces" != "lo " ] || die "janus is not installed, and apt has no network in this namespace:
    run 'scripts/janus-run.sh --setup' outside it first"
    echo "janus-run: installing janus" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    # policy-rc.d/systemd may refuse to start the packaged service; we never use it.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends janus
fi
JANUS="$(command -v janus || true)"
[ -n "$JANUS" ] || die "no 'janus' binary on PATH after installing the package"

# 2. The LD_PRELOAD shim.
SRC="$ROOT/scripts/janus-getifaddrs.c"
mkdir -p "$BUILD_DIR"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"; SO="$BUILD_DIR/janus-getifaddrs.so"
if [ ! -f "$SO" ] || [ "$SRC" -nt "$SO" ]; then
    command -v cc >/dev/null 2>&1 || die "no C compiler ('cc') to build $SO"
    cc -shared -fPIC -O2 -Wall -o "$SO.tmp" "$SRC" -ldl || die "building $SO failed"
    mv -f "$SO.tmp" "$SO"
fi
preload_err="$(LD_PRELOAD="$SO" /bin/true 2>&1 || true)"
[ -z "$preload_err" ] || die "$SO cannot be preloaded: $preload_err"
if [ "$SETUP_ONLY" = 1 ]; then
    echo "janus-run: ready ($("$JANUS" --help 2>&1 | head -1); shim $SO)" >&2
    exit 0
fi

# 3. The configuration.
CONF="$(cd "$CONF" 2>/dev/null && pwd)" || die "config folder not found"
for f in janus.jcfg janus.transport.http.jcfg janus.plugin.videoroom.jcfg; do
    [ -f "$CONF/$f" ] || die "missing $CONF/$f"
done
PLUGINS="$(sed -n 's/^[[:space:]]*plugins_folder[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$CONF/janus.jcfg")"
[ -f "$PLUGINS/libjanus_videoroom.so" ] \
    || die "no libjanus_videoroom.so in plugins_folder '$PLUGINS' (set it in $CONF/janus.jcfg for this architecture)"

# 4. The network namespace: only `lo`, up, and nothing on the HTTP port yet.
if [ "$ifaces" != "lo " ] && [ "${JANUS_ALLOW_HOST_NET:-0}" != 1 ]; then
    die "not in a loopback-only network namespace (interfaces: $ifaces); run inside
    unshare -n bash -c 'ip link set lo up; $0'"
fi
lo_addrs="$(ip -o addr show dev lo up 2>/dev/null || true)"
[[ "$lo_addrs" == *"inet 127.0.0.1"* ]] \
    || die "'lo' is down or has no 127.0.0.1 in this namespace: run 'ip link set lo up' first"
if (exec 3<>/dev/tcp/127.0.0.1/8088) 2>/dev/null; then
    die "127.0.0.1:8088 is already in use (another Janus in this namespace?)"
fi

echo "janus-run: $("$JANUS" --help 2>&1 | head -1); conf $CONF; LD_PRELOAD $SO" >&2
export LD_PRELOAD="$SO${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$JANUS" -F "$CONF" -C "$CONF/janus.jcfg" -o "$@"
