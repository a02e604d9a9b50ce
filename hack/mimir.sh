#!/usr/bin/env bash
# hack/mimir.sh — make Grafana Mimir and VictoriaMetrics' vmagent available for the metrics
# end-to-end test (test/mimir), and print the path of the mimir binary:
#
#   mimir   built here from the Go module proxy, into
#           ${XDG_CACHE_HOME:-$HOME/.cache}/tern/mimir/<mimir version>/mimir
#   vmagent Debian's package victoria-metrics (installed with apt-get when vmagent is not on
#           PATH and --no-apt is not given)
#
# No Mimir release can be downloaded where Tern is built, and the proxy serves one pseudo-version
# of github.com/grafana/mimir only. Mimir's go.mod replaces several modules with Grafana's forks
# (mimir-prometheus, memberlist, ...), and `replace` directives of a dependency are ignored, so
# cmd/mimir is built from a throwaway module whose go.mod is Mimir's own (its requirements and
# replaces, so the versions are the ones Mimir is tested with) plus a requirement on Mimir, and
# whose go.sum is Mimir's.
#
# Cached: when the binary is there the script prints its path and exits at once. --check only
# reports (exit 1 when it is missing). Only the path goes to stdout; progress goes to stderr.
# Concurrent callers wait for one another on a lock. A cold build takes 10-20 minutes on two
# shared cores and about 3 GB of memory.
#
# Environment:
#   TERN_MIMIR_VERSION   module version of github.com/grafana/mimir
#                        (default v1.3.1-0.20260423142704-aced80d74930, the one the proxy serves)
#   TERN_MIMIR_BUILD_P   go build -p (default 1, so a shared machine stays usable)
set -euo pipefail

version=${TERN_MIMIR_VERSION:-v1.3.1-0.20260423142704-aced80d74930}
build_p=${TERN_MIMIR_BUILD_P:-1}

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tern/mimir
dir=$cache_root/$version
bin=$dir/mimir

log() { printf 'mimir: %s\n' "$*" >&2; }

is_bin() { [[ -f "$1" && -x "$1" ]]; }

check=0 apt=1
for arg in "$@"; do
	case $arg in
	--check) check=1 ;;
	--no-apt) apt=0 ;;
	*) log "unknown argument $arg"; exit 2 ;;
	esac
done

# vmagent first: it is quick and independent of the build.
if ! command -v vmagent >/dev/null 2>&1; then
	if ((check || !apt)); then
		log "vmagent is not on PATH (Debian package victoria-metrics)"
		((check)) && exit 1
	else
		if ((EUID == 0)); then
			as_root=()
		elif command -v sudo >/dev/null 2>&1; then
			as_root=(sudo)
			[[ -t 0 ]] || as_root+=(-n)
		else
			log "need root or sudo to install victoria-metrics"
			exit 1
		fi
		log "installing victoria-metrics (vmagent)"
		"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
		"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends victoria-metrics >&2
		# The package's service (a victoria-metrics server on :8428) is not what the test runs.
		if [[ -d /run/systemd/system ]]; then
			"${as_root[@]}" systemctl disable --now victoria-metrics.service >/dev/null 2>&1 || true
		fi
	fi
fi

if is_bin "$bin"; then
	echo "$bin"
	exit 0
fi
if ((check)); then
	log "no mimir in $dir (run hack/mimir.sh to build it)"
	exit 1
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
mkdir -p "$dir"

exec 9>"$cache_root/.lock"
if command -v flock >/dev/null && ! flock -n 9; then
	log "another build holds $cache_root/.lock; waiting for it"
	flock 9
fi
if is_bin "$bin"; then
	echo "$bin"
	exit 0
fi

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/tern-mimir.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=mod -p=$build_p"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

go_nice() { nice -n 10 go "$@" </dev/null; }

log "downloading github.com/grafana/mimir@$version"
mimir_json=$(cd "$work" && go_nice mod download -json "github.com/grafana/mimir@$version")
src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$mimir_json")
[[ -f "$src/go.mod" && -f "$src/go.sum" ]] || { log "no go.mod/go.sum of github.com/grafana/mimir@$version in the module cache"; exit 1; }

mod=$work/mod
mkdir -p "$mod"
cp "$src/go.mod" "$mod/go.mod"
cp "$src/go.sum" "$mod/go.sum"
chmod u+w "$mod/go.mod" "$mod/go.sum"
cd "$mod"
go mod edit -module tern-mimir-build -require "github.com/grafana/mimir@$version"
vpkg=github.com/grafana/mimir/pkg/util/version
ldflags="-s -w -X $vpkg.Version=$version -X $vpkg.Branch=module-proxy -X $vpkg.Revision=${version##*-}"
log "building cmd/mimir (10-20 minutes cold)"
CGO_ENABLED=0 go_nice build -trimpath -ldflags "$ldflags" -o "$work/mimir" github.com/grafana/mimir/cmd/mimir >&2
"$work/mimir" -version >/dev/null || { log "the built mimir does not run"; exit 1; }
cp "$work/mimir" "$dir/.mimir.$$"
chmod 0755 "$dir/.mimir.$$"
mv -f "$dir/.mimir.$$" "$bin"
log "ready in $((SECONDS - start))s: $bin"
echo "$bin"
