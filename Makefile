# The two commands (README): `make run` and `make test`. Both install what is missing first.
SWIFT ?= swift
# libsrtp2 on OpenSSL, built by scripts/build-libsrtp.sh (make deps); pkg-config finds it here.
LIBSRTP_OPENSSL_PREFIX ?= $(HOME)/.cache/minato/libsrtp2-openssl
export LIBSRTP_OPENSSL_PREFIX
export PKG_CONFIG_PATH := $(LIBSRTP_OPENSSL_PREFIX)/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))

FUZZ_SECONDS ?= 600

.PHONY: run test deps build unit interop sanitize fuzz bench-micro bench-quick bench-full bench-smoke bench-capacity bench-loss bench-cluster bench-recovery ci clean

deps:
	bash scripts/install-deps.sh

build: deps
	$(SWIFT) build

## Installs what is missing, builds in release mode (a debug SFU costs several times more CPU
## per packet; scripts/release-build.sh links the Swift runtime statically, which lowers idle
## RSS), and runs the server on embedded defaults (127.0.0.1:7880).
run: deps
	bash scripts/release-build.sh minato
	.build/release/minato serve

## Installs what is missing and passes the whole suite: unit tests, then the aiortc interop
## suite inside a loopback-only network namespace (needs root for `unshare -n`).
test: build
	bash scripts/interop-setup.sh
	$(SWIFT) test
	bash scripts/interop.sh

unit: build
	$(SWIFT) test

interop: build
	bash scripts/interop-setup.sh
	bash scripts/interop.sh

## The wire, engine and transport unit tests under AddressSanitizer and ThreadSanitizer (the sanitize/
## package builds only those targets, so the server's dependencies are not instrumented).
sanitize: deps
	cd sanitize && LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp $(SWIFT) test --sanitize=address --scratch-path .build-asan
	cd sanitize && $(SWIFT) test --sanitize=thread --scratch-path .build-tsan

## Every libFuzzer target for FUZZ_SECONDS each (default 600), in a loopback-only namespace.
fuzz: deps
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

## Micro benchmarks of the packet path (release build; fails if a packet path mallocs).
bench-micro: deps
	bash scripts/bench-micro.sh

## The RTP throughput benchmark, Minato and Janus in the same run (bench/run.sh; each server in
## its own loopback-only namespace). Quick: fan-out 1->10 (about 2 minutes after the build);
## full: the whole matrix. Results: bench/results/<quick|full>.{json,md,png}.
bench-quick: deps
	bash bench/run.sh quick

bench-full: deps
	bash bench/run.sh full

## 10 s of fan-out 1->10 against Minato only; fails on >5% loss or no packets (CI).
bench-smoke: deps
	bash bench/run.sh smoke

## Capacity of one server core, Minato and Janus: rooms of 1 publisher and 99 subscribers added
## until the pinned core saturates, video then audio (bench/capacity.sh; about 20 minutes; 2 CPUs).
## Results: bench/results/capacity.{json,md,png}.
bench-capacity: deps
	bash bench/capacity.sh

## Video under random UDP loss (0, 1, 2, 5%, both legs; nftables), an aiortc VP8 pair through
## Minato and through Janus in the same run, 15 s per level, each server in its own loopback-only
## namespace (bench/loss.sh; about 4 minutes). Server: $MINATO_BIN, else .build/release/minato if
## present, else .build/debug/minato. Results: bench/results/loss.{json,md,png}.
bench-loss: deps
	bash bench/loss.sh

## Cluster latencies: Redis and 3 nodes, each in its own network namespace (Tests/interop/cluster.py),
## aiortc clients: join -> first frame through the hosting node vs another, relayed vs direct
## request latency, host SIGKILL -> decoding again (5 runs), Redis commands/s at rest (bench/cluster.py;
## a few minutes; needs root for `unshare -n`). Server: $MINATO_BIN, else .build/release/minato if
## present, else .build/debug/minato. BENCH_CLUSTER_ARGS=--quick: 20 joins, 1 kill run.
## Results: bench/results/cluster.{json,md}; logs in artifacts/bench/cluster/.
## Then rooms across nodes (bench/cascade.py): a 1 -> 300 broadcast over three nodes with
## cluster.cascade off and on (minato-bench cascade beside the server binary): each node's egress,
## CPU per forwarded packet, loss, latency, keyframe time, relay setup (bench/results/cascade.{json,md};
## BENCH_CASCADE_ARGS=--quick: 10 subscribers per node).
bench-cluster: build
	bash scripts/interop-setup.sh
	unshare -n sh -c 'ip link set lo up; exec .venv-interop/bin/python bench/cluster.py "$$@"' bench-cluster $(BENCH_CLUSTER_ARGS)
	unshare -n sh -c 'ip link set lo up; exec .venv-interop/bin/python bench/cascade.py "$$@"' bench-cascade $(BENCH_CASCADE_ARGS)

## The browser SDK recovering by itself (Tests/interop/test_recovery_browser.py, RECOVERY_RUNS
## times each, default 10): a Chromium page's address replaced mid-call (ICE restarts) and TCP to
## the signaling port dropped for 8 s (reconnect, takeover, replay), in a loopback-only namespace
## (bench/recovery.sh; needs root). Prints time until decoding resumed and frames lost, p50/max.
## Server: $MINATO_BIN, else .build/release/minato if present, else .build/debug/minato.
## Results: bench/results/recovery.{json,md}.
bench-recovery: build
	bash bench/recovery.sh

## What CI runs: the README's test command, the sanitizers, 20 s of each fuzzer, the micro
## benchmarks' zero-allocation check and a 10 s load smoke run.
ci: test sanitize
	$(MAKE) fuzz FUZZ_SECONDS=20
	$(MAKE) bench-micro
	$(MAKE) bench-smoke

clean:
	rm -rf .build bench/.build sanitize/.build-asan sanitize/.build-tsan fuzz/.build .build-janus artifacts
