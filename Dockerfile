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
# mount-s3: the released Mountpoint for Amazon S3 build of a pinned version. Before anything is
# extracted, the tarball must carry AWS's detached signature by the pinned release key and match
# the pinned SHA-256 of its architecture; any mismatch fails the build. The release links
# libfuse.so.2 dynamically; it is bundled next to mount-s3 (with libgcc_s) and the binary's
# RUNPATH set to $ORIGIN, so hosts need no FUSE 2 package. tests/helm runs the verification step
# below against a key, a tarball and signatures it makes (TestDockerfileMountS3Verification).
#
# The signature, as AWS's install guide says to check it ("Verifying the signature of the
# Mountpoint for Amazon S3 package"): awslabs/mountpoint-s3@58817cab2fc3020a422d8aa14049a86b296f4498
# :doc/INSTALL.md, the same text as https://docs.aws.amazon.com/AmazonS3/latest/userguide/mountpoint-installation.html
# (#mountpoint-install-verify):
#   - the public key: https://s3.amazonaws.com/mountpoint-s3-release/public_keys/KEYS, imported
#     into an empty keyring; its key mountpoint-s3@amazon.com must have one of the fingerprints
#     the guide lists: 8AEF E705 EBE3 29C0 948C 75A6 6F1C 3B3A EF4B 030B, and 673F E406 1506
#     BB46 9A0E F857 BE39 7A52 B086 DA5A "(older key)". MOUNTPOINT_KEY_FINGERPRINT pins the
#     first: AWS rotated the key at v1.22.2 ("We have updated the GnuPG key used to sign new
#     Mountpoint for Amazon S3 releases", mountpoint-s3/CHANGELOG.md v1.22.2 at the same commit;
#     the guide's fingerprint changed in 55d81b6a7, #1795), so 1.24.0 is signed with it. The
#     build fails when KEYS lacks a key with that fingerprint, and when the tarball's good
#     signature is not that key's (KEYS may hold the older key too: it is not enough here).
#   - the signature: the .asc next to each package, mount-s3-<version>-<arch>.tar.gz.asc (the
#     URL AWS's own release check downloads, package/validate/validate-gzip-al2.sh at the same
#     commit), checked with gpg --verify.
# Not checked on the development VM (no network): that 1.24.0's .asc verifies with this key. At
# that commit mountpoint-s3/CHANGELOG.md still says "Unreleased (v1.24.0)" and the repository has
# no mountpoint-s3-1.24.0 tag; the first image build is the first check.
#
# The SHA-256s pin the exact bytes: the signature does not name the file, so alone it would
# accept any tarball the key signed (another release served under this URL); the installed
# binary's --version must also name MOUNTPOINT_VERSION. AWS publishes no checksums (each
# release page lists the tarball and its .asc only). Both values come from third parties and
# are NOT confirmed: both are in the Arch User Repository's aws-mountpoint-s3-bin 1.24.0
# PKGBUILD; amd64's also in the install steps of two other public projects (which may have
# copied it), arm64's nowhere else found. Nothing on the development VM could compare them with
# AWS's signed tarballs (no network). The signature is checked first, so a build that passes
# confirms each pinned value is that of AWS's signed tarball, and a checksum mismatch after a
# good signature prints the tarball's real SHA-256 (compare it with a download elsewhere before
# pinning it).
# To move to another version: change MOUNTPOINT_VERSION and both checksums together
# (docs/install.md), and the fingerprint only if AWS's guide lists a new key.
FROM debian:${DEBIAN_RELEASE}-slim AS mountpoint
ARG TARGETARCH
ARG MOUNTPOINT_VERSION=1.24.0
ARG MOUNTPOINT_SHA256_AMD64=a99bea20510eaabaf9d7cbfe95ab221a11005cacaa77cfc311a2912bbbdbfd72
ARG MOUNTPOINT_SHA256_ARM64=9f97026c9feabd0e4d128206f1846ee317e6c4f21846914dfe4268d110c892c4
ARG MOUNTPOINT_KEYS_URL=https://s3.amazonaws.com/mountpoint-s3-release/public_keys/KEYS
ARG MOUNTPOINT_KEY_FINGERPRINT=8AEFE705EBE329C0948C75A66F1C3B3AEF4B030B
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl gpg libfuse2 patchelf \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /tmp/mount-s3
# Download and verify: nothing of the tarball is used unless every check passes. gpg runs
# without its agent (--no-autostart; none is installed): importing and checking public keys
# needs none, and gpg --import without one exits 2 though it imported the key.
RUN set -eu; \
    case "${TARGETARCH}" in \
      amd64) arch=x86_64; sum="${MOUNTPOINT_SHA256_AMD64}" ;; \
      arm64) arch=arm64; sum="${MOUNTPOINT_SHA256_ARM64}" ;; \
      *) echo "no mount-s3 build for ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    name="mount-s3-${MOUNTPOINT_VERSION}-${arch}.tar.gz"; \
    url="https://s3.amazonaws.com/mountpoint-s3-release/${MOUNTPOINT_VERSION}/${arch}/${name}"; \
    curl -fsSL --retry 3 -o mount-s3.tar.gz "${url}"; \
    curl -fsSL --retry 3 -o mount-s3.tar.gz.asc "${url}.asc"; \
    curl -fsSL --retry 3 -o KEYS "${MOUNTPOINT_KEYS_URL}"; \
    GNUPGHOME="$(pwd)/gnupg"; export GNUPGHOME; mkdir -m 0700 "${GNUPGHOME}"; \
    gpg --batch --no-autostart --quiet --import KEYS; \
    keys="$(gpg --batch --no-autostart --with-colons --fingerprint | awk -F: '$1 == "pub" { p = 1; next } p && $1 == "fpr" { print $10 } { p = 0 }')"; \
    if ! printf '%s\n' "${keys}" | grep -qx "${MOUNTPOINT_KEY_FINGERPRINT}"; then \
      echo "${MOUNTPOINT_KEYS_URL} has no key with the pinned fingerprint ${MOUNTPOINT_KEY_FINGERPRINT} (its keys: $(echo ${keys})): do not build with it" >&2; exit 1; \
    fi; \
    if ! gpg --batch --no-autostart --status-file gpg.status --verify mount-s3.tar.gz.asc mount-s3.tar.gz; then \
      echo "${name}: its signature ${url}.asc does not verify: do not build with it" >&2; exit 1; \
    fi; \
    signers="$(awk '$1 == "[GNUPG:]" && $2 == "VALIDSIG" { print $12 }' gpg.status)"; \
    if ! printf '%s\n' "${signers}" | grep -qx "${MOUNTPOINT_KEY_FINGERPRINT}"; then \
      echo "${name} is not signed by the pinned key ${MOUNTPOINT_KEY_FINGERPRINT} (signed by: $(echo ${signers}))" >&2; exit 1; \
    fi; \
    if ! echo "${sum}  mount-s3.tar.gz" | sha256sum -c --quiet -; then \
      echo "${name}: AWS's signature verifies but its SHA-256 is $(sha256sum mount-s3.tar.gz | cut -d' ' -f1), not the pinned ${sum}" >&2; exit 1; \
    fi; \
    rm -rf "${GNUPGHOME}" KEYS gpg.status mount-s3.tar.gz.asc
# Extract and install the verified tarball.
RUN set -eu; \
    mkdir -p x /mountpoint-s3/bin; \
    tar -xzf mount-s3.tar.gz -C x; \
    install -m 0755 x/bin/mount-s3 /mountpoint-s3/bin/mount-s3; \
    libdir="/usr/lib/$(uname -m)-linux-gnu"; \
    for lib in libfuse.so.2 libgcc_s.so.1; do install -m 0755 "$(readlink -f "${libdir}/${lib}")" "/mountpoint-s3/bin/${lib}"; done; \
    patchelf --set-rpath '$ORIGIN' /mountpoint-s3/bin/mount-s3; \
    for f in LICENSE NOTICE THIRD_PARTY_LICENSES; do if [ -f "x/$f" ]; then install -m 0644 "x/$f" "/mountpoint-s3/$f"; fi; done; \
    v="$(/mountpoint-s3/bin/mount-s3 --version)"; echo "${v}"; \
    case "${v}" in "mount-s3 ${MOUNTPOINT_VERSION}"|"mount-s3 ${MOUNTPOINT_VERSION} "*|"mount-s3 ${MOUNTPOINT_VERSION}+"*) ;; \
      *) echo "the verified tarball holds ${v}, not mount-s3 ${MOUNTPOINT_VERSION}" >&2; exit 1 ;; esac; \
    cd / && rm -rf /tmp/mount-s3

# ---------------------------------------------------------------------------------------------
# The image: glibc and the CA certificates (mount-s3, the controller's S3 client), no shell.
# It runs as root: the node plugin needs it; the chart runs the controller and the Mountpoint
# Pods as non-root users.
FROM gcr.io/distroless/base-debian12 AS image
COPY --from=build /out/scality-s3-csi-driver /out/scality-csi-controller /out/scality-csi-mounter /out/install-mp /bin/
COPY --from=mountpoint /mountpoint-s3/ /mountpoint-s3/
COPY --from=build /out/scality-fuse-helper /mountpoint-s3/bin/
ENTRYPOINT ["/bin/scality-s3-csi-driver"]
