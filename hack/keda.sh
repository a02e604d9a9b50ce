#!/usr/bin/env bash
# hack/keda.sh — make KEDA's operator and its metrics API server (the "adapter", which serves
# external.metrics.k8s.io) available for the cluster test of KEDA scaling on Mimir
# (test/cluster), and print the directory that holds them:
#
#   <dir>/keda           the operator (cmd/operator): watches ScaledObjects, makes their HPAs
#   <dir>/keda-adapter   the metrics API server (cmd/adapter): answers the HPAs' external
#                        metrics by asking the operator over gRPC
#   <dir>/crds/*.yaml    KEDA's CustomResourceDefinitions (the module's config/crd/bases; the
#                        kustomize patches there only bound stabilizationWindowSeconds)
#
# with <dir> = ${XDG_CACHE_HOME:-$HOME/.cache}/tern/keda/<KEDA version>.
#
# No KEDA release can be downloaded where Tern is built; the Go module proxy serves
# github.com/kedacore/keda/v2. Its go.mod has a replace directive, so `go install …@version`
# refuses it: the module is fetched with `go mod download` and built in its own directory (the
# module cache's read-only copy, with -mod=readonly, so its go.mod and go.sum are used as they
# are and nothing there is written). This repository's go.mod is never involved (GOWORK=off,
# and the build runs outside the repository).
#
# Cached: when both binaries and the CRDs are there the script prints the directory and exits
# at once. --check only reports (exit 1 when something is missing). Only the directory goes to
# stdout; progress goes to stderr. Concurrent callers wait for one another on a lock. A cold
# build (its modules downloaded, then compiled) took 16.5 minutes (990 s) with
# TERN_KEDA_BUILD_P=2 on two cores shared with other builds; the binaries are about 180 MB (keda)
# and 130 MB (keda-adapter).
#
# Environment:
#   TERN_KEDA_VERSION   module version of github.com/kedacore/keda/v2 (default v2.21.0)
#   TERN_KEDA_BUILD_P   go build -p (default 1, so a shared machine stays usable)
set -euo pipefail

version=${TERN_KEDA_VERSION:-v2.21.0}
build_p=${TERN_KEDA_BUILD_P:-1}
module=github.com/kedacore/keda/v2

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tern/keda
dir=$cache_root/$version

log() { printf 'keda: %s\n' "$*" >&2; }

ready() {
	[[ -x "$dir/keda" && -x "$dir/keda-adapter" && -f "$dir/crds/keda.sh_scaledobjects.yaml" ]]
}

check=0
for arg in "$@"; do
	case $arg in
	--check) check=1 ;;
	*) log "unknown argument $arg"; exit 2 ;;
	esac
done

if ready; then
	echo "$dir"
	exit 0
fi
if ((check)); then
	log "no KEDA $version in $dir (run hack/keda.sh to build it)"
	exit 1
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
mkdir -p "$dir"

exec 9>"$cache_root/.lock"
if command -v flock >/dev/null && ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting for it"
	flock 9
fi
if ready; then
	echo "$dir"
	exit 0
fi

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/tern-keda.XXXXXX")
trap 'rm -rf "$work"' EXIT

export GOWORK=off
export GOFLAGS="-mod=readonly -p=$build_p"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

go_nice() { nice -n 10 go "$@" </dev/null; }

log "downloading $module@$version"
json=$(cd "$work" && go_nice mod download -json "$module@$version")
src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$json")
[[ -f "$src/go.mod" && -d "$src/cmd/operator" && -d "$src/cmd/adapter" ]] ||
	{ log "no $module@$version source in the module cache"; exit 1; }

ldflags="-s -w -X $module/version.Version=${version#v} -X $module/version.GitCommit=module-proxy"
log "building cmd/operator and cmd/adapter from $src"
(cd "$src" && CGO_ENABLED=0 go_nice build -trimpath -ldflags "$ldflags" -o "$work/" ./cmd/operator ./cmd/adapter) >&2
[[ -x "$work/operator" && -x "$work/adapter" ]] || { log "the build made no binaries"; exit 1; }

mkdir -p "$dir/crds"
cp "$src"/config/crd/bases/*.yaml "$dir/crds/"
chmod u+w "$dir"/crds/*.yaml
cp "$work/adapter" "$dir/.keda-adapter.$$" && mv -f "$dir/.keda-adapter.$$" "$dir/keda-adapter"
cp "$work/operator" "$dir/.keda.$$" && mv -f "$dir/.keda.$$" "$dir/keda"
log "ready in $((SECONDS - start))s: $dir"
echo "$dir"
