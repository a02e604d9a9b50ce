#!/usr/bin/env bash
# hack/test-deps.sh — install the Debian packages the tests drive, if they are missing:
# coturn, for turnutils_uclient and turnutils_peer (test/e2e, test/docs) and turnserver (a peer
# server for comparisons); chromium, whose libwebrtc calls through ternd in test/e2e's TestChromium*; curl, which the README's command blocks run (test/docs); containerd, runc, the CNI plugins and iptables for the real-node cluster of
# test/cluster (hack/cluster.sh runs them in namespaces of its own). Before that it builds, or
# finds cached, the Kubernetes binaries (hack/envtest.sh's and hack/cluster-bins.sh's) and
# Grafana Mimir with Debian's vmagent for the metrics test of test/e2e (hack/mimir.sh), and
# KEDA's operator and metrics API server for the KEDA test of test/cluster (hack/keda.sh). `make
# test` runs it first.
#
# Idempotent: when every binary is already on PATH it does nothing, not even apt-get update.
# Non-interactive (CI=true, no stdin). Runs apt-get as root, or through sudo when not root
# (sudo -n when there is no terminal to ask for a password on).
#
# Installing coturn on a systemd machine enables and starts its service, which listens on
# port 3478 of every address and would collide with `make run`; the tests only need the
# binaries, so the service this script installed is disabled and stopped again.
set -euo pipefail
hack=$(dirname "$0")
# Two chains side by side, each building with go build -p 1 (the scripts' default): on two
# cores that keeps both busy, and one chain's module downloads overlap the other's compiling.
# Cold, one after another they took 43 minutes (README); warm each prints its directory at once.
(
	"$hack/envtest.sh" >/dev/null     # kube-apiserver + etcd for envtest, into the cache the tests read (internal/testenv)
	"$hack/cluster-bins.sh" >/dev/null # kubelet, controller-manager, scheduler, kube-proxy, pause image for hack/cluster.sh
) &
k8s=$!
(
	"$hack/mimir.sh" >/dev/null # Grafana Mimir (built, cached) and vmagent (apt) for test/e2e's TestMimirKEDA and test/cluster's TestKEDAScaling
	"$hack/keda.sh" >/dev/null  # KEDA's operator and metrics API server (built, cached) for test/cluster's TestKEDAScaling
) &
metrics=$!
rc=0
wait "$k8s" || { rc=$?; echo "test-deps: building the Kubernetes binaries failed (exit $rc)" >&2; }
wait "$metrics" || { rc=$?; echo "test-deps: building Mimir or KEDA failed (exit $rc)" >&2; }
((rc == 0)) || exit "$rc"

# binary:package pairs
deps=(turnutils_uclient:coturn turnutils_peer:coturn turnserver:coturn
	containerd:containerd ctr:containerd runc:runc iptables:iptables
	curl:curl     # curl: the README's and docs' command blocks that test/docs runs
	openssl:openssl # openssl s_client: OpenSSL's TLS 1.3 client against dataplane/listener/stream/tlsrecord
	chromium:chromium) # Debian's Chromium: its libwebrtc is the TURN client of test/e2e's TestChromium*

pkgs=()
# The real-node cluster of make cluster-e2e (hack/cluster.sh) runs pods with the CNI bridge plugin.
if [[ ! -x /usr/lib/cni/bridge ]]; then
	pkgs+=(containernetworking-plugins)
fi
for dep in "${deps[@]}"; do
	bin=${dep%%:*} pkg=${dep##*:}
	if ! command -v "$bin" >/dev/null 2>&1 && [[ " ${pkgs[*]} " != *" $pkg "* ]]; then
		pkgs+=("$pkg")
	fi
done
if ((${#pkgs[@]} == 0)); then
	exit 0
fi

if ((EUID == 0)); then
	as_root=()
elif command -v sudo >/dev/null 2>&1; then
	as_root=(sudo)
	[[ -t 0 ]] || as_root+=(-n)
else
	echo "test-deps: need root or sudo to install: ${pkgs[*]}" >&2
	exit 1
fi

echo "test-deps: installing ${pkgs[*]}" >&2
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}"

# The tests need the binaries only; a service the install started would be left running.
if [[ -d /run/systemd/system ]]; then
	for svc in coturn containerd; do
		if [[ " ${pkgs[*]} " == *" $svc "* ]]; then
			"${as_root[@]}" systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
		fi
	done
fi
