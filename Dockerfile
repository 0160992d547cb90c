# syntax=docker/dockerfile:1
#
# The driver image: every binary of cmd/ and mount-s3, for every component of the Helm chart.
#
#   /bin/scality-s3-csi-driver    node plugin (DaemonSet) and CSI controller (--mode=controller)
#   /bin/scality-csi-controller   Pod Reconciler (controller Deployment, pod mode)
#   /bin/scality-csi-mounter      Mountpoint Pods (pod mode; --mount-s3-path default below)
#   /bin/install-mp               init container: copies /mountpoint-s3/bin/* to the host
#   /mountpoint-s3/bin/scality-fuse-helper
#                                 systemd mode: mounts FUSE for a mount unit and hands the
#                                 connection to its mount-s3 (install-mp copies it to the host)
#   /mountpoint-s3/bin/           mount-s3 and the libraries it needs beyond glibc, found through
#                                 its RUNPATH $ORIGIN, so the same files run in the image (pod
#                                 mode) and on any glibc host (systemd mode)
#
# Build: make image (docker build --build-arg VERSION=...). tests/helm checks what this file
# packages (paths, build flags, build context) without a Docker engine.

ARG GO_VERSION=1.26
ARG DEBIAN_RELEASE=bookworm

# ---------------------------------------------------------------------------------------------
# Go binaries: static (CGO_ENABLED=0), stamped with the version, built for the target platform.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ENV CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH}
ENV GO_LDFLAGS="-s -w -X github.com/s3csi/s3-csi-driver/pkg/version.Version=${VERSION}"
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "${GO_LDFLAGS}" -o /out/scality-s3-csi-driver ./cmd/scality-s3-csi-driver
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "${GO_LDFLAGS}" -o /out/scality-csi-controller ./cmd/scality-csi-controller
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "${GO_LDFLAGS}" -o /out/scality-csi-mounter ./cmd/scality-csi-mounter
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "${GO_LDFLAGS}" -o /out/install-mp ./cmd/install-mp
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "${GO_LDFLAGS}" -o /out/scality-fuse-helper ./cmd/scality-fuse-helper

# ---------------------------------------------------------------------------------------------
# mount-s3: the released Mountpoint for Amazon S3 build of a pinned version, checked against a
# pinned SHA-256 before use. To move to another version, change MOUNTPOINT_VERSION and both
# checksums together (each release publishes a .asc signature next to the tarball, see
# docs/install.md). The release links libfuse.so.2 dynamically; it is bundled next to mount-s3
# (with libgcc_s) and the binary's RUNPATH set to $ORIGIN, so hosts need no FUSE 2 package.
# The 1.24.0 checksums below were taken from a public package recipe of that release and still
# have to be confirmed against AWS's signed tarballs (docs/install.md) before a first release.
FROM debian:${DEBIAN_RELEASE}-slim AS mountpoint
ARG TARGETARCH
ARG MOUNTPOINT_VERSION=1.24.0
ARG MOUNTPOINT_SHA256_AMD64=a99bea20510eaabaf9d7cbfe95ab221a11005cacaa77cfc311a2912bbbdbfd72
ARG MOUNTPOINT_SHA256_ARM64=9f97026c9feabd0e4d128206f1846ee317e6c4f21846914dfe4268d110c892c4
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl libfuse2 patchelf \
    && rm -rf /var/lib/apt/lists/*
RUN set -eu; \
    case "${TARGETARCH}" in \
      amd64) arch=x86_64; sum="${MOUNTPOINT_SHA256_AMD64}" ;; \
      arm64) arch=arm64; sum="${MOUNTPOINT_SHA256_ARM64}" ;; \
      *) echo "no mount-s3 build for ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    url="https://s3.amazonaws.com/mountpoint-s3-release/${MOUNTPOINT_VERSION}/${arch}/mount-s3-${MOUNTPOINT_VERSION}-${arch}.tar.gz"; \
    curl -fsSL --retry 3 -o /tmp/mount-s3.tar.gz "${url}"; \
    echo "${sum}  /tmp/mount-s3.tar.gz" | sha256sum -c -; \
    mkdir -p /tmp/mount-s3 /mountpoint-s3/bin; \
    tar -xzf /tmp/mount-s3.tar.gz -C /tmp/mount-s3; \
    install -m 0755 /tmp/mount-s3/bin/mount-s3 /mountpoint-s3/bin/mount-s3; \
    libdir="/usr/lib/$(uname -m)-linux-gnu"; \
    for lib in libfuse.so.2 libgcc_s.so.1; do install -m 0755 "$(readlink -f "${libdir}/${lib}")" "/mountpoint-s3/bin/${lib}"; done; \
    patchelf --set-rpath '$ORIGIN' /mountpoint-s3/bin/mount-s3; \
    for f in LICENSE NOTICE THIRD_PARTY_LICENSES; do if [ -f "/tmp/mount-s3/$f" ]; then install -m 0644 "/tmp/mount-s3/$f" "/mountpoint-s3/$f"; fi; done; \
    /mountpoint-s3/bin/mount-s3 --version; \
    rm -rf /tmp/mount-s3 /tmp/mount-s3.tar.gz

# ---------------------------------------------------------------------------------------------
# The image: glibc and the CA certificates (mount-s3, the controller's S3 client), no shell.
# It runs as root: the node plugin needs it; the chart runs the controller and the Mountpoint
# Pods as non-root users.
FROM gcr.io/distroless/base-debian12 AS image
COPY --from=build /out/scality-s3-csi-driver /out/scality-csi-controller /out/scality-csi-mounter /out/install-mp /bin/
COPY --from=mountpoint /mountpoint-s3/ /mountpoint-s3/
COPY --from=build /out/scality-fuse-helper /mountpoint-s3/bin/
ENTRYPOINT ["/bin/scality-s3-csi-driver"]
