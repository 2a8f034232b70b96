#!/usr/bin/env bash
# Builds Debian's own libsrtp2 source package with OpenSSL as its crypto backend (Debian's binary
# package uses NSS: ~4x the CPU per AES-GCM packet, ~6x per AES-CM + HMAC-SHA1 packet, and five
# mallocs in every srtp_protect) into a private static prefix that Minato links:
#   $LIBSRTP_OPENSSL_PREFIX (default ~/.cache/minato/libsrtp2-openssl)
#     lib/libsrtp2-openssl.a, include/srtp2/*.h, lib/pkgconfig/libsrtp2-openssl.pc
# The library and its .pc have their own name so that SwiftPM can never pick Debian's libsrtp2
# (shared or static) instead: without PKG_CONFIG_PATH pointing here the link fails.
# Idempotent and cached: a second run with the same recipe returns at once (no apt, no make).
# Needs root (or sudo) the first time: it may add a deb-src entry for the machine's own suite
# and install dpkg-dev, gcc, make, patch, libssl-dev, libgcrypt20-dev, nettle-dev and pkg-config.
set -euo pipefail
PREFIX="${LIBSRTP_OPENSSL_PREFIX:-$HOME/.cache/minato/libsrtp2-openssl}"
CONFIGURE_FLAGS="--enable-openssl --disable-pcap"
# Two changes of Minato's to the packet path (scripts/libsrtp/, each measured in
# docs/architecture.md "Where one core's time goes"): SSRC lookup in a dense array instead of a
# list threaded through the streams (libsrtp's SRTP_NO_STREAM_LIST hook), and the GCM IV
# length set once per key instead of before every packet. One addition: AES-GCM and AES-CM on
# libgcrypt and HMAC-SHA1 on nettle (minato_gcrypt.c), which the server puts in place of
# OpenSSL's when it starts (so the library links libgcrypt and nettle as well as libcrypto).
OURS="$(cd "$(dirname "$0")" && pwd)/libsrtp"
RECIPE="minato-libsrtp 2: $CONFIGURE_FLAGS; $(cat "$OURS"/* | sha256sum | cut -c1-16)"   # changes with this script's output
if [ -f "$PREFIX/.recipe" ] && [ "$(cat "$PREFIX/.recipe")" = "$RECIPE" ] \
   && [ -f "$PREFIX/lib/libsrtp2-openssl.a" ] && [ -f "$PREFIX/lib/pkgconfig/libsrtp2-openssl.pc" ]; then
    exit 0
fi

SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
need=()
for pkg in dpkg-dev gcc make patch libssl-dev libgcrypt20-dev nettle-dev pkg-config; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
updated=0
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    . /etc/os-release
    echo "build-libsrtp: adding a deb-src entry for Debian ${VERSION_CODENAME} (/etc/apt/sources.list.d/minato-src.sources)" >&2
    $SUDO tee /etc/apt/sources.list.d/minato-src.sources >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME}
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    $SUDO apt-get update -qq
    updated=1
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "build-libsrtp: installing ${need[*]}" >&2
    [ $updated = 1 ] || $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

work="$(mktemp -d /tmp/minato-libsrtp.XXXXXX)"
trap 'rm -rf "$work"' EXIT
chown _apt "$work" 2>/dev/null || chmod 777 "$work"   # apt-get source downloads as user _apt
cd "$work"
# The source package exactly as Debian builds it (orig tarball + debian/patches applied).
apt-get source -qq libsrtp2 >/dev/null
src="$(find . -maxdepth 1 -type d -name 'libsrtp2-*' | head -1)"
version="$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)"
echo "build-libsrtp: building Debian libsrtp2 $version with OpenSSL into $PREFIX" >&2
cd "$src"
patch -s -p1 < "$OURS/gcm-ivlen-at-init.patch"
cp "$OURS/minato_stream_list.c" "$OURS/minato_gcrypt.c" srtp/
./configure -q $CONFIGURE_FLAGS --prefix="$PREFIX.tmp" CPPFLAGS="-DSRTP_NO_STREAM_LIST" LIBS="-lgcrypt -lnettle" >/dev/null
make -s -j"$(nproc)" srtpobj="srtp/srtp.o srtp/minato_stream_list.o srtp/minato_gcrypt.o" libsrtp2.a test >/dev/null
# libsrtp's own known-answer self-tests of the packet path and of every cipher.
test/srtp_driver -v >/dev/null
crypto/test/cipher_driver -v >/dev/null
rm -rf "$PREFIX.tmp"
make -s srtpobj="srtp/srtp.o srtp/minato_stream_list.o srtp/minato_gcrypt.o" install >/dev/null
mv "$PREFIX.tmp/lib/libsrtp2.a" "$PREFIX.tmp/lib/libsrtp2-openssl.a"
rm -rf "$PREFIX.tmp/lib/pkgconfig"
mkdir -p "$PREFIX.tmp/lib/pkgconfig"
# Relocatable (${pcfiledir}); libcrypto, libgcrypt and nettle in Requires, since SwiftPM ignores Libs.private.
cat > "$PREFIX.tmp/lib/pkgconfig/libsrtp2-openssl.pc" <<PC
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: libsrtp2-openssl
Description: Debian's libsrtp2 ${version} source package built with ${CONFIGURE_FLAGS}, static
Version: ${version%%-*}
Requires: libcrypto libgcrypt nettle
Cflags: -I\${includedir}
Libs: -L\${libdir} -lsrtp2-openssl
PC
echo "$RECIPE" > "$PREFIX.tmp/.recipe"
echo "debian-source=$version" >> "$PREFIX.tmp/.recipe.info"
rm -rf "$PREFIX"
mkdir -p "$(dirname "$PREFIX")"
mv "$PREFIX.tmp" "$PREFIX"
