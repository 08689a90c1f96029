# kubefarm Makefile. `make test` is the one command CI runs (see .ci/run).
# Every target installs what it needs: pinned upstream binaries are built from
# Go modules into bin/ (ignored by git) only when missing or when a pin changes.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

ROOT  := $(abspath .)
BIN   := $(ROOT)/bin
BUILD := $(ROOT)/_build
GO    ?= go
export GOFLAGS := -buildvcs=false
# Upstream binaries are built static, as upstream releases them, so that the
# e2e cluster can put them into images without a libc.
TOOLS_ENV := CGO_ENABLED=0

# Versions come from the tools modules' go.mod files, the single source of truth.
mod_version = $(shell sed -nE 's#^[[:space:]]*(require[[:space:]]+)?$(2)[[:space:]]+(v[^[:space:]]+).*#\2#p' $(1) | head -n1)
KUBERNETES_VERSION   := $(call mod_version,hack/tools/go.mod,k8s.io/kubernetes)
CERT_MANAGER_VERSION := $(call mod_version,hack/tools/cert-manager/go.mod,github.com/cert-manager/cert-manager)
# CoreDNS, the tenants' DNS add-on: its image tag in the e2e registry and
# the manager's default tag (make verify-pins checks both).
COREDNS_VERSION      := $(call mod_version,hack/tools/coredns/go.mod,github.com/coredns/coredns)
# The node image's container runtime, built from their modules.
CONTAINERD_VERSION   := $(call mod_version,hack/tools/containerd/go.mod,github.com/containerd/containerd/v2)
RUNC_VERSION         := $(call mod_version,hack/tools/runc/go.mod,github.com/opencontainers/runc)
k8s_minor := $(word 2,$(subst ., ,$(KUBERNETES_VERSION)))

# The previous minor's control plane, for the e2e upgrade scenario.
PREV_KUBERNETES_VERSION := $(call mod_version,hack/tools/k8s-prev/go.mod,k8s.io/kubernetes)

# Kubernetes reads its version from ldflags; without them nodes report v0.0.0-master.
k8s_ldflags = -s -w \
  -X k8s.io/component-base/version.gitVersion=$(1) \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(1))) \
  -X k8s.io/component-base/version.gitTreeState=clean \
  -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
  -X k8s.io/client-go/pkg/version.gitVersion=$(1) \
  -X k8s.io/client-go/pkg/version.gitMajor=1 \
  -X k8s.io/client-go/pkg/version.gitMinor=$(word 2,$(subst ., ,$(1)))
K8S_LDFLAGS := $(call k8s_ldflags,$(KUBERNETES_VERSION))

K8S_BINARIES := kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
PREV_K8S_BINARIES := kube-apiserver kube-controller-manager kube-scheduler
# The node image's container runtime (hack/tools/containerd, hack/tools/runc).
RUNTIME_BINARIES := $(addprefix $(BIN)/,containerd containerd-shim-runc-v2 ctr runc)
# The arm64 node image's binaries: the same pins, cross-built (GOARCH=arm64;
# cgo with Debian's aarch64 cross compiler, and runc's libseccomp from
# Debian's arm64 packages through hack/apt-download-arch, unpacked into a
# sysroot that never touches the host's dpkg).
ARM64_BIN := $(BIN)/linux-arm64
ARM64_SYSROOT := $(BUILD)/sysroot-arm64
ARM64_NODE_BINARIES := $(addprefix $(ARM64_BIN)/,kubelet flanneld cni/flannel containerd containerd-shim-runc-v2 ctr runc)
$(ARM64_BIN)/%: TOOLS_ENV := CGO_ENABLED=0 GOARCH=arm64
$(ARM64_BIN)/%: CROSS_APT := crossbuild-essential-arm64
ARM64_CROSS_ENV := GOARCH=arm64 CC=aarch64-linux-gnu-gcc
$(ARM64_BIN)/%: CROSS_ENV := $(ARM64_CROSS_ENV)
$(ARM64_BIN)/runc: CROSS_ENV := $(ARM64_CROSS_ENV) PKG_CONFIG_SYSROOT_DIR=$(ARM64_SYSROOT) PKG_CONFIG_LIBDIR=$(ARM64_SYSROOT)/usr/lib/aarch64-linux-gnu/pkgconfig
$(ARM64_BIN)/runc: $(ARM64_SYSROOT)/libseccomp.stamp
# What the admin cluster and make demo run; the rest only tests need:
# versitygw (kubefarm-etcd's S3 tests) and the previous minor's control
# plane (the upgrade scenario).
DEMO_TOOL_BINARIES := $(addprefix $(BIN)/,$(K8S_BINARIES) etcd konnectivity-server konnectivity-agent cert-manager-controller cert-manager-cainjector coredns)
TOOL_BINARIES := $(DEMO_TOOL_BINARIES) $(BIN)/versitygw $(BIN)/prometheus $(addprefix $(BIN)/k8s-prev/,$(PREV_K8S_BINARIES)) $(RUNTIME_BINARIES)
# The subset the integration tests (envtest) start.
# versitygw is the S3 server kubefarm-etcd's upload tests run against;
# prometheus the alert source of the rollout's alert gate tests.
ENVTEST_BINARIES := $(addprefix $(BIN)/,kube-apiserver etcd cert-manager-controller versitygw prometheus)

CONTROLLER_GEN := $(BIN)/controller-gen
STATICCHECK    := $(BIN)/staticcheck
CONTROLLER_TOOLS_VERSION := v0.23.0
STATICCHECK_VERSION      := v0.8.2

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

## ---- pinned upstream binaries ------------------------------------------------

.PHONY: tools
tools: $(TOOL_BINARIES) ## Build every pinned upstream binary into bin/ (only what is missing or stale).

.PHONY: envtest-tools
envtest-tools: $(ENVTEST_BINARIES) ## Build only the binaries the integration tests start.

$(addprefix $(BIN)/,$(K8S_BINARIES)) $(ARM64_BIN)/kubelet: hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$(notdir $@)

$(addprefix $(BIN)/k8s-prev/,$(PREV_K8S_BINARIES)): $(BIN)/k8s-prev/%: hack/tools/k8s-prev/go.mod hack/tools/k8s-prev/go.sum
	cd hack/tools/k8s-prev && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '$(call k8s_ldflags,$(PREV_KUBERNETES_VERSION))' -o $@ k8s.io/kubernetes/cmd/$*

$(BIN)/etcd: hack/tools/go.mod hack/tools/go.sum hack/tools/etcd/main.go
	cd hack/tools && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ ./etcd

$(BIN)/versitygw: hack/tools/versitygw/go.mod hack/tools/versitygw/go.sum
	cd hack/tools/versitygw && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ github.com/versity/versitygw/cmd/versitygw

# Prometheus without its service discovery plugins (remove_all_sd): the
# tests give it a static target, and the plugins are most of its build.
$(BIN)/prometheus: hack/tools/prometheus/go.mod hack/tools/prometheus/go.sum
	cd hack/tools/prometheus && $(TOOLS_ENV) $(GO) build -trimpath -tags remove_all_sd -ldflags '-s -w' -o $@ github.com/prometheus/prometheus/cmd/prometheus

# CoreDNS's version string is a constant of the module (coremain.CoreVersion);
# GitCommit, which `coredns -version` prints after it, gets the module
# version, as there is no git checkout to describe.
$(BIN)/coredns: hack/tools/coredns/go.mod hack/tools/coredns/go.sum
	cd hack/tools/coredns && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w -X github.com/coredns/coredns/coremain.GitCommit=$(COREDNS_VERSION)' -o $@ github.com/coredns/coredns

# containerd 2.x for the node image: static (CGO_ENABLED=0, without the
# btrfs, devmapper and zfs snapshotters, which need cgo and the node never
# uses: it runs overlayfs on a tmpfs), its version stamped as upstream's
# release builds do.
CONTAINERD_LDFLAGS := -s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION) -X github.com/containerd/containerd/v2/version.Revision=$(CONTAINERD_VERSION)
$(foreach d,$(BIN) $(ARM64_BIN),$(addprefix $(d)/,containerd containerd-shim-runc-v2 ctr)): hack/tools/containerd/go.mod hack/tools/containerd/go.sum
	cd hack/tools/containerd && $(TOOLS_ENV) $(GO) build -trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags '$(CONTAINERD_LDFLAGS)' -o $@ github.com/containerd/containerd/v2/cmd/$(notdir $@)

# runc needs cgo (its nsenter is C) and libseccomp: static like upstream's
# `make static` (seccomp netgo osusergo, -extldflags -static).
$(BIN)/runc $(ARM64_BIN)/runc: hack/tools/runc/go.mod hack/tools/runc/go.sum
	@$(MAKE) --no-print-directory deps APT_PACKAGES="libseccomp-dev gcc $(CROSS_APT)"
	cd hack/tools/runc && CGO_ENABLED=1 $(CROSS_ENV) $(GO) build -trimpath -tags 'seccomp urfave_cli_no_docs netgo osusergo' \
	  -ldflags '-s -w -extldflags -static -X main.version=$(RUNC_VERSION:v%=%) -X main.gitCommit=$(RUNC_VERSION)' -o $@ github.com/opencontainers/runc

$(BIN)/konnectivity-server: hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ sigs.k8s.io/apiserver-network-proxy/cmd/server

$(BIN)/konnectivity-agent: hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ sigs.k8s.io/apiserver-network-proxy/cmd/agent

$(BIN)/cert-manager-controller: hack/tools/cert-manager/go.mod hack/tools/cert-manager/go.sum hack/tools/cert-manager/controller/main.go
	cd hack/tools/cert-manager && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ ./controller

$(BIN)/cert-manager-cainjector: hack/tools/cert-manager/go.mod hack/tools/cert-manager/go.sum hack/tools/cert-manager/cainjector/main.go
	cd hack/tools/cert-manager && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ ./cainjector

$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## ---- iPXE for arm64 ------------------------------------------------------------

# kubefarm-pxe's arm64 UEFI iPXE, which bookworm's ipxe package lacks:
# Debian trixie's build of it, from that release's ipxe package (pinned by
# version and sha256 in hack/tools/ipxe/fetch-arm64.sh, docs/ipxe.md).
# Fetched again only when the script (which holds the pins) changes.
IPXE_ARM64 := $(BIN)/ipxe/ipxe-arm64.efi
IPXE_APT_PACKAGES := curl

$(IPXE_ARM64): hack/tools/ipxe/fetch-arm64.sh
	@$(MAKE) --no-print-directory deps APT_PACKAGES="$(IPXE_APT_PACKAGES)"
	hack/tools/ipxe/fetch-arm64.sh $@

.PHONY: ipxe-arm64
ipxe-arm64: $(IPXE_ARM64) ## bin/ipxe/ipxe-arm64.efi, kubefarm-pxe's arm64 UEFI iPXE, from Debian trixie's ipxe package (pinned).

## ---- generated code ----------------------------------------------------------

CHART := charts/kubefarm-operator

# RBAC markers are per binary: the manager's role from everything but the
# kubefarm-pxe packages, kubefarm-pxe's from its own.
MANAGER_PKGS := ./api/...;./cmd/kubefarm-manager/...;./controllers/...;./internal/...;./webhooks/...
PXE_PKGS     := ./cmd/kubefarm-pxe/...;./pxe/...

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy, CRDs, RBAC and webhook manifests, and copy them into the operator chart.
	$(CONTROLLER_GEN) object paths=./api/...
	rm -rf config/crd/bases config/rbac config/rbac-pxe config/webhook
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=kubefarm-manager webhook paths="$(MANAGER_PKGS)" \
	  output:rbac:dir=config/rbac output:webhook:dir=config/webhook
	$(CONTROLLER_GEN) rbac:roleName=kubefarm-pxe paths="$(PXE_PKGS)" output:rbac:dir=config/rbac-pxe
	rm -rf $(CHART)/files && mkdir -p $(CHART)/files/crds $(CHART)/files/rbac $(CHART)/files/webhook
	cp config/crd/bases/*.yaml $(CHART)/files/crds/
	cp config/rbac/role.yaml $(CHART)/files/rbac/
	cp config/rbac-pxe/role.yaml $(CHART)/files/rbac/pxe-role.yaml
	cp config/webhook/manifests.yaml $(CHART)/files/webhook/

.PHONY: verify-generated
verify-generated: generate ## Fail when generated files differ from what is committed.
	@if [ -n "$$(git status --porcelain -- api config $(CHART)/files)" ]; then \
	  echo "generated files are stale; run 'make generate' and commit:"; git status --porcelain -- api config $(CHART)/files; \
	  git --no-pager diff --stat -- api config $(CHART)/files; exit 1; fi

## ---- checks and tests ------------------------------------------------------------

GO_TEST_FLAGS ?= -count=1 -timeout 30m
TEST_PKGS     ?= ./...

.PHONY: verify-pins
verify-pins: ## Fail when the cert-manager API, the e2e image versions, the tenants' CoreDNS tag or a built containerd/runc differ from what hack/tools builds.
	@root="$(call mod_version,go.mod,github.com/cert-manager/cert-manager)"; \
	if [ "$$root" != "$(CERT_MANAGER_VERSION)" ]; then \
	  echo "go.mod pins cert-manager $$root but hack/tools/cert-manager builds $(CERT_MANAGER_VERSION)"; exit 1; fi
	@for pair in "KubernetesVersion $(KUBERNETES_VERSION)" "PreviousKubernetesVersion $(PREV_KUBERNETES_VERSION)"; do \
	  set -- $$pair; got=$$(sed -nE "s/^[[:space:]]*$$1[[:space:]]*=[[:space:]]*\"([^\"]+)\".*/\1/p" e2e/cluster/images.go); \
	  if [ "$$got" != "$$2" ]; then echo "e2e/cluster/images.go: $$1 is $$got but the tools build $$2"; exit 1; fi; done
	@# CoreDNS: the e2e image's tag and the tenants' default tag are the
	@# version hack/tools/coredns builds, and so is what a built bin/coredns
	@# says it is (a stale binary from an older pin fails here too).
	@for pair in "e2e/cluster/images.go CoreDNSVersion" "controllers/tenantcluster/reconciler.go DefaultCoreDNSTag"; do \
	  set -- $$pair; got=$$(sed -nE "s/^[[:space:]]*$$2[[:space:]]*=[[:space:]]*\"([^\"]+)\".*/\1/p" $$1); \
	  if [ "$$got" != "$(COREDNS_VERSION)" ]; then echo "$$1: $$2 is $$got but hack/tools/coredns builds $(COREDNS_VERSION)"; exit 1; fi; done
	@if [ -x $(BIN)/coredns ]; then got=$$($(BIN)/coredns -version | sed -nE 's/^CoreDNS-(.*)/v\1/p'); \
	  if [ "$$got" != "$(COREDNS_VERSION)" ]; then echo "bin/coredns is $$got but hack/tools/coredns pins $(COREDNS_VERSION) (make tools rebuilds it)"; exit 1; fi; fi
	@# The node image's runtime: what built binaries say they are.
	@if [ -x $(BIN)/containerd ]; then got=$$($(BIN)/containerd --version | awk '{print $$3}'); \
	  if [ "$$got" != "$(CONTAINERD_VERSION)" ]; then echo "bin/containerd is $$got but hack/tools/containerd pins $(CONTAINERD_VERSION) (rm it; make node-image rebuilds it)"; exit 1; fi; fi
	@if [ -x $(BIN)/runc ]; then got=v$$($(BIN)/runc --version | awk 'NR==1{print $$3}'); \
	  if [ "$$got" != "$(RUNC_VERSION)" ]; then echo "bin/runc is $$got but hack/tools/runc pins $(RUNC_VERSION) (rm it; make node-image rebuilds it)"; exit 1; fi; fi

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet and staticcheck (pinned).
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@# The end-to-end scenarios build only with the e2e tag; make
	@# test-arm64's with multiarch too (the arm64 boot chain and join).
	$(GO) vet -tags 'e2e multiarch' ./e2e/
	$(STATICCHECK) -tags 'e2e multiarch' ./e2e/
	$(GO) vet -tags multiarch ./internal/testing/bootchain/
	$(STATICCHECK) -tags multiarch ./internal/testing/bootchain/

# Debian packages the tests drive as real peers: busybox's udhcpc and ISC
# dhclient (DHCP clients in network namespaces), iproute2 (namespaces),
# tftp-hpa, atftp and curl (TFTP and HTTP clients), kea-admin (perfdhcp, a
# relay agent's traffic), and ipxe, whose binaries kubefarm-pxe serves
# (found at /usr/lib/ipxe, never committed); ipset and nftables, with
# netbase's /etc/protocols, which ipset reads, that the e2e tenants'
# kube-proxy image carries for its ipvs and nftables modes.
# The BMC emulators the power drivers are tested against (ENVIRONMENT.md,
# "BMC emulators"): openipmi's ipmi_sim with ipmitool, and libvirt with
# the Python libraries the vendored sushy-tools Redfish emulator runs on.
APT_PACKAGES := busybox-static isc-dhcp-client iproute2 tftp-hpa atftp kea-admin ipxe curl qemu-system-x86 ipxe-qemu ovmf ipset nftables netbase openipmi ipmitool libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients python3-libvirt python3-flask python3-tenacity python3-requests python3-bcrypt python3-webob

.PHONY: deps
deps: ## Install the Debian packages the tests need (as root; otherwise say which are missing).
	@missing=$$(for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing $$missing"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "missing Debian packages (run make as root to install them): $$missing"; exit 1; fi; fi

# CI keeps the head and the tail of a run's output: a failed run ends by
# repeating its failed tests' last lines (hack/failrecap), which an hour of
# end-to-end progress would otherwise push out of the excerpt.
FAILRECAP = $(GO) run ./hack/failrecap

.PHONY: test
test: deps tools verify-pins verify-generated lint ## Unit, integration (real kube-apiserver, etcd, cert-manager) and end-to-end tests.
	@mkdir -p $(BUILD)
	$(GO) test $(GO_TEST_FLAGS) -v $(TEST_PKGS) 2>&1 | tee $(BUILD)/test.log || { $(FAILRECAP) $(BUILD)/test.log; exit 1; }
	$(MAKE) --no-print-directory test-argocd-health
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory e2e
	@# A skipped test is not a passing test: the run fails loudly instead.
	@if grep -h -- '--- SKIP' $(BUILD)/test.log $(BUILD)/argocd-health.log $(BUILD)/e2e.log; then echo "tests were skipped (above); make test runs them all"; exit 1; fi
	@echo "$$(cat $(BUILD)/test.log $(BUILD)/argocd-health.log $(BUILD)/e2e.log | grep -c -- '--- PASS') passed, $$(cat $(BUILD)/test.log $(BUILD)/argocd-health.log $(BUILD)/e2e.log | grep -c -- '--- FAIL' || true) failed"

# kubefarm's ArgoCD health checks (examples/argocd/resource_customizations),
# judged by ArgoCD's own Lua code on the sample objects beside them, and the
# argocd-cm patch checked against them. The test is a Go module of its own
# (argo-cd pins other Kubernetes versions than kubefarm's go.mod), which is
# why $(TEST_PKGS) (./...) does not reach it.
.PHONY: test-argocd-health
test-argocd-health: ## ArgoCD health checks of every kubefarm kind, run by ArgoCD's Lua code (examples/argocd/healthtest).
	@mkdir -p $(BUILD)
	cd examples/argocd/healthtest && $(GO) test $(GO_TEST_FLAGS) -v ./... 2>&1 | tee $(BUILD)/argocd-health.log

# Every fuzz target over the network-facing parsers and routes (and
# kubefarm-etcd's --initial-cluster parser and --s3-prefix and --s3-bucket
# validators), briefly: the seed corpus always runs with the unit tests;
# this explores beyond it. A finding is written under the package's
# testdata/fuzz and fails the run (hack/fuzz.sh, which also runs a target
# once more after Go's fuzzing deadline race, and only then).
FUZZ_TIME ?= 10s
FUZZ_TARGETS := ./pxe/dhcp:FuzzHandlePacket ./pxe/dhcp:FuzzPeekMessageType ./pxe/httpboot:FuzzRoutes ./pxe/httpboot:FuzzHeartbeat ./pxe/httpboot:FuzzParseDiscoveryReport ./pxe/tftp:FuzzValidateName ./pxe/tftp:FuzzParseRequest \
  ./pxe/bootpaths:FuzzParse ./controllers/csrapproval:FuzzDecide ./internal/etcdsnapshot:FuzzParseInitialCluster \
  ./internal/s3target:FuzzValidatePrefix ./internal/s3target:FuzzValidateBucket ./internal/backupkeys:FuzzOpen ./internal/backupkeys:FuzzParseRecipients ./agent/render:FuzzNetworkd

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZ_TIME (default 10s).
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$pkg $$fn for $(FUZZ_TIME)"; \
	  GO=$(GO) hack/fuzz.sh $$pkg $$fn $(FUZZ_TIME) || exit 1; done

.PHONY: test-one
test-one: envtest-tools ## Run one test: make test-one PKG=./webhooks/nodepool RUN=TestFailsClosed
	$(GO) test -count=1 -v -run '$(RUN)' $(PKG)

# arm64 machines, outside make test (CI has no room for the emulation).
# Step 1: internal/testing/bootchain's arm64 machine (build tag multiarch):
# qemu-system-aarch64 (TCG) network-boots through the real kubefarm-pxe and
# the iPXE make ipxe-arm64 fetches, to its initrd's report. It needs the API
# server and etcd of the integration tests; a skip fails the target.
ARM64_APT_PACKAGES := qemu-system-arm qemu-efi-aarch64 ipxe busybox-static iproute2
.PHONY: test-arm64
test-arm64: $(IPXE_ARM64) $(BIN)/kube-apiserver $(BIN)/etcd ## Boot an arm64 UEFI machine (qemu-system-aarch64, TCG) through kubefarm-pxe and bin/ipxe/ipxe-arm64.efi, then join one to an e2e tenant (make e2e-arm64) (root; not part of make test).
	@$(MAKE) --no-print-directory deps APT_PACKAGES="$(ARM64_APT_PACKAGES)"
	@mkdir -p $(BUILD)
	KUBEFARM_IPXE_ARM64=$(IPXE_ARM64) $(GO) test -tags multiarch -count=1 -v -timeout 30m -run '^TestBootChainARM64$$' ./internal/testing/bootchain 2>&1 | tee $(BUILD)/test-arm64.log
	@if grep -h -- '--- SKIP' $(BUILD)/test-arm64.log; then echo "the arm64 boot was skipped (above): test-arm64 runs it"; exit 1; fi
	@# Then an arm64 machine joins a tenant of the e2e cluster.
	$(MAKE) --no-print-directory e2e-arm64

## ---- end-to-end ------------------------------------------------------------------

E2E_STATE := $(BUILD)/e2e
E2E_FLAGS := --state $(E2E_STATE) --bin $(BIN)

.PHONY: e2e-bin
e2e-bin:
	$(GO) build -o $(BIN)/e2e-cluster ./e2e/cmd/e2e-cluster

.PHONY: e2e-up
e2e-up: tools e2e-bin ## Bring up the local admin cluster (root; installs containerd, runc, CNI plugins when missing).
	$(BIN)/e2e-cluster up $(E2E_FLAGS)

.PHONY: e2e-down
e2e-down: e2e-bin ## Tear the admin cluster down; fails if anything is left behind.
	$(BIN)/e2e-cluster down $(E2E_FLAGS) --verify

# kubefarm-pxe carries bin/ipxe/ipxe-arm64.efi when make ipxe-arm64 has
# built it, and goes without it otherwise (a release requires it).
.PHONY: images
images: e2e-bin ## OCI layouts of kubefarm-manager and kubefarm-pxe (with Debian's iPXE binaries, and bin/ipxe/ipxe-arm64.efi when built) in _build/images, no Docker.
	@$(MAKE) --no-print-directory deps APT_PACKAGES=ipxe
	$(BIN)/e2e-cluster images --state $(E2E_STATE) --out $(BUILD)/images

# A release: kubefarm-manager, kubefarm-pxe and kubefarm-agent for
# linux/amd64 and linux/arm64 as one multi-arch index each, an SPDX SBOM
# attached to every image, and both charts (version and appVersion =
# VERSION, images defaulting to REGISTRY) pushed as OCI artifacts to
# REGISTRY/charts. hack/release does it with go-containerregistry and Helm's
# registry client (no Docker); _build/release/VERSION/release.json lists
# every digest, and the same commit gives the same digests. Credentials are
# the usual ones (~/.docker/config.json for images, `helm registry login`
# for charts). RELEASE_FLAGS takes --arch, --chart-registry, --allow-dirty.
# kubefarm-pxe's images carry Debian's x86 iPXE binaries and the arm64 one
# make ipxe-arm64 builds: a release must serve arm64 machines.
VERSION  ?=
REGISTRY ?=
.PHONY: release
release: ## Push a release: make release VERSION=x.y.z REGISTRY=ghcr.io/you (multi-arch images with SBOMs, OCI charts, release.json).
	@test -n "$(VERSION)" -a -n "$(REGISTRY)" || { echo "usage: make release VERSION=x.y.z REGISTRY=<registry>/<path>"; exit 2; }
	@$(MAKE) --no-print-directory deps APT_PACKAGES=ipxe
	@$(MAKE) --no-print-directory $(IPXE_ARM64)
	$(GO) run ./hack/release/cmd/release --version $(VERSION) --registry $(REGISTRY) --ipxe-arm64 $(IPXE_ARM64) $(RELEASE_FLAGS)

# After the scenarios, whatever their result, the release manifest and the
# live objects the e2e test wrote into $(E2E_ARGODIFF) are diffed with
# ArgoCD's own code (examples/argocd/healthtest/livediff): a drift fails the
# target. The directory is emptied first so that a run that fails before
# writing it is not compared with an older run's objects. The cluster is torn
# down in any case.
E2E_ARGODIFF = $(abspath $(BUILD))/e2e-argodiff

# A whole farm on this machine: the admin cluster (as make e2e-up), then a
# tenant cluster from examples/kubefarm/demo/values.yaml through
# charts/kubefarm, two qemu machines that netboot and join it, a workload
# across them. Everything is left running; make demo-down removes it.
.PHONY: demo
demo: deps node-image $(DEMO_TOOL_BINARIES) e2e-bin ## Run a tenant cluster with two netbooted machines on this machine (root; make demo-down removes it).
	$(BIN)/e2e-cluster up $(E2E_FLAGS) --previous-minor=false
	$(BIN)/e2e-cluster demo $(E2E_FLAGS) --node-image $$(cat $(BUILD)/node-image.dir)

.PHONY: demo-update
demo-update: node-image e2e-bin ## Roll the demo's machines to a variant of their node image (a helm upgrade of the demo release).
	$(BIN)/e2e-cluster demo-update $(E2E_FLAGS) --node-image $$(cat $(BUILD)/node-image.dir)

.PHONY: demo-down
demo-down: e2e-bin ## Remove everything make demo made and check nothing is left.
	$(BIN)/e2e-cluster down $(E2E_FLAGS) --verify

.PHONY: e2e
e2e: node-image e2e-up ## Build the node image (cached), bring up the admin cluster, run the end-to-end scenarios and the ArgoCD diff of their release, tear it down.
	@mkdir -p $(BUILD)
	@rm -rf $(E2E_ARGODIFF)
	@rc=0; KUBEFARM_NODE_IMAGE=$$(cat $(BUILD)/node-image.dir) KUBEFARM_ARGO_DIFF_DIR=$(E2E_ARGODIFF) $(GO) test -tags e2e -count=1 -v -timeout 70m ./e2e/ 2>&1 | tee $(BUILD)/e2e.log || rc=$$?; \
	(cd examples/argocd/healthtest && KUBEFARM_ARGO_DIFF_DIR=$(E2E_ARGODIFF) $(GO) test -tags e2e -count=1 -v -run TestRenderedMatchesLive ./livediff/ 2>&1 | tee -a $(BUILD)/e2e.log) || rc=1; \
	$(BIN)/e2e-cluster down $(E2E_FLAGS) --verify || rc=1; \
	if [ $$rc != 0 ]; then $(FAILRECAP) $(BUILD)/e2e.log; fi; exit $$rc

# An arm64 machine's join (e2e/arm64_test.go, build tags e2e and
# multiarch): an aarch64 qemu machine (TCG, Debian's AAVMF firmware)
# netboots the arm64 node image from the e2e cluster's kubefarm-pxe, which
# carries bin/ipxe/ipxe-arm64.efi, and joins a tenant. Not part of make
# test: an aarch64 machine under TCG on CI's two cores would take the cold
# run past its hour (docs/arm64.md has the times).
.PHONY: e2e-arm64
e2e-arm64: node-image-arm64 ipxe-arm64 e2e-up ## The arm64 machine's netboot and join on the e2e cluster (root), then tear it down.
	@$(MAKE) --no-print-directory deps APT_PACKAGES="qemu-system-arm qemu-efi-aarch64"
	@mkdir -p $(BUILD)
	@rc=0; KUBEFARM_NODE_IMAGE_ARM64=$$(cat $(BUILD)/node-image-arm64.dir) $(GO) test -tags 'e2e multiarch' -count=1 -v -timeout 60m \
	  -run '^TestARM64Join$$' ./e2e/ 2>&1 | tee $(BUILD)/e2e-arm64.log || rc=$$?; \
	$(BIN)/e2e-cluster down $(E2E_FLAGS) --verify || rc=1; \
	if [ $$rc != 0 ]; then $(FAILRECAP) $(BUILD)/e2e-arm64.log; fi; exit $$rc

## ---- node image ------------------------------------------------------------------

# flannel's daemon and CNI plugin for the node image, from their Go modules
# (hack/tools/flannel, hack/tools/flannel/cni). flanneld needs cgo (its udp
# backend), so it links the host's glibc: Debian bookworm, like the image.
FLANNEL_VERSION := $(call mod_version,hack/tools/flannel/go.mod,github.com/flannel-io/flannel)

$(BIN)/flanneld $(ARM64_BIN)/flanneld: hack/tools/flannel/go.mod hack/tools/flannel/go.sum
	@$(MAKE) --no-print-directory deps APT_PACKAGES="gcc $(CROSS_APT)"
	cd hack/tools/flannel && CGO_ENABLED=1 $(CROSS_ENV) $(GO) build -trimpath -ldflags '-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$(FLANNEL_VERSION)' -o $@ github.com/flannel-io/flannel

$(BIN)/cni/flannel $(ARM64_BIN)/cni/flannel: hack/tools/flannel/cni/go.mod hack/tools/flannel/cni/go.sum
	cd hack/tools/flannel/cni && $(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ github.com/containernetworking/plugins/plugins/meta/flannel

# libseccomp for arm64 (runc links it statically), unpacked from Debian's
# arm64 packages of the same version the host's amd64 one is.
$(ARM64_SYSROOT)/libseccomp.stamp: hack/apt-download-arch
	@rm -rf $(ARM64_SYSROOT) && mkdir -p $(ARM64_SYSROOT)
	@for deb in $$(hack/apt-download-arch arm64 $(BUILD)/debs-arm64 libseccomp-dev libseccomp2); do dpkg-deb -x $$deb $(ARM64_SYSROOT); done
	@touch $@

# What images/node/build.sh runs on the host (root): mmdebstrap, mksquashfs,
# depmod/modprobe for the kernel modules, busybox-static for the initrd.
NODE_IMAGE_APT_PACKAGES := mmdebstrap squashfs-tools kmod busybox-static

# kubefarm-agent, static. Always rebuilt (Go's cache makes that cheap); its
# bytes are part of the node image's cache key, and Go builds are
# reproducible, so an unchanged agent leaves the key unchanged.
# Both files are phony, not only the target: a bin/kubefarm-agent left from
# an older checkout must never stand in for this one's.
.PHONY: agent $(BIN)/kubefarm-agent $(ARM64_BIN)/kubefarm-agent
agent: $(BIN)/kubefarm-agent ## Build bin/kubefarm-agent (static), which the node image carries.
$(BIN)/kubefarm-agent $(ARM64_BIN)/kubefarm-agent:
	$(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ ./cmd/kubefarm-agent

# The kubectl plugin, static like the agent so that one file runs on any
# operator's Linux machine. Always rebuilt; Go's cache makes that cheap.
.PHONY: kubectl-plugin
kubectl-plugin: ## Build bin/kubectl-kubefarm, the kubectl plugin (docs/kubectl-plugin.md); put bin/ on PATH for `kubectl kubefarm`.
	$(TOOLS_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/kubectl-kubefarm ./cmd/kubectl-kubefarm

# After the build, TestBuiltImage, then once per image (a stamp beside its
# cache folder, keyed by the check script too): secret-check.sh builds the
# same inputs again with a token and key material around, fails if any
# artifact holds them, and fails unless the artifacts equal this build's
# byte for byte (the reproducibility check).
# node-image-arm64 is the same for arm64 machines, from the cross-built
# binaries in bin/linux-arm64; its Debian packages' scripts run under
# qemu-user (binfmt_misc), and it is recorded in _build/node-image-arm64.dir.
.PHONY: node-image node-image-arm64
node-image: $(BIN)/kubelet $(BIN)/flanneld $(BIN)/cni/flannel $(RUNTIME_BINARIES) $(BIN)/kubefarm-agent ## The node image (vmlinuz, initrd, rootfs.squashfs, manifest.json) into a cache keyed by its inputs; prints its folder (root).
node-image-arm64: $(ARM64_NODE_BINARIES) $(ARM64_BIN)/kubefarm-agent ## The arm64 node image, cross-built on this machine (root; qemu-user runs its packages' scripts).
node-image: NODE_IMAGE_BIN := $(BIN)
node-image-arm64: NODE_IMAGE_BIN := $(ARM64_BIN)
node-image-arm64: NODE_IMAGE_ENV := ARCH=arm64
node-image-arm64: NODE_IMAGE_APT_PACKAGES += qemu-user-static binfmt-support arch-test
node-image: NODE_IMAGE_RECORD := $(BUILD)/node-image.dir
node-image-arm64: NODE_IMAGE_RECORD := $(BUILD)/node-image-arm64.dir
node-image node-image-arm64:
	@$(MAKE) --no-print-directory deps APT_PACKAGES="$(NODE_IMAGE_APT_PACKAGES)"
	@export $(NODE_IMAGE_ENV) KUBELET=$(NODE_IMAGE_BIN)/kubelet FLANNELD=$(NODE_IMAGE_BIN)/flanneld FLANNEL_CNI=$(NODE_IMAGE_BIN)/cni/flannel \
	  CONTAINERD_BIN=$(NODE_IMAGE_BIN) AGENT=$(NODE_IMAGE_BIN)/kubefarm-agent && \
	dir=$$(images/node/build.sh) && \
	KUBEFARM_NODE_IMAGE=$$dir $(GO) test -tags nodeimage -count=1 -run TestBuiltImage ./images/node >&2 && \
	stamp="$$dir.checked-$$(sha256sum images/node/secret-check.sh | cut -c1-12)" && \
	if [ -e "$$stamp" ]; then echo "node-image: the secret and reproducibility checks passed for this image ($$stamp)" >&2; \
	else images/node/secret-check.sh "$$dir" >&2 && date -u +%FT%TZ >"$$stamp"; fi && \
	mkdir -p $(BUILD) && echo "$$dir" >$(NODE_IMAGE_RECORD) && echo "$$dir"

## ---- benchmarks ------------------------------------------------------------------

BENCH_APT_PACKAGES := dnsmasq-base tftpd-hpa nginx-light
DHCP_BENCH_RATES ?= 1000,5000,10000,20000,30000
DHCP_BENCH_MACHINES ?= 20000

.PHONY: bench
bench: envtest-tools ## Benchmarks: Go micro-benchmarks, the rollout of 50 fake machines, then the perfdhcp ladder against the kubefarm-pxe binary (20,000 Machines in a real API server, Events on) and dnsmasq (root).
	@$(MAKE) --no-print-directory deps APT_PACKAGES="$(APT_PACKAGES) $(BENCH_APT_PACKAGES)"
	@mkdir -p $(BUILD)
	$(GO) test -run '^$$' -bench . -benchmem ./pxe/... 2>&1 | tee $(BUILD)/bench-go.log
	$(MAKE) --no-print-directory bench-rollout
	$(MAKE) --no-print-directory bench-manager-memory
	$(GO) build -o $(BIN)/dhcp-bench ./hack/bench/dhcp
	$(BIN)/dhcp-bench -machines $(DHCP_BENCH_MACHINES) -rates $(DHCP_BENCH_RATES) -period 10 -out $(BUILD)/bench-dhcp 2>&1 | tee $(BUILD)/bench-dhcp.log
	$(GO) build -o $(BIN)/boot-bench ./hack/bench/boot
	$(BIN)/boot-bench -reps 4 -out $(BUILD)/bench-boot.json -dir $(BUILD)/bench-boot 2>&1 | tee $(BUILD)/bench-boot.log
	$(MAKE) --no-print-directory bench-tenant
	$(MAKE) --no-print-directory bench-node

# The rollout controller at scale (controllers/rollout/bench_test.go, envtest
# and the fake farm): 50 machines with maxUnavailable 5, the total time as a
# ratio to the ideal (ten waves of one machine's update, measured in the same
# run), the manager's CPU against a baseline without a rollout, its heap and
# RSS, and the CPU of kube-apiserver and etcd.
.PHONY: bench-rollout
bench-rollout: envtest-tools ## Rollout of 50 fake machines (envtest): time as a ratio to the ideal, manager CPU and memory, API server CPU.
	@mkdir -p $(BUILD)
	$(GO) test -count=1 -run '^$$' -bench BenchmarkRollout -benchtime 1x ./controllers/rollout/ 2>&1 | tee $(BUILD)/bench-rollout.log

# kubefarm-manager's API requests per minute while idle, by verb and
# resource, to the admin API server and to the tenants (hack/bench/idlecalls:
# a real API server, 20 TenantClusters whose credentials point at it, 5
# NodePools x 20 Machines; docs/architecture.md, "Reaching the tenants").
.PHONY: bench-idle
bench-idle: envtest-tools ## kubefarm-manager's API calls per minute while idle (20 tenants, 100 Machines), admin and tenant side.
	@mkdir -p $(BUILD)
	$(GO) run ./hack/bench/idlecalls -out $(BUILD)/bench-idle.json 2>$(BUILD)/bench-idle.log | tee $(BUILD)/bench-idle.txt

# kubefarm-manager's memory with 5,000 Secrets of 4 KiB that are not
# kubefarm's (internal/manager/manager_test.go, envtest): caching every
# Secret against caching only kubefarm's (docs/least-privilege.md).
.PHONY: bench-manager-memory
bench-manager-memory: envtest-tools ## kubefarm-manager's heap and RSS with 5,000 unrelated 4 KiB Secrets, caching all Secrets vs kubefarm's only.
	@mkdir -p $(BUILD)
	$(GO) test -count=1 -run '^$$' -bench BenchmarkSecretCacheMemory -benchtime 1x ./internal/manager/ 2>&1 | tee $(BUILD)/bench-manager-memory.log

# The e2e join as a measurement: seconds from power-on to each boot stage
# (DHCP, script, kernel, initrd, rootfs, config, report, CSR, node Ready,
# taint lifted) of one qemu (TCG) machine, from the Machine's Events and the
# Node, into bench-node.json, with the image's artifact sizes.
.PHONY: bench-node
bench-node: node-image e2e-up ## Power-on to Node Ready by stage for each of the join's two netbooted qemu machines, powered on one at a time (the scenario rolls them afterwards), and the node image's sizes (root; leaves the e2e cluster up).
	@mkdir -p $(BUILD)
	@dir=$$(cat $(BUILD)/node-image.dir); echo "node image $$dir:"; \
	for f in vmlinuz initrd rootfs.squashfs; do printf '  %-16s %6d MiB\n' $$f $$(( $$(stat -c %s $$dir/$$f) / 1048576 )); done | tee $(BUILD)/bench-node-sizes.txt
	KUBEFARM_NODE_IMAGE=$$(cat $(BUILD)/node-image.dir) KUBEFARM_BOOT_STAGES_OUT=$(abspath $(BUILD))/bench-node.json \
	  $(GO) test -tags e2e -count=1 -v -timeout 45m -run '^TestNodeJoin$$' ./e2e/ 2>&1 | tee $(BUILD)/bench-node.log
	@cat $(BUILD)/bench-node.json

TENANT_BENCH_RUNS    ?= 5
# Idle figures: each run's pods' memory and CPU this long after Ready, then
# this many tenants at once.
TENANT_BENCH_SETTLE  ?= 30s
TENANT_BENCH_SIDE    ?= 5
TENANT_BENCH_TENANTS ?= 50

.PHONY: bench-tenant
bench-tenant: envtest-tools ## TenantCluster benchmarks: manager memory and reconcile time with 50 tenants (envtest), then seconds to Ready, teardown times and idle memory and CPU, alone and 5 side by side, on the e2e cluster (root; leaves it up).
	@mkdir -p $(BUILD)
	$(GO) build -o $(BIN)/tenant-scale-bench ./hack/bench/tenantcluster/scale
	$(GO) build -o $(BIN)/tenant-ready-bench ./hack/bench/tenantcluster/ready
	$(BIN)/tenant-scale-bench -tenants $(TENANT_BENCH_TENANTS) -out $(BUILD)/bench-tenant-scale.json 2>&1 | tee $(BUILD)/bench-tenant-scale.log
	$(MAKE) --no-print-directory e2e-up
	$(BIN)/tenant-ready-bench -runs $(TENANT_BENCH_RUNS) -memory $(TENANT_BENCH_SETTLE) -side-by-side $(TENANT_BENCH_SIDE) \
	  -out $(BUILD)/bench-tenant-ready.json 2>&1 | tee $(BUILD)/bench-tenant-ready.log
