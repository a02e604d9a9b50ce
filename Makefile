# Developer entry points. CI runs `make test` (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

# How long `make fuzz` explores each fuzz target. make test does not fuzz: its `go test` replays
# every target's committed corpus (testdata/fuzz), so its outcome never depends on what a fuzzer
# happens to find; campaigns use `make fuzz FUZZTIME=3m` (docs/security.md).
FUZZTIME ?= 20s
# Version of the images `make images` builds and `make deploy-version` points deploy/ at;
# hack/imagebuild defaults it to `git describe --tags --always --dirty`.
VERSION ?=

.PHONY: build run test test-race lint bench bench-webrtc bench-offload bench-micro bench-config generate fuzz certs helm-template images deploy-version cluster-e2e

# A static binary (CGO_ENABLED=0): it runs in an image with no libc, and an idle ternd does not
# map libc and ld.so (1.5-2 MB of its resident memory).
build:
	CGO_ENABLED=0 go build -o bin/ternd ./cmd/ternd

# Images of ternd and tern-operator built from source, no base image or registry, as archives
# bin/images/<program>-<version>.tar; prints their digests and how to load them (ctr, kind).
# SOURCE_DATE_EPOCH (default: the commit time) fixes every timestamp, so a commit gives one digest.
images:
	rm -f bin/images/*.tar # one version at a time: hack/cluster.sh imports every archive here
	go run ./hack/imagebuild -out bin/images $(if $(VERSION),-version '$(VERSION)')

# Points deploy/ (the kustomization's images block, the operator Deployment, the default
# Dataplane) at the images of VERSION; a release step, its diff is committed.
deploy-version:
	go run ./hack/imagebuild -set-deploy-tag deploy $(if $(VERSION),-version '$(VERSION)')

# ternd on 127.0.0.1:3478/udp (user "user", password "pass"); Ctrl-C stops it.
run: build
	bin/ternd -c deploy/examples/local.yaml

# Installs what the tests drive (coturn's tools, containerd, Debian's vmagent, and the cluster
# binaries and Grafana Mimir, built once into ~/.cache), runs every Go test (which replays each
# fuzz target's corpus without exploring), the dataplane and engine again under the race
# detector, then builds the images and runs the real-node cluster e2e.
test:
	hack/test-deps.sh
	go test -count=1 -timeout=20m ./...
	$(MAKE) test-race
	$(MAKE) images
	$(MAKE) cluster-e2e

# The dataplane and the engine under the race detector: they are where goroutines share
# state (listener and relay workers, the allocation table, config swaps).
test-race:
	go test -race -count=1 -timeout=20m ./dataplane/... ./turn/...

# The end-to-end tests on a real cluster of CLUSTER_NODES nodes (default 3; test/cluster, build
# tag "cluster"): builds the cluster's binaries once (hack/cluster-bins.sh, cached), starts the
# cluster afresh (hack/cluster.sh down, then NODES=$(CLUSTER_NODES) hack/cluster.sh up, importing
# bin/images/*.tar into each node), runs the tests in the control plane's network namespace and
# always takes it down. The tests that need three nodes skip (fail under CI=true) on fewer.
# Needs root and Debian's containerd, runc, containernetworking-plugins and
# iptables (hack/cluster.sh says so when one is missing). The tests are compiled before the
# cluster starts (-run '^$' runs none): its network namespace cannot reach the module proxy, so
# with a cold module cache the build would fail in there.
CLUSTER_NODES ?= 3
cluster-e2e:
	hack/cluster-bins.sh >/dev/null
	go test -count=1 -tags cluster -run '^$$' ./test/cluster/
	hack/cluster.sh down
	NODES=$(CLUSTER_NODES) hack/cluster.sh up
	rc=0; hack/cluster.sh exec go test -count=1 -tags cluster -v ./test/cluster/ || rc=$$?; \
	hack/cluster.sh down; exit $$rc

lint:
	@files="$$(gofmt -l .)"; if [ -n "$$files" ]; then echo "gofmt -l:"; echo "$$files"; exit 1; fi
	go vet ./...
	go tool staticcheck ./...

# ternd side by side with coturn, pion/turn and a raw UDP forwarder on 127.0.0.1 (30-35 min);
# writes BENCHMARKS.md and bench/results/. `hack/bench.sh --quick` is a one-minute smoke.
bench:
	hack/bench.sh

# The WebRTC-shaped matrix alone (issue 14: directions × transports with interleaved flows, the
# burst view, the webrtc profile at 1,000 and 5,000 allocations), < 20 min; then the report from
# every result in bench/results/.
bench-webrtc:
	hack/bench.sh --webrtc

# The eBPF offload (issue 15) beside ternd, the forwarder, coturn and pion, in
# network namespaces ternbench makes and removes (root, ~13 minutes), then the
# report with its "Offload (issue 15)" section.
bench-offload:
	hack/bench-offload.sh

# Issue 26's config at scale: 50 Gateways, 1,000 UDPRoutes, 10,000 endpoints on a real
# kube-apiserver (envtest); EndpointSlice change to rendered config, p50/p99 quiet and in a burst,
# operator CPU per change (BENCHMARKS.md, "Config at scale"). About a minute.
bench-config:
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go test -run='^$$' -bench=ConfigAtScale -benchtime=1x ./operator/controller/

# The engine's Go benchmarks (ns/op, allocs/op of the relay paths).
bench-micro:
	go test -run='^$$' -bench=. -benchmem ./turn/...

# Includes dataplane/offload's bpf2go step, which needs clang, llvm-strip, libbpf-dev and
# linux-libc-dev (apt-get install clang llvm libbpf-dev); its outputs are committed, so a build
# needs none of them.
generate:
	go generate ./...

# go test -fuzz takes one target of one package per run, so list them all and run each in turn.
fuzz:
	go test -list '^Fuzz' ./... \
	| awk '/^Fuzz/ { f[n++] = $$1; next } /^ok/ { for (i = 0; i < n; i++) print $$2, f[i]; n = 0 }' \
	| while read -r pkg fn; do \
		echo "== $$pkg $$fn"; \
		go test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) "$$pkg"; \
	done

# A self-signed certificate and key for the TLS/DTLS listeners of deploy/examples/local-tls.yaml.
certs:
	go run ./hack/certgen -out certs

# The Helm chart's default render, like `helm template tern deploy/helm/tern -n tern-system`, with no
# helm binary: deploy/helm's test binary renders it with Helm's library. VALUES=file adds a values
# file; CRDS=1 prints the CRDs too. The chart's tests (lint, goldens, kustomize comparison) run in
# make test.
helm-template:
	@mkdir -p bin
	@go test -c -o bin/helm-template.test ./deploy/helm
	@cd deploy/helm && ../../bin/helm-template.test -template \
		$(if $(VALUES),-values $(abspath $(VALUES))) $(if $(filter 1,$(CRDS)),-include-crds)
