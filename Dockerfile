# syntax=docker/dockerfile:1
# cbc-otel image: the static cbc-otel binary (whose `install` subcommand the
# Helm chart's init container runs to copy it into the pod), on distroless
# static, as the non-root user 65532.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t cbc-otel .
#
# The binary is the one `make build` makes: CGO_ENABLED=0, -trimpath,
# -ldflags "-s -w -X main.version=$VERSION", no VCS stamping, so the same
# source and VERSION give the same bytes.
ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cbc-otel ./cmd/cbc-otel

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="cbc-otel" \
      org.opencontainers.image.source="https://github.com/cbc-otel/cbc-otel" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/cbc-otel /usr/local/bin/
USER 65532:65532
EXPOSE 9478
ENTRYPOINT ["/usr/local/bin/cbc-otel"]
CMD ["serve", "--spool-dir=/cbc-otel/spool"]
