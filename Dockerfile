# nodeid-init as a container image, for people who build their own:
#
#   docker build --build-arg VERSION=0.1.0 -t nodeid-init:0.1.0 .
#
# make image (cmd/nodeid-image, docs/image.md) builds the image without Docker
# (go-containerregistry) with the same layout; keep the two in step:
#   /usr/local/bin/nodeid-init   static binary (CGO_ENABLED=0, -trimpath)
#   user 65532:65532             non-root ("nonroot" in distroless)
#   /var/lib/nodeid              owned by 65532, for the lease, env and hand-off files
#   CA certificates              /etc/ssl/certs/ca-certificates.crt (from the base image)
# How it is used on ECS, and how to add the binary to a broker image: docs/ecs.md.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/usr/local/bin/nodeid-init ./cmd/nodeid-init \
    && mkdir -p /out/var/lib/nodeid

# distroless static: CA certificates, /etc/passwd with nonroot (65532), /tmp; no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/usr/local/bin/nodeid-init /usr/local/bin/nodeid-init
# The destination does not exist yet, so --chown applies to the directory itself.
COPY --from=build --chown=65532:65532 /out/var/lib/nodeid /var/lib/nodeid
# On ECS a task-local bind mount at a VOLUME path starts with the image's
# content and ownership, so a non-root nodeid-init can write there.
VOLUME ["/var/lib/nodeid"]
LABEL org.opencontainers.image.title="nodeid-init" \
      org.opencontainers.image.source="https://github.com/nodeid/nodeid" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nodeid-init"]
