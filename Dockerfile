# fdl-mirror image: `docker build -t fdl-mirror .`
# Runs as an unprivileged user; the default command is the daemon on
# /etc/fdl-mirror/config.yaml (mount it), and any fdl-mirror command can be
# given instead: `docker run --rm fdl-mirror sync --config /etc/fdl-mirror/config.yaml`.

ARG GO_VERSION=1.26.8

# Build: DuckDB comes in through cgo (duckdb-go's prebuilt static library), so
# the build needs a C and C++ toolchain, which the golang image has. The tag
# leaves out gRPC DirectPath modules the GCS backend never uses (Makefile).
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -buildvcs=false -tags disable_grpc_modules \
        -ldflags "-s -w -X main.version=${VERSION} -linkmode external -extldflags '-static'" \
        -o /out/ ./cmd/fdl-mirror ./cmd/fdl-mirror-catalog-reader \
 && /out/fdl-mirror version

# Runtime: Debian, slimmed, with CA certificates for HTTPS, S3 and GCS and
# time zones. Both binaries are linked statically (Makefile's STATIC).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 fdl-mirror \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/fdl-mirror \
        --create-home --shell /usr/sbin/nologin fdl-mirror
# The catalog reader beside fdl-mirror, which starts it once per catalog.
COPY --from=build /out/fdl-mirror /out/fdl-mirror-catalog-reader /usr/local/bin/
COPY config.example.yaml /usr/share/doc/fdl-mirror/config.example.yaml
USER 65532:65532
WORKDIR /var/lib/fdl-mirror
# DuckDB opens catalogs from temporary files; with a read-only root
# filesystem, mount a writable volume (emptyDir) at /tmp.
ENV TMPDIR=/tmp
EXPOSE 9464
ENTRYPOINT ["fdl-mirror"]
CMD ["daemon", "--config", "/etc/fdl-mirror/config.yaml"]
