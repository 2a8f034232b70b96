#!/usr/bin/env bash
# Instructions and L1 data-cache misses per srtp_protect in the libsrtp2 that Minato links
# (scripts/build-libsrtp.sh), counted by cachegrind: deterministic, unlike timings on a shared VM.
# Each case runs R and 2R rounds; the difference divided by R x sessions x streams is one call.
#   bench/srtp-protect.sh        (needs valgrind and gcc; about 2 minutes)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/libsrtp-env.sh"
command -v valgrind >/dev/null || { echo "srtp-protect: valgrind is missing (apt-get install valgrind)" >&2; exit 2; }
PREFIX="${LIBSRTP_OPENSSL_PREFIX:-$HOME/.cache/minato/libsrtp2-openssl}"
out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT
gcc -O2 -I"$PREFIX/include" -o "$out/srtp-protect" "$ROOT/bench/srtp-protect.c" "$PREFIX/lib/libsrtp2-openssl.a" -lcrypto -lgcrypt -lnettle
count() {   # sessions streams size rounds [cm] -> "instructions d1misses"
    valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file=/dev/null "$out/srtp-protect" "$@" 2>&1 \
        | awk '/I *refs:/ {gsub(",", "", $4); i=$4} /D1 *misses:/ {gsub(",", "", $4); d=$4} END {print i, d}'
}
R=20
printf '| sessions x streams | packet | profile | instructions per protect | L1d misses per protect |\n|---|---:|---|---:|---:|\n'
for c in "1 1 1200" "1 1 1200 gcrypt" "1 1 100" "1 1 100 gcrypt" "50 5 1200" "50 5 1200 gcrypt" "500 5 100" "500 5 100 gcrypt" "500 1 100" "500 1 100 gcrypt" "50 1 1200 cm" "50 1 1200 cm-gcrypt"; do
    set -- $c
    read -r i1 d1 < <(count "$1" "$2" "$3" "$R" ${4:-})
    read -r i2 d2 < <(count "$1" "$2" "$3" "$((2 * R))" ${4:-})
    calls=$(( R * $1 * $2 ))
    awk -v s="$1 x $2" -v z="$3" -v p="${4:-gcm}" -v di=$((i2 - i1)) -v dd=$((d2 - d1)) -v n=$calls \
        'BEGIN {printf "| %s | %s B | %s | %.0f | %.2f |\n", s, z, (p == "cm" ? "AES-CM + HMAC-SHA1, OpenSSL" : p == "cm-gcrypt" ? "AES-CM + HMAC-SHA1, libgcrypt + nettle" : p == "gcrypt" ? "AES-GCM-128, libgcrypt" : "AES-GCM-128, OpenSSL"), di / n, dd / n}'
done
# The same calls natively, timed (wall clock, so they move with the machine's load; the median of
# five runs): what the libraries' VAES and SHA-extension paths, invisible under valgrind, give.
printf '\n| sessions x streams | packet | profile | ns per protect (native, median of 5) |\n|---|---:|---|---:|\n'
for c in "50 5 1200 gcm" "50 5 1200 gcrypt" "500 5 100 gcm" "500 5 100 gcrypt" "50 1 1200 cm" "50 1 1200 cm-gcrypt"; do
    set -- $c
    ns=$(for i in 1 2 3 4 5; do "$out/srtp-protect" "$1" "$2" "$3" 2000 "$4" time; done | sort -n | sed -n 3p)
    awk -v s="$1 x $2" -v z="$3" -v p="$4" -v ns="$ns" \
        'BEGIN {printf "| %s | %s B | %s | %s |\n", s, z, (p == "cm" ? "AES-CM + HMAC-SHA1, OpenSSL" : p == "cm-gcrypt" ? "AES-CM + HMAC-SHA1, libgcrypt + nettle" : p == "gcrypt" ? "AES-GCM-128, libgcrypt" : "AES-GCM-128, OpenSSL"), ns}'
done

