#!/usr/bin/env bash
# hack/generate.sh — regenerate what is generated from Go sources, and copy the Gateway API CRDs
# Tern needs out of the pinned gateway-api module. Run from anywhere; `make generate` calls it.
#
#   hack/generate.sh          regenerate in place
#   hack/generate.sh --check  regenerate into a scratch copy and fail (exit 1) if the tree differs,
#                             so CI can catch a forgotten regeneration
#
# What it writes:
#   operator/api/v1/zz_generated.deepcopy.go   controller-gen object (deepcopy methods)
#   deploy/crds/stunner/*.yaml                 controller-gen crd (stunner.l7mp.io/v1 CRDs), plus a
#                                              deprecated v1alpha1 with the same schema (hack/crdversions)
#   deploy/crds/gateway-api/*.yaml             GatewayClass and Gateway from the module's standard
#                                              channel; UDPRoute from its experimental channel,
#                                              the only one that still serves v1alpha2 (which
#                                              STUNner's documentation uses) next to v1
#   deploy/helm/tern/crds/*.yaml               copies of deploy/crds/stunner for the Helm chart
#   deploy/helm/tern/charts/gateway-api-crds/crds/*.yaml
#                                              copies of deploy/crds/gateway-api (the chart's
#                                              gatewayAPI.crds.enabled subchart)
#
# controller-gen is a Go tool dependency (go.mod `tool` line), so no download happens beyond the
# module cache. The gateway-api version is the one go.mod requires.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; fi

generate() { # $1: output root
	local out=$1
	go tool controller-gen object paths=./operator/api/...
	if [[ "$out" != "$root" ]]; then
		cp operator/api/v1/zz_generated.deepcopy.go "$out/operator/api/v1/"
	fi
	rm -rf "$out/deploy/crds/stunner"
	go tool controller-gen crd paths=./operator/api/... output:crd:dir="$out/deploy/crds/stunner"
	# STUNner's v1alpha1 served beside v1 with the same schema (hack/crdversions says why).
	go run ./hack/crdversions "$out"/deploy/crds/stunner/*.yaml

	local gwdir
	gwdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
	rm -rf "$out/deploy/crds/gateway-api"
	mkdir -p "$out/deploy/crds/gateway-api"
	for f in standard/gateway.networking.k8s.io_gatewayclasses.yaml \
		standard/gateway.networking.k8s.io_gateways.yaml \
		experimental/gateway.networking.k8s.io_udproutes.yaml; do
		install -m 0644 "$gwdir/config/crd/$f" "$out/deploy/crds/gateway-api/$(basename "$f")"
	done

	# Helm reads only files inside the chart, so it carries copies.
	rm -rf "$out/deploy/helm/tern/crds" "$out/deploy/helm/tern/charts/gateway-api-crds/crds"
	mkdir -p "$out/deploy/helm/tern/crds" "$out/deploy/helm/tern/charts/gateway-api-crds/crds"
	cp "$out"/deploy/crds/stunner/*.yaml "$out/deploy/helm/tern/crds/"
	cp "$out"/deploy/crds/gateway-api/*.yaml "$out/deploy/helm/tern/charts/gateway-api-crds/crds/"
}

if [[ $check == 0 ]]; then
	generate "$root"
	exit 0
fi

# --check: keep the tree as it is; compare a fresh generation against it. controller-gen writes
# deepcopy next to the types, so the original is saved first and put back afterwards.
scratch=$(mktemp -d)
mkdir -p "$scratch/operator/api/v1" "$scratch/deploy/crds" "$scratch/deploy/helm/tern/charts/gateway-api-crds"
cp operator/api/v1/zz_generated.deepcopy.go "$scratch/deepcopy.orig"
trap 'cp "$scratch/deepcopy.orig" "$root/operator/api/v1/zz_generated.deepcopy.go"; rm -rf "$scratch"' EXIT
generate "$scratch"
status=0
diff -u "$scratch/deepcopy.orig" "$scratch/operator/api/v1/zz_generated.deepcopy.go" || status=1
diff -ru deploy/crds/stunner "$scratch/deploy/crds/stunner" || status=1
diff -ru deploy/crds/gateway-api "$scratch/deploy/crds/gateway-api" || status=1
diff -ru deploy/helm/tern/crds "$scratch/deploy/helm/tern/crds" || status=1
diff -ru deploy/helm/tern/charts/gateway-api-crds/crds "$scratch/deploy/helm/tern/charts/gateway-api-crds/crds" || status=1
if [[ $status != 0 ]]; then
	echo "generate: generated files are stale; run hack/generate.sh" >&2
fi
exit $status
