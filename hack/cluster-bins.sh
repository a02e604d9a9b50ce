#!/usr/bin/env bash
# hack/cluster-bins.sh — make the binaries of a real cluster (hack/cluster.sh)
# available and print the directory that holds them:
#
#   kube-controller-manager, kube-scheduler,          built here, into
#   kube-proxy, kubelet                               ${XDG_CACHE_HOME:-$HOME/.cache}/tern/cluster/<k8s version>/
#   kube-apiserver, etcd, kubectl                      hack/envtest.sh's, linked from its cache
#   pause.tar                                          the sandbox ("pause") image, a docker archive
#                                                      built from hack/pauseimage: nothing is pulled
#
# Like hack/envtest.sh, the Kubernetes commands are compiled from the Go module proxy in a
# throwaway module with k8s.io/kubernetes's staging modules replaced by their v0.x versions.
# The kubelet is built from a copy of the k8s.io/kubernetes module (a `replace` to a directory)
# in which one line is changed: at start-up the kubelet checks vm.overcommit_memory,
# vm.panic_on_oom, kernel.panic, kernel.panic_on_oops and kernel.keys.root_max* and, unless
# protectKernelDefaults is set, rewrites them. Those settings are machine-wide (no network or
# other namespace isolates them) and a test must never change them; protectKernelDefaults=true
# is no way out either, since it makes the kubelet refuse to start on a machine whose values
# differ. The copy only logs the differences (KernelTunableWarn).
#
# Cached: when every binary is there the script prints the directory and exits at once.
# --check only reports (exit 1 when something is missing). Only the directory goes to stdout;
# progress goes to stderr. Concurrent callers wait for one another on a lock.
#
# Environment:
#   TERN_CLUSTER_K8S_VERSION  kubernetes version (default 1.37.1, the envtest one)
#   TERN_CLUSTER_BUILD_P      go build -p (default 1, so a shared machine stays usable)
set -euo pipefail

k8s_version=${TERN_CLUSTER_K8S_VERSION:-1.37.1}
build_p=${TERN_CLUSTER_BUILD_P:-1}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tern/cluster
dir=$cache_root/$k8s_version

log() { printf 'cluster-bins: %s\n' "$*" >&2; }

is_bin() { [[ -f "$1" && -x "$1" ]]; }
built=(kube-controller-manager kube-scheduler kube-proxy kubelet)
linked=(kube-apiserver etcd kubectl)
have_all() {
	local b
	for b in "${built[@]}" "${linked[@]}"; do is_bin "$dir/$b" || return 1; done
	[[ -s "$dir/pause.tar" ]]
}

if have_all; then
	echo "$dir"
	exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
	log "binaries missing in $dir (run hack/cluster-bins.sh to build them)"
	exit 1
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
mkdir -p "$dir"

exec 9>"$cache_root/.lock"
if command -v flock >/dev/null && ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting for it"
	flock 9
fi
if have_all; then
	echo "$dir"
	exit 0
fi

start=$SECONDS

# kube-apiserver, etcd and kubectl: hack/envtest.sh's (built there if they are not yet).
envtest_dir=$(TERN_ENVTEST_K8S_VERSION=$k8s_version TERN_ENVTEST_BUILD_P=$build_p "$repo/hack/envtest.sh")
for b in "${linked[@]}"; do
	is_bin "$envtest_dir/$b" || { log "hack/envtest.sh left no $b in $envtest_dir"; exit 1; }
	ln -sfn "$envtest_dir/$b" "$dir/$b"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-cluster-bins.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
out=$work/out
mkdir -p "$out"

go_nice() { nice -n 10 go "$@" </dev/null; }

install_bin() {
	local tmp=$dir/.$2.$$
	cp "$1" "$tmp"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dir/$2"
}

# The pause image, from this repository's module (before the throwaway modules change GOFLAGS).
if [[ ! -s "$dir/pause.tar" ]]; then
	log "building the pause image"
	(
		cd "$repo"
		CGO_ENABLED=0 go_nice build -trimpath -ldflags "-s -w" -o "$out/pause" ./hack/pauseimage/pause
		go_nice run ./hack/pauseimage -binary "$out/pause" -o "$out/pause.tar"
	)
	cp "$out/pause.tar" "$dir/.pause.tar.$$"
	mv -f "$dir/.pause.tar.$$" "$dir/pause.tar"
fi

export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=mod -p=$build_p"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

minor=${k8s_version#*.}
minor=${minor%%.*}
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=v$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

# new_module DIR NAME CMD... makes a throwaway module in DIR requiring k8s.io/kubernetes with
# its staging modules replaced, and importing the listed commands.
new_module() {
	local mod=$1 name=$2
	shift 2
	local staging_version="v0.${k8s_version#*.}"
	mkdir -p "$mod"
	cd "$mod"
	go mod init "$name" >/dev/null 2>&1
	go mod edit -require "k8s.io/kubernetes@v$k8s_version"
	local staged m
	staged=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*#\1#p' "$kube_gomod")
	[[ -n "$staged" ]] || { log "no staging replacements in $kube_gomod"; return 1; }
	for m in $staged; do go mod edit -replace "$m=$m@$staging_version"; done
	{
		printf '//go:build tools\n\n// Package tools pins the commands this throwaway module builds.\npackage tools\n\nimport (\n'
		for m in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$m"; done
		printf ')\n'
	} >tools.go
}

kube_json=$(go_nice mod download -json "k8s.io/kubernetes@v$k8s_version")
kube_gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$kube_json")
kube_src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$kube_json")
[[ -f "$kube_gomod" && -d "$kube_src" ]] || { log "cannot find k8s.io/kubernetes@v$k8s_version in the module cache"; exit 1; }

cp_bins=(kube-controller-manager kube-scheduler kube-proxy)
cp_missing=()
for b in "${cp_bins[@]}"; do is_bin "$dir/$b" || cp_missing+=("$b"); done
if ((${#cp_missing[@]})); then
	new_module "$work/mod-cp" tern-cluster-cp "${cp_bins[@]}"
	log "resolving modules for ${cp_bins[*]}"
	go_nice mod tidy >&2
	for b in "${cp_missing[@]}"; do
		is_bin "$dir/$b" && continue
		log "building $b (minutes cold)"
		go_nice build -trimpath -ldflags "$ldflags" -o "$out/$b" "k8s.io/kubernetes/cmd/$b" >&2
		install_bin "$out/$b" "$b"
	done
fi

if ! is_bin "$dir/kubelet"; then
	# The copy of k8s.io/kubernetes with the kernel-defaults check turned into a warning.
	src=$work/kubernetes
	cp -r "$kube_src" "$src"
	chmod -R u+w "$src"
	cm=$src/pkg/kubelet/cm/container_manager_linux.go
	grep -q '^	b := KernelTunableModify$' "$cm" || { log "$cm: the kernel-tunables line to patch is not there"; exit 1; }
	sed -i 's/^	b := KernelTunableModify$/	b := KernelTunableWarn \/\/ tern: never write machine-wide sysctls/' "$cm"
	new_module "$work/mod-kubelet" tern-cluster-kubelet kubelet
	go mod edit -replace "k8s.io/kubernetes=$src"
	log "resolving modules for kubelet"
	go_nice mod tidy >&2
	log "building kubelet, kernel-defaults check patched to warn (minutes cold)"
	go_nice build -trimpath -ldflags "$ldflags" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet >&2
	install_bin "$out/kubelet" kubelet
fi

have_all || { log "binaries missing in $dir after the build"; exit 1; }
log "ready in $((SECONDS - start))s: $dir"
echo "$dir"
