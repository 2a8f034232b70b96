#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and run Minato (idempotent):
# pkg-config and the -dev packages of libnice, OpenSSL, usrsctp (WebRTC data channels) and hiredis (the cluster store's Redis
# client, MinatoCluster), then libsrtp2 built from Debian's source package on OpenSSL
# (scripts/build-libsrtp.sh; cached after the first run). Needs root (or sudo). A Redis server is not needed to build; the
# tests that run one get Debian's redis-server from scripts/interop-setup.sh.
# Recording runs GStreamer's gst-launch-1.0 (gstreamer1.0-tools) with the base, good (rtpbin, RTP
# depayloaders, webmmux/matroskamux) and bad (opusparse, h264parse) plugins; playing a file reads what
# it holds with gst-discoverer-1.0 (gstreamer1.0-plugins-base-apps).
# Release builds link Foundation statically (scripts/release-build.sh); FoundationNetworking,
# which the load generator minato-bench uses, then links libcurl (libcurl4-openssl-dev).
# The Swift toolchain itself is expected on PATH (swift 6.1 or newer).
set -euo pipefail
need=()
for pkg in pkg-config libnice-dev libssl-dev libhiredis-dev libusrsctp-dev gstreamer1.0-tools gstreamer1.0-plugins-base \
           gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-base-apps libcurl4-openssl-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if ! command -v swift >/dev/null 2>&1; then
    echo "install-deps: no 'swift' on PATH; install the Swift 6.1+ toolchain (swift.org) first" >&2
    exit 1
fi
bash "$(dirname "$0")/build-libsrtp.sh"
