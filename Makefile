# The two commands (README): `make run` and `make test`. Both install what is missing first.
SWIFT ?= swift

.PHONY: run test deps build unit interop clean

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

clean:
	rm -rf .build artifacts
