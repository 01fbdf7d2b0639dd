# fdl-mirror: make demo, make check, make test, make fuzz, make bench.
GO      ?= go
BIN     := bin
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# DuckDB is linked through cgo.
export CGO_ENABLED := 1
# cloud.google.com/go/storage links gRPC's xDS and RLS balancers, for
# DirectPath, unless built with this tag. The GCS backend never makes a
# gRPC client (it speaks the JSON API over HTTP), and without them every
# process of fdl-mirror starts 101 package initializers lighter: `version`
# in about 40 ms instead of 60 (BENCHMARKS.md). Exported, so that every go
# command of make (build, vet, test, the binaries tests build) uses it.
export GOFLAGS := $(strip $(GOFLAGS) -tags=disable_grpc_modules)

.PHONY: all build install demo check test test-servers vet fmt-check tidy-check staticcheck fuzz bench clean

all: build

# Both linked statically (glibc, libstdc++ and DuckDB in the binary): a
# dynamic one spends about 12 ms of every start in the loader, resolving
# libstdc++'s symbols for DuckDB's code, and a reader starts once per
# catalog. `fdl-mirror version` 40 -> 30 ms, a no-op sync of 10 versions
# 55 -> 37 ms, its full copy 1.01 -> 0.86 s (BENCHMARKS.md). The link
# prints glibc's warnings for static binaries (dlopen, getpwuid,
# getaddrinfo: NSS); they are expected: a static glibc has its files and
# dns sources built in, and the reader calls none of them. (ld's
# --no-warnings would hide them, and a failed link's errors with them.)
# cmd/fdl-mirror's tests and the Dockerfile link alike.
STATIC  := -linkmode external -extldflags '-static'

# fdl-mirror and its catalog reader, which it starts from beside itself
# (install both in one folder; without the reader it re-executes itself,
# slower to start), and the generator.
build:
	$(GO) build -ldflags "-X main.version=$(VERSION) $(STATIC)" -o $(BIN)/ ./cmd/fdl-mirror ./cmd/fdl-mirror-catalog-reader
	$(GO) build -o $(BIN)/fdl-gen ./cmd/fdl-gen

PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/fdl-mirror $(BIN)/fdl-mirror-catalog-reader $(DESTDIR)$(PREFIX)/bin/

# The real servers the tests run against (Versity S3 Gateway, fake-gcs-server)
# and staticcheck, built once at pinned versions into .cache/bin; and Chromium and promtool
# (Debian packages chromium, prometheus) installed with apt when missing.
test-servers:
	sh scripts/install-test-servers

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go.mod and go.sum say exactly what the code imports: a diff fails.
tidy-check:
	$(GO) mod tidy -diff

staticcheck: test-servers
	.cache/bin/staticcheck $(PKGS)

# The edit loop: no servers to install or start (tests that need Versity
# or fake-gcs-server skip under -short), no race detector.
check: fmt-check vet
	$(GO) test -short -count=1 $(PKGS)

# Everything, with the race detector: the engine copies files from many
# goroutines, and a race is a bug even where no test has failed yet. The
# timeout (per package) stays inside CI's 60 minutes. Three packages at
# once on two cores, not two: several (the lock's leases, the GCS and S3
# servers, the daemon) mostly wait, and with two at a time the full run
# used 76 % of two cores (24.5 CPU-minutes in 16.1 minutes).
test: test-servers fmt-check vet tidy-check staticcheck
	$(GO) test -race -count=1 -p 3 -timeout 45m $(PKGS)

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
