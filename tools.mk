# tools.mk — pinned test tools, installed into bin/ at the repository root.
#
# Included by the main Makefile (`include tools.mk`); also usable on its own:
#   make -f tools.mk tools            (from anywhere: every path below is absolute)
#
# Contract
#   * Every tool is a real make FILE target under $(TOOLS_BIN) (= <repo>/bin, git-ignored):
#       $(VERSITYGW)       bin/versitygw            S3 server the harness starts
#       $(CSI_SANITY)      bin/csi-sanity           CSI spec conformance runner
#       $(CONTROLLER_GEN)  bin/controller-gen       CRD/RBAC generator
#       $(HELM)            bin/helm                 chart lint/template
#       $(GOLANGCI_LINT)   bin/golangci-lint        Go linters (config: .golangci.yml)
#       $(PROMTOOL)        bin/promtool             Prometheus rule checks and rule unit tests
#       $(ACTIONLINT)      bin/actionlint           GitHub Actions workflow linter (runs shellcheck)
#       $(KUBE_APISERVER)  bin/k8s/kube-apiserver   envtest control plane (built from source)
#       $(ETCD)            bin/k8s/etcd             symlink to the Debian etcd (/usr/bin/etcd)
#     $(ENVTEST_ASSETS) (= bin/k8s) is what KUBEBUILDER_ASSETS must point at.
#     For the cluster suite (tests/cluster), target `cluster-tools`:
#       $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(KUBELET) $(KUBECTL) $(GINKGO) $(AGNHOST)
#                          bin/k8s/...   built in ONE `go build` after kube-apiserver (shared cache)
#       $(E2E_TEST)        bin/k8s/e2e.test         the upstream storage e2e suites (tests/tools/k8s/e2e)
#       $(CSI_PROVISIONER) bin/csi-provisioner      the provisioner sidecar (tests/tools/csi-provisioner)
#       cluster-apt-deps   containerd, runc, the CNI plugins, iptables, busybox-static
#   * A tool is rebuilt only when its file is missing or its pinned version changed: each
#     depends on a version stamp $(TOOLS_BIN)/.stamps/<tool>@<version>; changing a version
#     below creates a new stamp (newer than the binary) and deletes the old one. A binary of
#     unknown provenance already sitting in bin/ is therefore rebuilt once. Re-runs are a
#     no-op (`make tools` with everything present: ~0.05 s, one dpkg-query for apt-deps).
#   * Builds go to a private temp dir under bin/ and are then `mv`ed into place, so an
#     interrupted build never leaves a partial file that make would treat as fresh, a running
#     binary is never overwritten in place, and `make -jN` is safe (no shared temp files).
#   * `go install MOD/cmd@VERSION` builds with the tool's own go.mod and never reads or writes
#     the main module's go.mod/go.sum (GOFLAGS=-mod=mod GOWORK=off guard against an inherited
#     -mod=vendor or go.work). The Kubernetes binaries are built from the checked-in wrapper
#     module tests/tools/k8s (go.mod, go.sum, tools.go) with -mod=readonly, so CI never
#     resolves or rewrites dependencies; to bump Kubernetes run `make tools-k8s-mod
#     K8S_VERSION=v1.X.Y`, commit tests/tools/k8s, and change K8S_VERSION below.
#   * All Go tools are built with CGO_ENABLED=0 -trimpath (static, no gcc needed) and carry
#     their real version via -ldflags -X where the tool reads it from there.
#   * Compiled packages are cached in the Go build cache ($(go env GOCACHE)) and modules in
#     GOMODCACHE, so a rebuild after `make tools-clean` is much faster than a cold one.
#   * Measured on a 2-core Debian bookworm VM while other test suites were also running on
#     it (load average 5-8, so a quiet machine is faster), each target alone with an empty
#     GOMODCACHE and GOCACHE (download + compile, including the standard library):
#       versitygw 3m40s, csi-sanity 1m20s, controller-gen 1m20s, helm 3m00s,
#       kube-apiserver 7m05s (99 MB with -s -w);
#       `make -j2 tools` from nothing: 13m40s; again after `make tools-clean` (Go caches
#       warm): 16s; with everything present: 0.05-0.07s.
#     Optional binaries once kube-apiserver is built (shared build cache): kubectl 40s,
#     kube-scheduler 27s, kube-controller-manager 67s, kubelet 44s.
#   * apt-deps / etcd need root or passwordless sudo only when a package is missing.

# ---------------------------------------------------------------------------------------
# Pinned versions (override on the command line only for experiments).

# versitygw: the version the S3 test harness is written against.
VERSITYGW_VERSION := v1.8.0
# csi-sanity: same version as github.com/kubernetes-csi/csi-test/v5 in the main go.mod.
CSI_SANITY_VERSION := v5.6.0
# controller-gen: newest controller-tools the module proxy serves (v0.23.0, built on
# k8s.io/* v0.37.0, the line the main module and controller-runtime v0.25.x use).
CONTROLLER_GEN_VERSION := v0.23.0
# helm: newest Helm 3 the proxy serves (v3.22.0, k8s.io/* v0.37.0); installs in ~2 min cold.
HELM_VERSION := v3.22.0
# golangci-lint: v2's newest release on the proxy; staticcheck, errcheck, gosec, revive with the
# committed .golangci.yml. Built with the Go on the machine (a prebuilt one would lag its version).
GOLANGCI_LINT_VERSION := v2.15.0
# promtool: Prometheus's own rule checker and rule unit-test runner, from the prometheus module
# (Go module versions v0.3xx.y are Prometheus 3.xx.y releases); ~3.5 min cold on 2 cores.
PROMTOOL_VERSION := v0.316.0
# actionlint: checks .github/workflows (expressions, action inputs, and the run: scripts through
# shellcheck, a Debian package of APT_PACKAGES).
ACTIONLINT_VERSION := v1.7.12
# Kubernetes server binaries: v1.33.13, the server version the envtest suites are written
# and verified against (it and all its k8s.io/* v0.33.13 staging modules download from the
# proxy; 1.34-1.36 are listed too but unverified). Must match tests/tools/k8s/go.mod.
# envtest needs >= 1.31 (CRD selectableFields); clients built on k8s.io/* v0.37 and
# controller-runtime v0.25.2 work against it (verified: CRUD, CRDs, field selectors).
K8S_VERSION := v1.33.13
# etcd: whatever Debian bookworm's etcd-server ships (3.4.23); kube-apiserver 1.33 supports
# etcd 3.4 and turns off the few cache features that need a newer one by itself.
ETCD_SYSTEM := /usr/bin/etcd
ETCD_APT_PACKAGE := etcd-server

# Debian packages the tests need: fusermount3, etcd, killall/fuser, unshare/mount, curl,
# shellcheck (actionlint's check of the workflows' scripts), and gpg with gpg-agent (tests/helm
# runs the Dockerfile's signature check of mount-s3 against keys it makes).
APT_PACKAGES := fuse3 etcd-server psmisc util-linux mount curl shellcheck gpg gpg-agent
# And the cluster suite's node: the container runtime, its CNI plugins (in /usr/lib/cni),
# iptables (the kubernetes Service's DNAT), iproute2 (the network namespace), the static busybox
# the e2e test images are made of.
CLUSTER_APT_PACKAGES := containerd runc containernetworking-plugins iptables iproute2 busybox-static
# csi-provisioner: the newest release whose dependencies the module proxy serves (v6.4.0's are
# not). Must match tests/tools/csi-provisioner/go.mod and the chart's sidecars.csiProvisioner.
CSI_PROVISIONER_VERSION := v6.3.0

# ---------------------------------------------------------------------------------------
# Paths. Everything is absolute and anchored at this file's directory, so the fragment
# works whatever the including Makefile's directory or `make -C`/`-f` usage.

TOOLS_MK_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
TOOLS_BIN := $(TOOLS_MK_DIR)/bin
TOOLS_STAMPS := $(TOOLS_BIN)/.stamps
TOOLS_SCRIPTS := $(TOOLS_MK_DIR)/tests/tools
K8S_MOD_DIR := $(TOOLS_SCRIPTS)/k8s

VERSITYGW := $(TOOLS_BIN)/versitygw
CSI_SANITY := $(TOOLS_BIN)/csi-sanity
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
HELM := $(TOOLS_BIN)/helm
GOLANGCI_LINT := $(TOOLS_BIN)/golangci-lint
PROMTOOL := $(TOOLS_BIN)/promtool
ACTIONLINT := $(TOOLS_BIN)/actionlint
ENVTEST_ASSETS := $(TOOLS_BIN)/k8s
KUBE_APISERVER := $(ENVTEST_ASSETS)/kube-apiserver
ETCD := $(ENVTEST_ASSETS)/etcd
KUBE_CONTROLLER_MANAGER := $(ENVTEST_ASSETS)/kube-controller-manager
KUBE_SCHEDULER := $(ENVTEST_ASSETS)/kube-scheduler
KUBELET := $(ENVTEST_ASSETS)/kubelet
KUBECTL := $(ENVTEST_ASSETS)/kubectl
GINKGO := $(ENVTEST_ASSETS)/ginkgo
AGNHOST := $(ENVTEST_ASSETS)/agnhost
E2E_TEST := $(ENVTEST_ASSETS)/e2e.test
CSI_PROVISIONER := $(TOOLS_BIN)/csi-provisioner
CSI_PROVISIONER_MOD_DIR := $(TOOLS_SCRIPTS)/csi-provisioner

TOOLS_GO_BINS := $(VERSITYGW) $(CSI_SANITY) $(CONTROLLER_GEN) $(HELM) $(GOLANGCI_LINT) $(PROMTOOL) $(ACTIONLINT)
K8S_CLUSTER_BINS := $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(KUBELET) $(KUBECTL) $(GINKGO) $(AGNHOST)
K8S_BINS := $(KUBE_APISERVER) $(K8S_CLUSTER_BINS)
# Their packages, in the order of K8S_BINS.
K8S_PKGS := k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl \
	github.com/onsi/ginkgo/v2/ginkgo k8s.io/kubernetes/test/images/agnhost

GO ?= go

# ---------------------------------------------------------------------------------------
# Aggregate targets.

.PHONY: tools envtest-assets k8s-cluster-bins cluster-tools apt-deps cluster-apt-deps tools-clean tools-versions tools-k8s-mod

# tools: everything the default test suites need (not the optional cluster binaries).
tools: $(TOOLS_GO_BINS) envtest-assets apt-deps ## Install every pinned test tool into bin/ (no-op when present).

# envtest-assets: kube-apiserver + etcd in $(ENVTEST_ASSETS), for KUBEBUILDER_ASSETS.
envtest-assets: $(KUBE_APISERVER) $(ETCD) ## kube-apiserver + etcd in bin/k8s (KUBEBUILDER_ASSETS).

# k8s-cluster-bins: the other Kubernetes binaries of the cluster suite.
k8s-cluster-bins: $(K8S_CLUSTER_BINS) ## kube-controller-manager, kube-scheduler, kubelet, kubectl, ginkgo, agnhost in bin/k8s.

# cluster-tools: everything the cluster suite needs besides the project's binaries.
cluster-tools: $(K8S_BINS) $(E2E_TEST) $(CSI_PROVISIONER) $(ETCD) $(VERSITYGW) $(HELM) cluster-apt-deps ## Tools of the cluster suite (tests/cluster).

# cluster-apt-deps: the Debian packages of the cluster suite's node (containerd and friends).
cluster-apt-deps: ## Install the Debian packages the cluster suite needs (only the missing ones).
	@sh $(TOOLS_SCRIPTS)/apt-install.sh $(CLUSTER_APT_PACKAGES)

# apt-deps: install the missing ones of $(APT_PACKAGES); a fast no-op when all are present.
apt-deps: ## Install the Debian packages the tests need (only the missing ones).
	@sh $(TOOLS_SCRIPTS)/apt-install.sh $(APT_PACKAGES)

# tools-clean: remove the tools (and only the tools) from bin/; project binaries stay.
tools-clean: ## Remove the test tools from bin/.
	rm -rf $(TOOLS_GO_BINS) $(CSI_PROVISIONER) $(ENVTEST_ASSETS) $(TOOLS_STAMPS) $(TOOLS_BIN)/.tmp-*

# tools-versions: print what each installed tool reports (handy in CI logs).
tools-versions: ## Print the version each installed tool reports.
	@for t in $(TOOLS_GO_BINS) $(K8S_BINS) $(ETCD); do [ -e $$t ] || echo "$$t: not built"; done
	@[ ! -e $(VERSITYGW) ] || $(VERSITYGW) --version | sed -n 's/^Version *: */versitygw /p'
	@[ ! -e $(CSI_SANITY) ] || $(CSI_SANITY) -version 2>&1 | sed 's/^Version = /csi-sanity /'
	@[ ! -e $(CONTROLLER_GEN) ] || $(CONTROLLER_GEN) --version | sed 's/^Version: /controller-gen /'
	@[ ! -e $(HELM) ] || echo "helm $$($(HELM) version --short)"
	@[ ! -e $(GOLANGCI_LINT) ] || $(GOLANGCI_LINT) version
	@[ ! -e $(PROMTOOL) ] || $(PROMTOOL) --version | head -1
	@[ ! -e $(KUBE_APISERVER) ] || $(KUBE_APISERVER) --version
	@[ ! -e $(ETCD) ] || $(ETCD) --version | head -1
	@for t in $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(KUBELET); do [ ! -e $$t ] || $$t --version; done
	@[ ! -e $(KUBECTL) ] || echo "kubectl $$($(KUBECTL) version --client | head -1)"

# tools-k8s-mod: regenerate tests/tools/k8s/go.{mod,sum} for K8S_VERSION (maintainers only).
tools-k8s-mod: ## Regenerate tests/tools/k8s for K8S_VERSION (to bump Kubernetes).
	sh $(K8S_MOD_DIR)/update.sh $(K8S_VERSION)

# Relative aliases, so `make bin/helm` works from the repository root as well.
ifeq ($(CURDIR),$(TOOLS_MK_DIR))
$(patsubst $(TOOLS_MK_DIR)/%,%,$(TOOLS_GO_BINS) $(K8S_BINS) $(ETCD)): %: $(TOOLS_MK_DIR)/%
endif

# ---------------------------------------------------------------------------------------
# Version stamps: $(call tool-stamp,NAME,VERSION) names an empty file whose existence
# records "NAME was last requested at VERSION". Creating it removes NAME's older stamps.

tool-stamp = $(TOOLS_STAMPS)/$(1)@$(2)

$(TOOLS_STAMPS)/%:
	@mkdir -p $(@D)
	@rm -f $(@D)/$(firstword $(subst @, ,$*))@*
	@touch $@

# $(call go-install,PKG,VERSION,LDFLAGS[,PRELUDE]): recipe that `go install`s PKG@VERSION
# into $@. GOBIN is a private temp dir next to the target (same file system: `mv` is atomic).
# PRELUDE is optional shell run first (e.g. to compute values LDFLAGS refers to).
define go-install
	@set -e; $(4) mkdir -p $(@D); \
	tmp=$$(mktemp -d $(TOOLS_BIN)/.tmp-$(@F).XXXXXX); trap 'rm -rf "$$tmp"' EXIT; trap 'exit 1' HUP INT TERM; \
	echo "tools.mk: go install $(1)@$(2) -> $@"; \
	GOBIN=$$tmp GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 \
		$(GO) install -trimpath -ldflags "-s -w $(3)" $(1)@$(2); \
	touch $$tmp/$(@F); mv -f $$tmp/$(@F) $@
endef

# ---------------------------------------------------------------------------------------
# Go tools installed with `go install PKG@VERSION`.

$(VERSITYGW): $(call tool-stamp,versitygw,$(VERSITYGW_VERSION))
	$(call go-install,github.com/versity/versitygw/cmd/versitygw,$(VERSITYGW_VERSION),-X main.Version=$(VERSITYGW_VERSION))

$(CSI_SANITY): $(call tool-stamp,csi-sanity,$(CSI_SANITY_VERSION))
	$(call go-install,github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity,$(CSI_SANITY_VERSION),-X main.VERSION=$(CSI_SANITY_VERSION))

# golangci-lint prints the version stamped into main.version.
$(GOLANGCI_LINT): $(call tool-stamp,golangci-lint,$(GOLANGCI_LINT_VERSION))
	$(call go-install,github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION),-X main.version=$(GOLANGCI_LINT_VERSION:v%=%))

# promtool prints the version stamped into prometheus/common's version package.
$(PROMTOOL): $(call tool-stamp,promtool,$(PROMTOOL_VERSION))
	$(call go-install,github.com/prometheus/prometheus/cmd/promtool,$(PROMTOOL_VERSION),-X github.com/prometheus/common/version.Version=$(PROMTOOL_VERSION:v%=%))

# actionlint prints the version stamped into main.version.
$(ACTIONLINT): $(call tool-stamp,actionlint,$(ACTIONLINT_VERSION))
	$(call go-install,github.com/rhysd/actionlint/cmd/actionlint,$(ACTIONLINT_VERSION),-X github.com/rhysd/actionlint.version=$(ACTIONLINT_VERSION))

# controller-gen reads its version from the module build info; no -X needed.
$(CONTROLLER_GEN): $(call tool-stamp,controller-gen,$(CONTROLLER_GEN_VERSION))
	$(call go-install,sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_GEN_VERSION),)

# Helm's own Makefile stamps its version and the Kubernetes version that `helm template`
# and `helm lint` assume (.Capabilities.KubeVersion; it defaults to v1.20.0 otherwise, which
# fails charts with a kubeVersion constraint). Like upstream, derive the latter from the
# k8s.io/client-go version Helm's go.mod requires (v0.37.x -> 1.37).
HELM_LDFLAGS = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$$kmaj \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$kmin \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$$kmaj \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$kmin

HELM_PRELUDE = \
	gomod=$$(GOFLAGS=-mod=mod GOWORK=off $(GO) mod download -json helm.sh/helm/v3@$(HELM_VERSION) | \
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$$/\1/p'); \
	cgo=$$(awk '$$1 == "k8s.io/client-go" { print $$2; exit }' "$$gomod"); \
	kmaj=$$(echo "$$cgo" | awk -F. '{ sub(/^v/, "", $$1); print $$1 + 1 }'); \
	kmin=$$(echo "$$cgo" | awk -F. '{ print $$2 }'); \
	[ -n "$$kmin" ] || { echo "tools.mk: no k8s.io/client-go in helm $(HELM_VERSION)'s go.mod" >&2; exit 1; };

$(HELM): $(call tool-stamp,helm,$(HELM_VERSION))
	$(call go-install,helm.sh/helm/v3/cmd/helm,$(HELM_VERSION),$(HELM_LDFLAGS),$(HELM_PRELUDE))

# ---------------------------------------------------------------------------------------
# Kubernetes binaries, built from source out of the wrapper module tests/tools/k8s with
# upstream's release flags: static, trimmed, stripped, and stamped with the real version
# (without the stamp they report v0.0.0-master, and version-gated features such as CRD
# selectableFields (>= 1.31) are rejected). All share one flag set, hence one build cache.

K8S_MAJOR := $(patsubst v%,%,$(word 1,$(subst ., ,$(K8S_VERSION))))
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_LDFLAGS := -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=$(K8S_MAJOR) \
	-X $(p).gitMinor=$(K8S_MINOR) -X $(p).gitTreeState=clean)

# Rebuilt when K8S_VERSION or the wrapper module changes. kube-apiserver alone is what envtest
# and `make demo` need, so it builds by itself; the cluster suite's other binaries build in ONE
# `go build` after it (same flags, so the packages they share with it come from the build
# cache, and the linkers run in parallel).
K8S_DEPS := $(call tool-stamp,k8s,$(K8S_VERSION)) $(K8S_MOD_DIR)/go.mod $(K8S_MOD_DIR)/go.sum

# $(call k8s-build,PKGS,BINS): go build PKGS of the wrapper module, then move BINS into place.
define k8s-build
	@set -e; mkdir -p $(ENVTEST_ASSETS); \
	if ! grep -Eq '^(require[[:space:]]+|[[:space:]]+)k8s\.io/kubernetes $(K8S_VERSION)$$' $(K8S_MOD_DIR)/go.mod; then \
		echo "tools.mk: $(K8S_MOD_DIR)/go.mod does not require k8s.io/kubernetes $(K8S_VERSION);" \
			"run 'make tools-k8s-mod K8S_VERSION=$(K8S_VERSION)'" >&2; exit 1; \
	fi; \
	tmp=$$(mktemp -d $(TOOLS_BIN)/.tmp-k8s.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; trap 'exit 1' HUP INT TERM; \
	echo "tools.mk: go build $(notdir $(2)) ($(K8S_VERSION)) -> $(ENVTEST_ASSETS)"; \
	GOFLAGS=-mod=readonly GOWORK=off CGO_ENABLED=0 \
		$(GO) build -C $(K8S_MOD_DIR) -buildvcs=false -trimpath -ldflags '$(K8S_LDFLAGS)' \
		-o $$tmp/ $(1); \
	for b in $(notdir $(2)); do mv -f $$tmp/$$b $(ENVTEST_ASSETS)/$$b; done
endef

$(KUBE_APISERVER): $(K8S_DEPS)
	$(call k8s-build,$(firstword $(K8S_PKGS)),$(KUBE_APISERVER))

$(K8S_CLUSTER_BINS) &: $(K8S_DEPS) | $(KUBE_APISERVER)
	$(call k8s-build,$(wordlist 2,$(words $(K8S_PKGS)),$(K8S_PKGS)),$(K8S_CLUSTER_BINS))

# The storage e2e suites: a test binary of the same wrapper module (k8s.io/kubernetes/test/e2e
# with the External Storage driver registered, see tests/tools/k8s/e2e). Built after the
# binaries above, whose compiled packages it reuses.
$(E2E_TEST): $(call tool-stamp,k8s,$(K8S_VERSION)) $(K8S_MOD_DIR)/go.mod $(K8S_MOD_DIR)/go.sum $(K8S_MOD_DIR)/e2e/e2e_test.go | $(KUBE_APISERVER)
	@set -e; mkdir -p $(@D); \
	tmp=$$(mktemp -d $(TOOLS_BIN)/.tmp-e2e.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; trap 'exit 1' HUP INT TERM; \
	echo "tools.mk: go test -c k8s.io/kubernetes/test/e2e (storage, $(K8S_VERSION)) -> $@"; \
	GOFLAGS=-mod=readonly GOWORK=off CGO_ENABLED=0 \
		$(GO) test -C $(K8S_MOD_DIR) -c -buildvcs=false -trimpath -ldflags '$(K8S_LDFLAGS)' -o $$tmp/e2e.test ./e2e; \
	mv -f $$tmp/e2e.test $@

# csi-provisioner from its wrapper module (go install refuses a module with replace lines).
$(CSI_PROVISIONER): $(call tool-stamp,csi-provisioner,$(CSI_PROVISIONER_VERSION)) $(CSI_PROVISIONER_MOD_DIR)/go.mod $(CSI_PROVISIONER_MOD_DIR)/go.sum
	@set -e; \
	if ! grep -Eq '^(require[[:space:]]+|[[:space:]]+)github\.com/kubernetes-csi/external-provisioner/v6 $(CSI_PROVISIONER_VERSION)$$' $(CSI_PROVISIONER_MOD_DIR)/go.mod; then \
		echo "tools.mk: $(CSI_PROVISIONER_MOD_DIR)/go.mod does not require csi-provisioner $(CSI_PROVISIONER_VERSION)" >&2; exit 1; \
	fi; \
	tmp=$$(mktemp -d $(TOOLS_BIN)/.tmp-prov.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; trap 'exit 1' HUP INT TERM; \
	echo "tools.mk: go build csi-provisioner@$(CSI_PROVISIONER_VERSION) -> $@"; \
	GOFLAGS=-mod=readonly GOWORK=off CGO_ENABLED=0 \
		$(GO) build -C $(CSI_PROVISIONER_MOD_DIR) -buildvcs=false -trimpath -ldflags '-s -w -X main.version=$(CSI_PROVISIONER_VERSION)' \
		-o $$tmp/csi-provisioner github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner; \
	mv -f $$tmp/csi-provisioner $@

# etcd comes from Debian (installed only if $(ETCD_SYSTEM) is missing); bin/k8s/etcd is a
# symlink to it. Make looks through the symlink, so a dangling one counts as missing.
$(ETCD):
	@set -e; mkdir -p $(@D); \
	[ -x $(ETCD_SYSTEM) ] || sh $(TOOLS_SCRIPTS)/apt-install.sh $(ETCD_APT_PACKAGE); \
	ln -sfn $(ETCD_SYSTEM) $@.tmp.$$$$; mv -Tf $@.tmp.$$$$ $@
