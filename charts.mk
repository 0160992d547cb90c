# charts.mk — the Helm chart, its tests and the container image. Included by the Makefile
# (`include charts.mk`, after tools.mk: it uses $(GO), $(HELM), $(ENVTEST_ASSETS)).
#
#   make chart-crd      copy crd/*.yaml into the chart (files/crds/), where templates/crd.yaml reads it
#   make verify-chart   fail when the chart's CRD copy differs from crd/ (no git needed; `make verify`
#                       regenerates the copy and catches drift with git instead)
#   make helm-lint      helm lint --strict, with the defaults and with each tests/helm values file
#   make test-helm      the chart suite (tests/helm): lint, golden renderings, server-side dry-run
#                       against kube-apiserver, RBAC reviews, schema, flag drift, Dockerfile
#   make helm-golden    rewrite tests/helm's golden files and the Helm values section of
#                       docs/configuration.md after a deliberate chart change (review the diff)
#   make image          docker build of the driver image for this machine (needs a Docker engine
#                       with BuildKit and network access to the base images and mount-s3's
#                       release; not runnable on the development VM)
#   make image-oci      both architectures into bin/image.tar, as the release builds them (the
#                       same needs, and buildx with QEMU)

CHARTS_MK_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
CHART := $(CHARTS_MK_DIR)/charts/scality-s3-csi-driver
CHART_CRD_SRC := $(wildcard $(CHARTS_MK_DIR)/crd/*.yaml)
CHART_VALUES_FILES := $(wildcard $(CHARTS_MK_DIR)/tests/helm/testdata/values-*.yaml)

IMAGE_REPO ?= ghcr.io/scality/s3-csi-driver
IMAGE_TAG ?= $(or $(VERSION),dev)
DOCKER ?= docker

.PHONY: chart-crd verify-chart helm-lint test-helm helm-golden images-list image

chart-crd: ## Copy the CRD of crd/ into the Helm chart.
	@mkdir -p $(CHART)/files/crds
	@rm -f $(filter-out $(addprefix $(CHART)/files/crds/,$(notdir $(CHART_CRD_SRC))),$(wildcard $(CHART)/files/crds/*.yaml))
	@cp $(CHART_CRD_SRC) $(CHART)/files/crds/

verify-chart: ## Fail when the chart's CRD copy differs from crd/ (run make chart-crd).
	@fail=0; \
	for f in $(CHART_CRD_SRC); do cmp -s $$f $(CHART)/files/crds/$${f##*/} || { echo "chart CRD $${f##*/} differs from crd/"; fail=1; }; done; \
	for f in $(wildcard $(CHART)/files/crds/*.yaml); do [ -e $(CHARTS_MK_DIR)/crd/$${f##*/} ] || { echo "chart CRD $${f##*/} is not in crd/"; fail=1; }; done; \
	[ $$fail = 0 ] || { echo "run make chart-crd"; exit 1; }

# helm lint renders without a cluster: it needs the values an offline render must set.
OFFLINE_VALUES := $(CHARTS_MK_DIR)/tests/harness/testdata/offline-values.yaml
helm-lint: $(HELM) ## Lint the Helm chart (the offline values, then every tests/helm values file over them).
	$(HELM) lint --strict $(CHART) --values $(OFFLINE_VALUES)
	@for f in $(CHART_VALUES_FILES); do echo "helm lint --values $${f#$(CHARTS_MK_DIR)/}"; \
		$(HELM) lint --strict --quiet $(CHART) --values $(OFFLINE_VALUES) --values $$f || exit 1; done

test-helm: build $(HELM) envtest-assets ## Chart suite: lint, goldens, dry-run on kube-apiserver, RBAC, schema, flags, Dockerfile.
	cd $(CHARTS_MK_DIR)/tests && $(GO) test -race -count=1 -timeout 5m ./helm/...

helm-golden: build $(HELM) ## Rewrite the chart's defaults digest, golden files and the Helm values doc (review the diff).
	cd $(CHARTS_MK_DIR)/tests && $(GO) test -count=1 ./helm/ -run 'TestChartDefaultsDigest' -update && \
		$(GO) test -count=1 ./helm/ -run 'TestGolden|TestValuesDoc' -update

# images-list: every image the chart can run (both modes, the sidecar registration: a superset
# of any one install), one per line, for mirroring into a private registry. VALUES: your values
# file(s), so that the repositories and tags are yours.
VALUES ?=
images-list: $(HELM) ## Print every image the chart can run (VALUES=your-values.yaml), for air-gapped mirrors.
	@$(HELM) template s3-csi $(CHART) -f $(OFFLINE_VALUES) $(foreach f,$(VALUES),-f $(f)) --set 'mounter.modesInUse={systemd,pod}' --set node.registration=sidecars | \
		sed -n -e 's/^[[:space:]]*image:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$$/\1/p' \
			-e 's/^[[:space:]]*- --mountpoint-image=\(.*\)$$/\1/p' | sort -u

image: ## Build the driver image for this machine into the local Docker engine (BuildKit; IMAGE_REPO, IMAGE_TAG).
	DOCKER_BUILDKIT=1 $(DOCKER) build --build-arg VERSION=$(IMAGE_TAG) -t $(IMAGE_REPO):$(IMAGE_TAG) $(CHARTS_MK_DIR)

# image-oci: both architectures into one OCI archive, as the release workflow builds it (docker
# buildx with QEMU for the other architecture); tests/tools/release.sh index-digest prints the
# digest a push of it keeps.
PLATFORMS ?= linux/amd64,linux/arm64
.PHONY: image-oci
image-oci: ## Build the driver image for PLATFORMS (default amd64 and arm64) into bin/image.tar, an OCI archive (docker buildx).
	@mkdir -p $(CHARTS_MK_DIR)/bin
	$(DOCKER) buildx build --platform $(PLATFORMS) --build-arg VERSION=$(IMAGE_TAG) -t $(IMAGE_REPO):$(IMAGE_TAG) \
		--provenance=false --output type=oci,dest=$(CHARTS_MK_DIR)/bin/image.tar $(CHARTS_MK_DIR)
	@bash $(CHARTS_MK_DIR)/tests/tools/release.sh index-digest $(CHARTS_MK_DIR)/bin/image.tar
