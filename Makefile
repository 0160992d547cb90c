# Makefile of the Scality S3 CSI driver. `make help` lists the targets.
#
# The two commands a new user needs:
#   make demo   a local end-to-end mount on this machine (no cluster needed)
#   make test   every test suite; installs what it needs into bin/ by itself
#
# Tests mount filesystems and run a systemd user manager: they need root (as CI has).

SHELL := /bin/bash
.DEFAULT_GOAL := help

include tools.mk
include charts.mk

# The version the binaries report: a release tag vX.Y.Z gives X.Y.Z (tests/tools/release.sh), a
# commit after it X.Y.Z-N-g<hash>, a clone without tags the hash.
VERSION ?= $(patsubst v%,%,$(shell git describe --tags --always --dirty 2>/dev/null || echo dev))
LDFLAGS := -X github.com/s3csi/s3-csi-driver/pkg/version.Version=$(VERSION)
BIN := $(abspath bin)
GO_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)"
TESTS_DIR := $(abspath tests)
TESTS_GO := cd $(TESTS_DIR) && $(GO)

# Shipped binaries (cmd/) and the test-only mount-s3 stand-in (tests/mounts3, never shipped).
# tests/ is a Go module of its own (github.com/s3csi/s3-csi-driver/tests: the harness, the
# stand-ins and every cross-cutting suite), so the driver's go.mod lists only what the
# binaries and their unit tests use. TESTS_GO runs go in it.
COMMANDS := scality-s3-csi-driver install-mp scality-csi-controller scality-csi-mounter scality-fuse-helper
BINARIES := $(addprefix $(BIN)/,$(COMMANDS)) $(BIN)/mount-s3

# Tools the test suites need (see tools.mk).
TEST_TOOLS := $(VERSITYGW) $(HELM) envtest-assets apt-deps

# Fuzz targets run briefly by `make test` (package:target).
FUZZ_TARGETS := ./pkg/mountargs:FuzzBuild ./pkg/targetpath:FuzzParse ./pkg/mountoptions:FuzzParse \
	./pkg/driver:FuzzParseVolumeID ./pkg/s3:FuzzBucketName ./pkg/confined:FuzzNames ./pkg/safetext:FuzzCheck
# A count (-fuzztime Nx), not a duration: with a duration the fuzz engine runs under a deadline,
# and on a loaded machine (make test builds the cluster tools meanwhile) a worker that stalls
# past it failed the run with "context deadline exceeded" (seen in a clean-clone run: 0 execs/s
# for 8 s, then FAIL). 30000 inputs per target take about 60 s for all seven on a quiet machine.
FUZZ_TIME ?= 30000x

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build every binary into bin/.
	@mkdir -p $(BIN)
	@for c in $(COMMANDS); do $(GO_BUILD) -o $(BIN)/$$c ./cmd/$$c || exit 1; done
	@cd $(TESTS_DIR) && $(GO_BUILD) -o $(BIN)/mount-s3 ./mounts3

# What `make demo` runs, and nothing more: the node plugin, the controller, the Mountpoint Pod's
# mounter, systemd mode's FUSE helper and the mount-s3 stand-in; an S3 server, kube-apiserver + etcd (not the cluster
# suite's other Kubernetes binaries) and the Debian packages of the mount path.
DEMO_COMMANDS := scality-s3-csi-driver scality-csi-controller scality-csi-mounter scality-fuse-helper
DEMO_TOOLS := $(VERSITYGW) envtest-assets apt-deps

##@ Generate

CRD_DIR := crd
CHART_DIR := charts/scality-s3-csi-driver

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, the CRD YAML and the controller's RBAC.
	$(CONTROLLER_GEN) object paths=./crd/...
	$(CONTROLLER_GEN) crd paths=./crd/... output:crd:dir=./$(CRD_DIR)
	@tmp=$$(mktemp -d) && $(CONTROLLER_GEN) rbac:roleName=scality-csi-controller paths=./pkg/reconciler/... output:rbac:dir=$$tmp && \
		mkdir -p $(CHART_DIR)/files && mv $$tmp/role.yaml $(CHART_DIR)/files/controller-rbac.yaml && rm -rf $$tmp
	@tmp=$$(mktemp -d) && $(CONTROLLER_GEN) rbac:roleName=scality-s3-csi-node paths=./mounter/pod/... paths=./pkg/nodemode/... paths=./pkg/nodeplugin/... paths=./pkg/secretscope/... output:rbac:dir=$$tmp && \
		mv $$tmp/role.yaml $(CHART_DIR)/files/node-rbac.yaml && rm -rf $$tmp
	@tmp=$$(mktemp -d) && $(CONTROLLER_GEN) rbac:roleName=scality-s3-csi-node-restart paths=./pkg/podrestart/... output:rbac:dir=$$tmp && \
		mv $$tmp/role.yaml $(CHART_DIR)/files/node-restart-rbac.yaml && rm -rf $$tmp
	@$(MAKE) --no-print-directory chart-crd

##@ Quality

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet, in both modules.
	$(GO) vet ./...
	$(TESTS_GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml) in both modules.
	$(GOLANGCI_LINT) run ./...
	cd $(TESTS_DIR) && $(GOLANGCI_LINT) run ./...

.PHONY: docs-check
docs-check: ## Every message docs/troubleshooting.md quotes is one the code emits; every relative Markdown link resolves; every flag of every binary of cmd/ is in its table in docs/configuration.md and back (defaults too); docs/compatibility.md names the pinned versions; every shell block of docs/ runs in the suites or says why not.
	$(TESTS_GO) run ./docscheck -root $(CURDIR) -go $(GO)

.PHONY: verify
verify: generate $(GOLANGCI_LINT) $(ACTIONLINT) apt-deps ## Fail on unformatted code, a tracked build output (tests/repo), go.mod drift, vet or lint findings, a broken non-Linux build, docs that drift from the code, workflow findings (actionlint), or generated-file drift.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(TESTS_GO) test -count=1 ./repo/
	$(GO) mod tidy -diff
	$(TESTS_GO) mod tidy -diff
	@$(MAKE) --no-print-directory vet
	GOOS=darwin $(GO) build ./... && GOOS=darwin $(GO) vet ./...
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory docs-check
	$(ACTIONLINT) -shellcheck=$$(command -v shellcheck) .github/workflows/*.yaml
	@$(MAKE) --no-print-directory release-check
	@if [ -n "$$(git status --porcelain -- $(CRD_DIR) $(CHART_DIR)/files)" ]; then \
		echo "generated files are out of date; run make generate and commit:"; git status --porcelain -- $(CRD_DIR) $(CHART_DIR)/files; exit 1; fi

# release-check: the release workflow's steps that need no network, as it runs them
# (tests/tools/release.sh): the tag of the chart's version checked against Chart.yaml, CHANGELOG.md
# and values.yaml, the chart linted and packaged into bin/dist, charts/ unchanged since a tag of
# that version. The rest of the workflow (image build, smoke tests, pushes, SBOM, signatures)
# needs a Docker engine and a registry (docs/development.md#releases).
.PHONY: release-check
release-check: $(HELM) ## The release workflow's network-free steps (tests/tools/release.sh): tag vs Chart.yaml/CHANGELOG/values, chart package, version bump.
	@v=$$(sed -n 's/^version: *//p' $(CHART_DIR)/Chart.yaml); \
	ROOT=$(CURDIR) HELM=$(HELM) bash tests/tools/release.sh meta "v$$v" && \
	ROOT=$(CURDIR) HELM=$(HELM) bash tests/tools/release.sh chart "$$v" $(BIN)/dist && \
	ROOT=$(CURDIR) bash tests/tools/release.sh bump-check

##@ Test

.PHONY: test
test: ## Every suite (tests/tools/test.sh): verify, unit, integration, csi-sanity, helm, fuzz, the cluster suite; prints a timing table.
	@bash tests/tools/test.sh

.PHONY: test-unit
test-unit: ## Unit tests only: every package of the driver's module (no root, no real components).
	$(GO) test -race -count=1 ./...

.PHONY: test-integration
test-integration: build $(TEST_TOOLS) ## Real-component suites (the tests module but its cluster suite).
	$(TESTS_GO) test -race -count=1 -timeout 25m $$($(TESTS_GO) list ./... | grep -vx 'github.com/s3csi/s3-csi-driver/tests/cluster')

.PHONY: test-cluster test-cluster-run
test-cluster: build cluster-tools test-cluster-run ## The cluster suite: a real single-node cluster, the chart, the upstream storage e2e suites, the scenarios.

# test-cluster-run: the cluster suite with its tools already built (make test builds them in
# the background). rigctl brings the cluster up in its own network namespace, runs the suite
# inside it and tears everything down, also when the suite fails or is interrupted; the
# cluster's logs are kept in bin/cluster-logs.
test-cluster-run:
	@cd $(TESTS_DIR) && CGO_ENABLED=0 $(GO) build -o $(BIN)/pause ./cluster/pause
	@$(TESTS_GO) build -o $(BIN)/rigctl ./cluster/rigctl
	@$(TESTS_GO) test -c -o $(BIN)/cluster.test ./cluster
	@rm -rf $(BIN)/cluster-logs
	$(BIN)/rigctl run -keep-logs $(BIN)/cluster-logs -timings $(BIN)/timings.tsv -- $(BIN)/cluster.test -test.v -test.timeout 60m -timings $(BIN)/timings.tsv

# The VM rig of systemd mode (tests/vm, docs/adr/0013-vm-rig-for-systemd-mode.md): a Debian guest
# with systemd as PID 1 on cgroup v2, built from Debian's packages into bin/vm/<hash> (a warm run
# rebuilds nothing), booted once by tests/vm, which runs the systemd-mode checks inside it.
VM_DIR := $(BIN)/vm

.PHONY: vm-image test-vm
vm-image: ## Build the VM rig's image into bin/vm/<hash> (disk.img, vmlinuz, initrd.img); no-op when built.
	@sh $(TOOLS_SCRIPTS)/apt-install.sh qemu-system-x86 mmdebstrap e2fsprogs
	bash tests/tools/vm-image.sh $(VM_DIR)

test-vm: build $(VERSITYGW) vm-image ## The systemd-mode checks inside a qemu guest whose PID 1 is systemd (cgroup v2); make test runs it (stage vm).
	cd $(TESTS_DIR) && S3CSI_VM=1 $(GO) test -count=1 -v -timeout 30m ./vm/

.PHONY: test-monitoring
test-monitoring: $(PROMTOOL) ## The alerting rules: promtool check rules, and their unit tests (tests/monitoring/alerts_test.yaml).
	$(PROMTOOL) check rules $(CHART_DIR)/files/monitoring/alerts.yaml
	$(PROMTOOL) test rules tests/monitoring/alerts_test.yaml

.PHONY: test-fuzz
test-fuzz: ## Run each fuzz target for FUZZ_TIME (default 30000x: that many inputs; a duration such as 30s works too).
	@for ft in $(FUZZ_TARGETS); do pkg=$${ft%%:*}; fn=$${ft##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZ_TIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZ_TIME) $$pkg || exit 1; done

.PHONY: bench
bench: build $(TEST_TOOLS) ## Print NodePublish latency figures (systemd mode); not asserted.
	$(TESTS_GO) test -run '^$$' -bench 'NodePublish' -benchtime 1x -count 1 -timeout 20m ./bench/

.PHONY: bench-repair
bench-repair: build $(TEST_TOOLS) ## Print dead-mount detection and repair times, both modes, 20 kills each; not asserted.
	$(TESTS_GO) test -run '^$$' -bench 'MountRepair' -benchtime 1x -count 1 -timeout 20m ./bench/

.PHONY: bench-scale
bench-scale: build $(TEST_TOOLS) ## Print node plugin costs at 10-1,000 live mounts, both modes, and the Pod Reconciler at 2,000-20,000 pods; BENCH_SCALE_SIZES, BENCH_SCALE_MODES, BENCH_CONTROLLER_PODS, BENCH_SCALE_PROFILES (a directory for profiles), BENCH_CONTROLLER_ARGS (extra controller flags), BENCH_CONTROLLER_QUEUE=1 (the controller's work queue after the last pod, and the bench's own watch of the pods); not asserted.
	$(TESTS_GO) test -run '^$$' -bench 'ScaleNode' -benchtime 1x -count 1 -timeout 60m ./bench/
	$(TESTS_GO) test -run '^$$' -bench 'ScaleController' -benchtime 1x -count 1 -timeout 60m ./bench/

.PHONY: bench-burst
bench-burst: build $(TEST_TOOLS) ## Print what a burst of BENCH_BURST (200) publishes then unpublishes does in systemd mode (codes, leftovers); BENCH_BURST_TIMEOUT sets --systemd-timeout; not asserted.
	$(TESTS_GO) test -run '^$$' -bench 'BurstSystemd' -benchtime 1x -count 1 -timeout 30m ./bench/

.PHONY: bench-footprint
bench-footprint: build $(TEST_TOOLS) ## Print the memory and CPU of one mount's daemons at idle and under a read burst, both modes, with the mount-s3 stand-in (its figures, not mount-s3's); not asserted.
	$(TESTS_GO) test -run '^$$' -bench 'MountS3Footprint' -benchtime 1x -count 1 -timeout 20m ./bench/

.PHONY: bench-controller
bench-controller: build $(TEST_TOOLS) ## Print Pod Reconciler figures for 2,000 pods (time, writes, RSS); not asserted.
	$(TESTS_GO) test -run '^$$' -bench 'Controller' -benchtime 1x -count 1 -timeout 20m ./bench/

##@ Demo

.PHONY: demo
demo: ## Mount a bucket end to end on this machine, step by step, then clean up.
	@$(MAKE) --no-print-directory -j2 demo-prereqs
	@cd $(TESTS_DIR) && $(BIN)/demo

# demo-prereqs: the demo's tools and binaries, built side by side (make demo runs it with -j2).
.PHONY: demo-prereqs demo-binaries
demo-prereqs: $(DEMO_TOOLS) demo-binaries
demo-binaries:
	@$(MAKE) --no-print-directory build COMMANDS="$(DEMO_COMMANDS)"
	@$(TESTS_GO) build -o $(BIN)/demo ./demo

.PHONY: clean
clean: ## Remove built binaries (tools stay; see tools-clean).
	rm -f $(BINARIES)
