# syntax=docker/dockerfile:1
# The chatd image: a static binary on distroless, running as an unprivileged user.
#   docker build -t chatd .
# docker-compose.yml builds and runs three of these behind nginx.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Pure Go throughout (the embedded store's SQLite is modernc.org/sqlite), so CGO is off and the
# binary runs on an image with no libc. probe is the health check: distroless has no curl.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/chatd ./cmd/chatd && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/probe ./deploy/probe && \
    mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/chatd /out/probe /usr/local/bin/
# The data directory is used only when chatd embeds its store and NATS (no CHAT_MONGO_URI or
# CHAT_NATS_URL): for trying the image alone, not for a deployment.
COPY --from=build --chown=nonroot:nonroot /out/data /data
ENV CHAT_ADDR=:8080 \
    CHAT_DATA_DIR=/data
USER nonroot:nonroot
EXPOSE 8080
# Ready means NATS and the store answer; a node that is not ready gets no new connections.
HEALTHCHECK --interval=5s --timeout=4s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/probe", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/chatd"]
