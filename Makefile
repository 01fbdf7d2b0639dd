# fdl-mirror: make demo, make test, make fuzz, make bench.
GO      ?= go
BIN     := bin
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# DuckDB is linked through cgo.
export CGO_ENABLED := 1

.PHONY: all build demo test test-servers vet fmt-check fuzz bench clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/fdl-mirror ./cmd/fdl-mirror
	$(GO) build -o $(BIN)/fdl-gen ./cmd/fdl-gen

# The real servers the tests run against (Versity S3 Gateway, fake-gcs-server),
# built once at pinned versions into .cache/bin; and Chromium and promtool
# (Debian packages chromium, prometheus) installed with apt when missing.
test-servers:
	sh scripts/install-test-servers

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

test: test-servers fmt-check vet
	$(GO) test -count=1 -timeout 30m $(PKGS)

# Every fuzz target, one after the other, for FUZZTIME each (go test fuzzes
# one target at a time). Their seed corpora (testdata/fuzz/) run as plain
# tests in `make test`; an input that fails is written there by go test and
# becomes a seed once the bug is fixed.
FUZZTIME  ?= 30s
FUZZFLAGS ?=
fuzz:
	@set -e; for f in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz'); do \
	  pkg=./$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "== $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg; \
	  done; \
	done

# A sample repository, generated with DuckDB by the project's own generator,
# mirrored and verified; nothing outside ./demo is touched.
demo: build
	sh scripts/demo

bench: build
	sh scripts/bench

clean:
	rm -rf $(BIN) demo
