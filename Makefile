# The two commands (README): `make run` and `make test`. Both install what is missing first.
SWIFT ?= swift

FUZZ_SECONDS ?= 600

.PHONY: run test deps build unit interop sanitize fuzz bench-micro ci clean

deps:
	bash scripts/install-deps.sh

build: deps
	$(SWIFT) build

## Installs what is missing, builds, and runs the server on embedded defaults (127.0.0.1:7880).
run: build
	.build/debug/minato serve

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

## The wire and engine unit tests under AddressSanitizer and ThreadSanitizer (the sanitize/
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

## What CI runs: the README's test command, then the sanitizers and 60 s of each fuzzer.
ci: test sanitize
	$(MAKE) fuzz FUZZ_SECONDS=60

clean:
	rm -rf .build bench/.build sanitize/.build-asan sanitize/.build-tsan fuzz/.build artifacts
