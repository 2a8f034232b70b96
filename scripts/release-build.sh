#!/usr/bin/env bash
# Builds the given products of the root package in release mode, the way `make run` and the
# benchmarks run them: the Swift runtime and Foundation linked in statically, linked by lld
# with packed relative relocations (DT_RELR) and without exporting every public symbol.
# Idle RSS of `minato serve` on embedded defaults (2-core VM, Debian 12; benchmark,
# /proc/<pid>/status after 4 s): 50 MB with Swift's defaults, 39 MB with these flags; nearly all of
# it is code mapped from the binary, not heap (RssAnon about 5 MB either way).
#   scripts/release-build.sh minato [minato-bench ...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/libsrtp-env.sh"   # libsrtp2 on OpenSSL (scripts/build-libsrtp.sh)
cd "$ROOT"
FLAGS=(-c release --static-swift-stdlib -Xswiftc -use-ld=lld
       -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic)
for product in "$@"; do
    swift build "${FLAGS[@]}" --product "$product"
done
