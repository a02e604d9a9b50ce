#!/usr/bin/env bash
# hack/envtest.sh — make the control-plane binaries envtest needs (kube-apiserver, etcd, and
# kubectl for manual tries) available, and print the directory that holds them, for
# KUBEBUILDER_ASSETS:
#
#   export KUBEBUILDER_ASSETS="$(hack/envtest.sh)"
#
# Release binaries cannot be downloaded where Tern is built, so they are compiled from the Go
# module proxy into ${XDG_CACHE_HOME:-$HOME/.cache}/tern/envtest/<k8s version>/. When the
# binaries are already there the script prints the directory and exits at once, so it is cheap
# to call before every test run. A cold build takes several minutes and ~2.5 GB of memory.
#
# With --check it only reports: it prints the directory and exits 0 when the binaries are
# there, and exits 1 without building when they are not.
#
# Only the directory goes to stdout; progress goes to stderr. Non-interactive (CI=true, no
# stdin). Concurrent callers wait for one another on a lock instead of building twice.
#
# Environment:
#   TERN_ENVTEST_K8S_VERSION   kubernetes version of kube-apiserver/kubectl (default 1.37.1;
#                              1.37.2's module zip is not served by the proxy)
#   TERN_ENVTEST_ETCD_VERSION  etcd server version (default 3.7.3)
#   TERN_ENVTEST_KUBECTL       build kubectl too (default 1; 0 skips it)
#   TERN_ENVTEST_BUILD_P       go build -p (default 1, so a shared machine stays usable)
#   TERN_ENVTEST_APT_ETCD      1 lets the script fall back to Debian's etcd-server when the
#                              etcd module cannot be built (default 1 under CI, else 0)
set -euo pipefail

k8s_version=${TERN_ENVTEST_K8S_VERSION:-1.37.1}
etcd_version=${TERN_ENVTEST_ETCD_VERSION:-3.7.3}
build_kubectl=${TERN_ENVTEST_KUBECTL:-1}
build_p=${TERN_ENVTEST_BUILD_P:-1}
if [[ -n "${CI:-}" && "${CI}" != "false" ]]; then apt_default=1; else apt_default=0; fi
apt_etcd=${TERN_ENVTEST_APT_ETCD:-$apt_default}

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tern/envtest
dir=$cache_root/$k8s_version

log() { printf 'envtest: %s\n' "$*" >&2; }

is_bin() { [[ -f "$1" && -x "$1" ]]; }
have_all() { is_bin "$dir/kube-apiserver" && is_bin "$dir/etcd"; }

if have_all; then
	echo "$dir"
	exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
	log "no binaries in $dir (run hack/envtest.sh to build them)"
	exit 1
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
mkdir -p "$dir"

# One builder at a time: a second caller (say, a test helper and make running together) waits
# here and then finds the binaries in place.
exec 9>"$cache_root/.lock"
if command -v flock >/dev/null && ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting for it"
	flock 9
fi
if have_all; then
	echo "$dir"
	exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-envtest.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out
mkdir -p "$out"

# The throwaway modules must not see a workspace or vendor settings of whatever repository the
# caller stands in; keep the caller's other GOFLAGS (e.g. -buildvcs=false).
export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=mod -p=$build_p"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
go_nice() { nice -n 10 go "$@" </dev/null; }

# install_bin SRC NAME puts a freshly built binary into the cache: copied next to its place,
# then renamed, so a reader never sees a half-written file even when $TMPDIR is on another
# filesystem than the cache.
install_bin() {
	local tmp=$dir/.$2.$$
	cp "$1" "$tmp"
	chmod 0755 "$tmp"
	if [[ -d "$dir/$2" ]]; then rm -rf "${dir:?}/$2"; fi # left by an early version of this script
	mv -f "$tmp" "$dir/$2"
}

build_kube() {
	local mod=$work/mod-kube
	local staging_version="v0.${k8s_version#*.}"
	mkdir -p "$mod"
	cd "$mod"
	log "kube-apiserver: k8s.io/kubernetes v$k8s_version (staging modules at $staging_version)"
	go mod init tern-envtest-kube >/dev/null 2>&1
	go mod edit -require "k8s.io/kubernetes@v$k8s_version"
	# k8s.io/kubernetes points its staging modules at ./staging; outside its own repository
	# each has to come from the proxy at the matching v0.x version. List them from its go.mod.
	local gomod
	gomod=$(go_nice mod download -json "k8s.io/kubernetes@v$k8s_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[[ -f "$gomod" ]] || { log "cannot find the go.mod of k8s.io/kubernetes@v$k8s_version"; return 1; }
	local staged
	staged=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*#\1#p' "$gomod")
	[[ -n "$staged" ]] || { log "no staging replacements in $gomod"; return 1; }
	local n=0 m
	for m in $staged; do
		go mod edit -replace "$m=$m@$staging_version"
		n=$((n + 1))
	done
	log "replaced $n k8s.io staging modules"
	cat >tools.go <<-'EOF'
		//go:build tools

		// Package tools pins the commands this throwaway module builds.
		package tools

		import (
			_ "k8s.io/kubernetes/cmd/kube-apiserver"
			_ "k8s.io/kubernetes/cmd/kubectl"
		)
	EOF
	log "resolving modules (downloads ~1 GB on a cold module cache)"
	go_nice mod tidy >&2
	local pkg=k8s.io/component-base/version
	local minor=${k8s_version#*.}
	minor=${minor%%.*}
	local ldflags="-s -w -X $pkg.gitVersion=v$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	log "building kube-apiserver (several minutes cold)"
	go_nice build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
	install_bin "$out/kube-apiserver" kube-apiserver
	if [[ "$build_kubectl" == 1 ]] && ! is_bin "$dir/kubectl"; then
		log "building kubectl"
		if go_nice build -trimpath -ldflags "$ldflags" -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl >&2; then
			install_bin "$out/kubectl" kubectl
		else
			log "kubectl failed to build; envtest does not need it, going on"
		fi
	fi
}

build_etcd() {
	local mod=$work/mod-etcd
	mkdir -p "$mod"
	cd "$mod"
	log "etcd: go.etcd.io/etcd/server/v3 v$etcd_version"
	go mod init tern-envtest-etcd >/dev/null 2>&1
	cat >tools.go <<-'EOF'
		//go:build tools

		// Package tools pins the command this throwaway module builds.
		package tools

		import _ "go.etcd.io/etcd/server/v3"
	EOF
	go mod edit -require "go.etcd.io/etcd/server/v3@v$etcd_version"
	go_nice mod tidy >&2 &&
		go_nice build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3 >&2 &&
		install_bin "$out/etcd" etcd
}

# etcd_from_apt unpacks Debian's etcd-server without installing it (no service gets started).
etcd_from_apt() {
	command -v apt-get >/dev/null || return 1
	log "falling back to Debian's etcd-server"
	local deb=$work/deb
	mkdir -p "$deb"
	cd "$deb"
	apt-get download etcd-server </dev/null >&2 || { apt-get update </dev/null >&2 && apt-get download etcd-server </dev/null >&2; } || return 1
	dpkg-deb -x etcd-server_*.deb root >&2
	local bin
	bin=$(find root -type f -name etcd -perm -u+x | head -n1)
	[[ -n "$bin" ]] || return 1
	cp "$bin" "$out/etcd"
	install_bin "$out/etcd" etcd
}

start=$SECONDS
if ! is_bin "$dir/etcd"; then
	if ! build_etcd; then
		if [[ "$apt_etcd" == 1 ]]; then
			etcd_from_apt || { log "no etcd: neither the module build nor apt worked"; exit 1; }
		else
			log "etcd failed to build (TERN_ENVTEST_APT_ETCD=1 allows Debian's etcd-server)"
			exit 1
		fi
	fi
fi
if ! is_bin "$dir/kube-apiserver"; then
	build_kube
fi
have_all || { log "binaries missing in $dir after the build"; exit 1; }
log "ready in $((SECONDS - start))s: $dir"
echo "$dir"
