#!/usr/bin/env bash
# Idempotent setup for the interop suite (Tests/interop: aiortc peers and Chromium pages):
#  - `ip` (iproute2) for the loopback-only namespace runner,
#  - Debian's `chromium` (and DejaVu fonts) for the Playwright browser tests,
#  - Debian's `nftables` (`nft`): the loss tests and `make bench-loss` drop packets with it,
#  - Debian's `firefox-esr`: the second browser engine (Tests/interop/firefox.py drives it through
#    Marionette with PyPI `marionette-driver`; no geckodriver),
#  - the WHIP/WHEP peers (Tests/interop/whip_peers.py): `simple-whip-client` (whip-client; pulls
#    GStreamer's base/good/bad/ugly/libav plugins and gstreamer1.0-nice), GStreamer's Python
#    bindings for /usr/bin/python3 (python3-gi and the Gst, GstWebRTC, GstSdp, Nice typelibs) for
#    the webrtcbin WHEP player, and a C compiler for whip-client's libgupnp-igd stub,
#  - Debian's `redis-server` for the cluster store: the MinatoClusterTests unit tests start their
#    own on a unix socket in a temporary directory, the cluster interop tests theirs in a network
#    namespace of its own (the system Redis service the package would start is stopped and
#    disabled, see below),
#  - Debian's `coturn` (`turnserver`): the TURN server of test_turn.py, which starts its own in a
#    network namespace (Minato embeds none; the system coturn service is left disabled, see below),
#  - `gstreamer1.0-tools` (gst-launch-1.0, the recorder the server runs) and Debian's `ffmpeg`
#    (ffprobe and ffmpeg check the recorded files in test_recording.py),
#  - the venv .venv-interop/ at the repo root with Tests/interop/requirements.txt installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-interop"
REQ="$ROOT/Tests/interop/requirements.txt"

if ! command -v ip >/dev/null 2>&1; then
    echo "interop-setup: installing iproute2" >&2
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq iproute2
    else sudo apt-get update -qq && sudo apt-get install -y -qq iproute2; fi
fi
# Debian's Chromium for the browser tests (Playwright drives /usr/bin/chromium; its own browser
# download is never used). Fonts: DejaVu, so the demo screenshot has real glyphs.
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
dpkg-query -W -f='${Status}' fonts-dejavu-core 2>/dev/null | grep -q "ok installed" || need+=(fonts-dejavu-core)
# nftables: random/per-port UDP loss inside the test namespace (Tests/interop/impair.py).
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
# Firefox ESR: the browser tests' second engine (VP8 only: OpenH264 is a download, never fetched).
[ -x /usr/bin/firefox-esr ] || need+=(firefox-esr)
# WHIP/WHEP peers: simple-whip-client and a GStreamer webrtcbin player run by /usr/bin/python3.
for pkg in simple-whip-client gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad \
           gstreamer1.0-nice gstreamer1.0-libav python3-gi gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0 \
           gir1.2-gst-plugins-bad-1.0 gir1.2-nice-0.1 gstreamer1.0-tools ffmpeg; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
command -v cc >/dev/null 2>&1 || need+=(gcc)
# Redis for the cluster tests (they run /usr/bin/redis-server themselves).
installing_redis=0
[ -x /usr/bin/redis-server ] || { need+=(redis-server); installing_redis=1; }
# coturn for the TURN tests (they run /usr/bin/turnserver themselves).
installing_coturn=0
[ -x /usr/bin/turnserver ] || { need+=(coturn); installing_coturn=1; }
if [ "${#need[@]}" -gt 0 ]; then
    echo "interop-setup: installing ${need[*]}" >&2
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"
    else sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends "${need[@]}"; fi
fi
# Installing Debian's redis-server starts and enables a system Redis (TCP port 6379, pid file
# /run/redis/redis-server.pid). Nothing here uses it: the tests start their own servers, and a
# stray Redis on 6379 would only hide a test that reached for the wrong one. So when
# this run installed the package, stop that service and keep it from starting at boot. A Redis that
# was there before this script ran is left alone.
if [ "$installing_redis" = 1 ]; then
    as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
    if [ -d /run/systemd/system ]; then
        as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
    else
        as_root service redis-server stop >/dev/null 2>&1 || true
        as_root update-rc.d redis-server disable >/dev/null 2>&1 || true
    fi
    # Whatever the init system did, the package's own daemon is the one in its pid file.
    pidfile=/run/redis/redis-server.pid
    if [ -s "$pidfile" ]; then
        pid="$(cat "$pidfile")"
        if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
            echo "interop-setup: stopping the system redis-server (pid $pid) the package started" >&2
            as_root kill "$pid" || true
        fi
    fi
fi
# Debian's coturn ships a service that is off under sysvinit (/etc/default/coturn) but enabled,
# and started, under systemd. The tests start their own turnserver; a system one would only be
# an open TURN server on this machine. So when this run installed the package, keep the service
# stopped and disabled (its unit's symlink is made even where systemd does not run).
if [ "$installing_coturn" = 1 ]; then
    as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
    if [ -d /run/systemd/system ]; then
        as_root systemctl disable --now coturn >/dev/null 2>&1 || true
    else
        as_root update-rc.d coturn disable >/dev/null 2>&1 || true
        as_root rm -f /etc/systemd/system/multi-user.target.wants/coturn.service
    fi
fi
if ! command -v unshare >/dev/null 2>&1; then
    echo "interop-setup: 'unshare' (util-linux) is required" >&2; exit 1
fi

PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "interop-setup: creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi

# Skip pip when every requirement is already satisfied (pip's resolver check, offline).
if "$VENV/bin/python" - "$REQ" <<'PYEOF'
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    from packaging.requirements import Requirement
except ImportError:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        sys.exit(1)
ok = True
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    r = Requirement(line)
    try:
        v = version(r.name)
    except PackageNotFoundError:
        ok = False; break
    if not r.specifier.contains(v, prereleases=True):
        ok = False; break
sys.exit(0 if ok else 1)
PYEOF
then
    echo "interop-setup: requirements already satisfied in $VENV" >&2
else
    echo "interop-setup: installing $REQ" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
fi
"$VENV/bin/python" -c 'import aiortc, av, aioice, websockets, pytest, pytest_timeout, playwright.sync_api, marionette_driver.marionette; from importlib.metadata import version; print("interop-setup: ok, aiortc", aiortc.__version__, "av", av.__version__, "playwright", version("playwright"))'
/usr/bin/chromium --version 2>/dev/null | sed 's/^/interop-setup: /' || true
MOZ_HEADLESS=1 MOZ_DISABLE_NONLOCAL_CONNECTIONS=1 /usr/bin/firefox-esr --version 2>/dev/null | sed 's/^/interop-setup: /' || true
/usr/bin/python3 -c 'import gi; [gi.require_version(n, v) for n, v in (("Gst", "1.0"), ("GstWebRTC", "1.0"), ("GstSdp", "1.0"), ("Nice", "0.1"))]; from gi.repository import Gst; Gst.init(None); assert Gst.ElementFactory.find("webrtcbin") and Gst.ElementFactory.find("nicesrc"); print("interop-setup:", Gst.version_string(), "with webrtcbin and nicesrc")'
command -v whip-client >/dev/null
[ -x /usr/bin/turnserver ] && echo "interop-setup: turnserver (coturn $(dpkg-query -W -f='${Version}' coturn))"
echo "interop-setup: whip-client (simple-whip-client $(dpkg-query -W -f='${Version}' simple-whip-client))"
