#!/usr/bin/env bash
# hack/cluster.sh — a real single-node Kubernetes cluster on this machine, for the tests:
#
#   hack/cluster.sh up       start it (idempotent: a running cluster is left as it is)
#   hack/cluster.sh status   what runs, and the node
#   hack/cluster.sh exec CMD run CMD where the cluster is reachable (its network namespace,
#                            KUBECONFIG set, the binaries' directory first on PATH)
#   hack/cluster.sh down     stop everything and remove every trace
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, containerd and the
# kubelet (hack/cluster-bins.sh's binaries, Debian's containerd, runc and containernetworking-plugins)
# run as root in a network namespace of their own and in a mount namespace of their own (both
# bound to files in <work dir>/ns, not named in /run/netns), so that nothing they do reaches
# the host:
#   - the network namespace holds the node's address (10.244.0.1/24 on bridge tern0), the pods'
#     bridge (cni0, 10.88.0.0/16), their iptables rules and their ip_forward; the host's
#     network settings are never touched, and the API server (127.0.0.1:6443 and
#     10.244.0.1:6443) is reachable only from inside: use `hack/cluster.sh exec`;
#   - kube-proxy (iptables mode) writes its Service rules with the iptables of that network
#     namespace, and is configured to leave every conntrack setting alone (nf_conntrack_max and
#     the hash size are machine-wide); `up` fails if a KUBE- rule shows up in the host's tables;
#   - the mount namespace has a fresh tmpfs on /run and the work dir's own /var/lib and
#     /var/log bound over the host's, so the paths the kubelet and containerd hard-code
#     (/var/lib/kubelet/device-plugins, /var/log/pods, /var/log/containers, /run/containerd,
#     /run/netns) and every volume and overlay mount stay in there and go with it;
#   - pods' cgroups are under /tern-cluster in each cgroup v1 hierarchy, removed by `down`;
#   - the kubelet is built never to write machine-wide sysctls (see hack/cluster-bins.sh).
# Every process is started here, its PID recorded under the work dir and stopped by that PID.
#
# Images: the pause image (the sandbox image, tern.local/pause:3.10) and every bin/images/*.tar
# are imported into containerd's k8s.io namespace; nothing can be pulled.
#
# Environment:
#   TERN_CLUSTER_DIR   work dir (default /tmp/tern-cluster): state, logs, kubeconfig. Clusters
#                      with different work dirs run side by side: each has its own namespaces,
#                      and its cgroups go under tern-cluster-<basename of the work dir>
#   TERN_CLUSTER_IMAGES directory of image archives to import (default <repo>/bin/images)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${TERN_CLUSTER_DIR:-/tmp/tern-cluster}
netns=$work/ns/net # the network namespace, bound to a file (never /run/netns: iproute2's mount)
images=${TERN_CLUSTER_IMAGES:-$repo/bin/images}
node=tern-node
node_ip=10.244.0.1
pod_cidr=10.88.0.0/16
svc_cidr=10.96.0.0/16
svc_ip=10.96.0.1
cg_root=tern-cluster${TERN_CLUSTER_DIR:+-$(basename "$work")}
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy containerd kubelet)

log() { printf 'cluster: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# A pid file holds "PID START": the process's start time (field 22 of /proc/PID/stat) guards
# against signalling an unrelated process that got the PID of a dead component.
pidfile() { echo "$work/run/$1.pid"; }
starttime() { awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }
pidof_() {
	local f=$work/run/$1.pid pid st
	[[ -s "$f" ]] || return 1
	read -r pid st <"$f"
	[[ -n "$pid" && "$(starttime "$pid")" == "$st" ]] || return 1
	echo "$pid"
}
alive() { pidof_ "$1" >/dev/null; }
sock=$work/containerd/containerd.sock
ctr_() { ctr --address "$sock" --namespace k8s.io "$@"; }
in_ns() { nsenter --net="$netns" -- "$@"; }

tail_log() {
	local f=$work/log/$1.log
	[[ -f "$f" ]] || return 0
	printf '\n===== last lines of %s =====\n' "$f" >&2
	tail -n 40 "$f" >&2
	printf '===== end of %s =====\n\n' "$1" >&2
}

# fail NAME MSG: print the log tail of NAME (or of every component) and exit 1.
fail() {
	local c=$1
	shift
	log "FAILED: $*"
	if [[ -n "$c" ]]; then
		tail_log "$c"
	else
		for c in "${components[@]}"; do alive "$c" || tail_log "$c"; done
	fi
	log "the state is left in $work for a look; 'hack/cluster.sh down' removes it"
	exit 1
}

# wait_for SECONDS COMPONENT DESC CMD...: poll CMD every 0.2 s; fail loudly when COMPONENT dies
# or time runs out.
wait_for() {
	local secs=$1 c=$2 desc=$3
	shift 3
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [[ -n "$c" ]] && ! alive "$c"; then fail "$c" "$c exited while waiting for $desc"; fi
		((SECONDS < deadline)) || fail "$c" "no $desc after ${secs}s"
		sleep 0.2
	done
}

# start NAME CMD...: run CMD in the cluster's network and mount namespaces, logging to
# log/NAME.log, and record its PID (nsenter execs CMD, so $! is CMD's PID).
start() {
	local name=$1
	shift
	if alive "$name"; then return 0; fi
	nsenter --mount="$work/ns/mnt" --net="$netns" -- "$@" >>"$work/log/$name.log" 2>&1 </dev/null &
	local pid=$!
	echo "$pid $(starttime "$pid")" >"$(pidfile "$name")"
}

# --- certificates and kubeconfigs ---------------------------------------------------------

pki() {
	local p=$work/pki
	mkdir -p "$p"
	cd "$p"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=tern-cluster-ca 2>/dev/null
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	# cert NAME SUBJECT [SAN]
	cert() {
		openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
		local ext=$1.ext
		printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' >"$ext"
		if [[ -n "${3:-}" ]]; then
			printf 'extendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$3" >>"$ext"
		else
			printf 'extendedKeyUsage=clientAuth\n' >>"$ext"
		fi
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 -extfile "$ext" 2>/dev/null
	}
	cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:$node_ip,IP:$svc_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin "/O=system:masters/CN=tern-admin"
	cert node "/O=system:nodes/CN=system:node:$node"
	cert kcm /CN=system:kube-controller-manager
	cert scheduler /CN=system:kube-scheduler
	cert kube-proxy /CN=system:kube-proxy # bound to system:node-proxier by the default RBAC
	cd - >/dev/null
	kubeconfig admin >"$work/kubeconfig"
	kubeconfig node >"$work/kubelet.kubeconfig"
	kubeconfig kcm >"$work/kcm.kubeconfig"
	kubeconfig scheduler >"$work/scheduler.kubeconfig"
	kubeconfig kube-proxy >"$work/kube-proxy.kubeconfig"
}

kubeconfig() {
	cat <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: tern
		  cluster:
		    server: https://127.0.0.1:6443
		    certificate-authority: $work/pki/ca.crt
		users:
		- name: $1
		  user:
		    client-certificate: $work/pki/$1.crt
		    client-key: $work/pki/$1.key
		contexts:
		- name: tern
		  context: {cluster: tern, user: $1}
		current-context: tern
	EOF
}

# --- configs ------------------------------------------------------------------------------

configs() {
	mkdir -p "$work/cni/net.d" "$work/cni/ipam" "$work/containerd" "$work/kubelet"
	cat >"$work/cni/net.d/10-tern.conflist" <<-EOF
		{
		  "cniVersion": "0.4.0",
		  "name": "tern",
		  "plugins": [
		    {
		      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		      "ipam": {
		        "type": "host-local", "dataDir": "$work/cni/ipam",
		        "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]
		      }
		    },
		    {"type": "portmap", "capabilities": {"portMappings": true}}
		  ]
		}
	EOF
	# restrict_oom_score_adj: without CAP_SYS_RESOURCE runc cannot lower a sandbox's OOM score.
	cat >"$work/containerd/config.toml" <<-EOF
		version = 2
		root = "$work/containerd/root"
		state = "$work/containerd/state"
		oom_score = 0
		[grpc]
		  address = "$sock"
		[ttrpc]
		  address = "$sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$work/containerd/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "tern.local/pause:3.10"
		  restrict_oom_score_adj = true
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$work/cni/net.d"
	EOF
	# failCgroupV1: this machine has cgroups v1 only. protectKernelDefaults stays false: the
	# kubelet of hack/cluster-bins.sh only warns about kernel settings (true would make it refuse
	# to start here). The image GC thresholds keep the imported images: none can be pulled again.
	cat >"$work/kubelet/config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupRoot: /$cg_root
		containerRuntimeEndpoint: unix://$sock
		address: $node_ip
		port: 10250
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: 10248
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: false}
		  x509: {clientCAFile: $work/pki/ca.crt}
		authorization: {mode: AlwaysAllow}
		clusterDomain: cluster.local
		resolvConf: /etc/resolv.conf
		protectKernelDefaults: false
		failSwapOn: false
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
		nodeStatusUpdateFrequency: 2s
		syncFrequency: 5s
		fileCheckFrequency: 5s
		serializeImagePulls: false
	EOF
	# kube-proxy in iptables mode. conntrack: every field 0 means "leave the kernel's value":
	# the defaults would raise nf_conntrack_max and the conntrack hash size (machine-wide, no
	# namespace holds them) and the TCP timeouts. localhostNodePorts false: no route_localnet.
	# oomScoreAdj 0: there is no CAP_SYS_RESOURCE to lower it.
	cat >"$work/kube-proxy.yaml" <<-EOF
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $work/kube-proxy.kubeconfig}
		hostnameOverride: $node
		bindAddress: $node_ip
		healthzBindAddress: 127.0.0.1:10256
		metricsBindAddress: 127.0.0.1:10249
		mode: iptables
		clusterCIDR: $pod_cidr
		detectLocalMode: ClusterCIDR
		nodePortAddresses: [$node_ip/32]
		oomScoreAdj: 0
		iptables: {localhostNodePorts: false, minSyncPeriod: 100ms, syncPeriod: 30s}
		conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, tcpBeLiberal: false, udpTimeout: 0s, udpStreamTimeout: 0s}
	EOF
}

# --- namespaces ---------------------------------------------------------------------------

# The namespaces are bound to files in $work/ns, itself a private bind mount (a mount
# namespace's file may not be bound where the namespace would see it). `ip netns add` is not
# used: it leaves its shared bind mount of /run/netns on the host for good.
ns_dir_up() {
	findmnt "$work/ns" >/dev/null && return 0
	mkdir -p "$work/ns"
	mount --bind "$work/ns" "$work/ns"
	mount --make-private "$work/ns"
}

netns_up() {
	if ! findmnt "$netns" >/dev/null; then
		touch "$netns"
		unshare --net="$netns" true
	fi
	in_ns ip link set lo up
	if ! in_ns ip link show tern0 >/dev/null 2>&1; then
		in_ns ip link add tern0 type bridge
		in_ns ip addr add "$node_ip/24" dev tern0
		in_ns ip link set tern0 up
		in_ns ip route add default dev tern0
	fi
}

mountns_up() {
	[[ -e "$work/ns/mnt" ]] && findmnt "$work/ns/mnt" >/dev/null && return 0
	mkdir -p "$work/var/lib" "$work/var/log"
	touch "$work/ns/mnt"
	unshare --mount="$work/ns/mnt" --propagation private true
	nsenter --mount="$work/ns/mnt" -- sh -ec "
		mount -t tmpfs -o mode=755 tern-run /run
		mkdir -p /run/netns /run/lock
		mount --bind '$work/var/lib' /var/lib
		mount --bind '$work/var/log' /var/log
	"
}

cgroups_up() {
	local d
	for d in /sys/fs/cgroup/*/; do
		[[ -f "$d/cgroup.procs" && -f "$d/tasks" ]] || continue # v1 hierarchies only
		mkdir -p "$d$cg_root"
		if [[ -f "$d/cpuset.cpus" ]]; then
			cat "$d/cpuset.cpus" >"$d$cg_root/cpuset.cpus"
			cat "$d/cpuset.mems" >"$d$cg_root/cpuset.mems"
		fi
	done
}

# --- up -----------------------------------------------------------------------------------

kubectl_() { in_ns env KUBECONFIG="$work/kubeconfig" "$bins/kubectl" "$@"; }

# kube_proxy_synced: kube-proxy has written the kubernetes Service's rule (in the namespace).
kube_proxy_synced() { in_ns iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $svc_ip/32"; }

# host_kube_rules: the KUBE- lines of the host's own iptables (read only; kube-proxy must
# write none there).
host_kube_rules() { { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | { grep 'KUBE-' || true; } | sed 's/\[[0-9]*:[0-9]*\]//g' | sort; }

node_ready() {
	[[ "$(kubectl_ get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

up() {
	local t0=$SECONDS
	bins=$("$repo/hack/cluster-bins.sh" --check) || die "no cluster binaries: run hack/cluster-bins.sh first"
	command -v containerd >/dev/null && command -v runc >/dev/null && [[ -x /usr/lib/cni/bridge ]] && command -v iptables >/dev/null ||
		die "needs Debian's containerd, runc, containernetworking-plugins and iptables (apt-get install containerd runc containernetworking-plugins iptables)"
	[[ $EUID == 0 ]] || die "needs root (network and mount namespaces, cgroups)"

	if [[ -d "$work/run" ]]; then
		local c all=1
		for c in "${components[@]}"; do alive "$c" || all=0; done
		if [[ $all == 1 ]] && node_ready; then
			log "already up; KUBECONFIG=$work/kubeconfig (use: hack/cluster.sh exec kubectl ...)"
			return 0
		fi
		log "a partial cluster is in $work; taking it down first"
		down
	fi
	mkdir -p "$work/run" "$work/log" "$work/etcd"
	log "work dir $work, binaries $bins"
	pki
	configs
	ns_dir_up
	mountns_up
	netns_up
	cgroups_up

	start etcd "$bins/etcd" --data-dir "$work/etcd" --name tern \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster tern=http://127.0.0.1:2380 --unsafe-no-fsync --quota-backend-bytes 2147483648
	start containerd containerd --config "$work/containerd/config.toml"
	wait_for 30 etcd "etcd health" in_ns curl -sf http://127.0.0.1:2379/health

	local p=$work/pki
	start kube-apiserver "$bins/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$node_ip" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
		--client-ca-file "$p/ca.crt" --kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range "$svc_cidr" \
		--authorization-mode Node,RBAC --allow-privileged=true --kubelet-preferred-address-types InternalIP
	wait_for 60 kube-apiserver "API server readiness" kubectl_ get --raw /readyz

	start kube-controller-manager "$bins/kube-controller-manager" --kubeconfig "$work/kcm.kubeconfig" \
		--authentication-kubeconfig "$work/kcm.kubeconfig" --authorization-kubeconfig "$work/kcm.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key"
	start kube-scheduler "$bins/kube-scheduler" --kubeconfig "$work/scheduler.kubeconfig" \
		--authentication-kubeconfig "$work/scheduler.kubeconfig" --authorization-kubeconfig "$work/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false

	wait_for 30 containerd "containerd" ctr_ version
	import_images

	start kubelet "$bins/kubelet" --config "$work/kubelet/config.yaml" --kubeconfig "$work/kubelet.kubeconfig" \
		--root-dir "$work/kubelet" --node-ip "$node_ip" --hostname-override "$node" --v 2
	# kube-proxy reads the node's addresses at start and exits when they change later (as a
	# DaemonSet would restart it): it starts once the kubelet has registered the node.
	wait_for 60 kubelet "node $node registered" kubectl_ get node "$node"
	local host_rules
	host_rules=$(host_kube_rules)
	start kube-proxy "$bins/kube-proxy" --config "$work/kube-proxy.yaml" --v 2
	wait_for 120 kubelet "Ready node $node" node_ready
	wait_for 30 kube-proxy "kube-proxy's rules in the cluster's network namespace" kube_proxy_synced
	[[ "$(host_kube_rules)" == "$host_rules" ]] || fail kube-proxy "kube-proxy changed the HOST's iptables (KUBE- rules); take the cluster down"
	for c in "${components[@]}"; do alive "$c" || fail "$c" "$c is not running"; done
	log "up in $((SECONDS - t0))s; KUBECONFIG=$work/kubeconfig, reachable with: hack/cluster.sh exec kubectl get nodes"
}

import_images() {
	local f
	for f in "$bins/pause.tar" "$images"/*.tar; do
		[[ -f "$f" ]] || continue
		log "importing $f"
		ctr_ images import "$f" >&2 || fail containerd "cannot import $f"
	done
}

# --- down ---------------------------------------------------------------------------------

# stop_pids NAME=PID...: SIGTERM to all, then SIGKILL to those still there after 10 s.
stop_pids() {
	local a i left t=$SECONDS
	for a in "$@"; do kill "${a#*=}" 2>/dev/null || true; done
	for i in $(seq 100); do
		left=()
		for a in "$@"; do kill -0 "${a#*=}" 2>/dev/null && left+=("$a"); done
		((${#left[@]})) || return 0
		((i != 50)) || {
			log "still there 10 s after SIGTERM, killing: ${left[*]}"
			for a in "${left[@]}"; do kill -9 "${a#*=}" 2>/dev/null || true; done
		}
		sleep 0.2
	done
	log "could not stop: ${left[*]}"
}

# shim_pids: the containerd shims of this cluster's containerd (they re-parent to PID 1, so they
# are found by the socket address in their command line).
shim_pids() {
	local p
	for p in /proc/[0-9]*; do
		tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q "containerd-shim.* -address $sock " && echo "${p#/proc/}"
	done
	return 0
}

# cluster_pids: every process still in one of the cluster's cgroups (containers' processes).
cluster_pids() {
	local d
	for d in /sys/fs/cgroup/*/"$cg_root"; do
		[[ -d "$d" ]] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
	done | sort -u
}

down() {
	local t0=$SECONDS c pid
	[[ -d "$work" ]] || { log "nothing to take down"; return 0; }
	if alive kubelet; then stop_pids "kubelet=$(pidof_ kubelet)"; fi
	# Containers first, while containerd can still stop them.
	if alive containerd; then
		local t
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
		sleep 0.5
		for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
	fi
	local procs=()
	for c in kube-proxy kube-scheduler kube-controller-manager kube-apiserver containerd; do
		if alive "$c"; then procs+=("$c=$(pidof_ "$c")"); fi
	done
	for pid in $(shim_pids); do procs+=("containerd-shim=$pid"); done
	((${#procs[@]} == 0)) || stop_pids "${procs[@]}"
	if alive etcd; then stop_pids "etcd=$(pidof_ etcd)"; fi # last: the API server drains into it
	for pid in $(cluster_pids); do kill -9 "$pid" 2>/dev/null || true; done
	# cgroups, deepest first
	local d
	for d in /sys/fs/cgroup/*/"$cg_root"; do
		[[ -d "$d" ]] || continue
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		[[ -d "$d" ]] && log "could not remove cgroup $d"
	done
	# Each namespace goes with its last process and the bind mount of its file; the network
	# namespace takes its bridges, veths and iptables rules with it.
	if findmnt "$work/ns/mnt" >/dev/null 2>&1; then umount "$work/ns/mnt" || true; fi
	if findmnt "$netns" >/dev/null 2>&1; then umount "$netns" || log "could not unmount the network namespace $netns"; fi
	if findmnt "$work/ns" >/dev/null 2>&1; then umount "$work/ns" || true; fi
	local left
	left=$(findmnt -rn -o TARGET | grep -F "$work" || true)
	[[ -z "$left" ]] || die "mounts left under $work, not removing it: $left"
	rm -rf "$work"
	log "down in $((SECONDS - t0))s"
}

# --- status / exec ------------------------------------------------------------------------

status() {
	local c rc=0
	[[ -d "$work/run" ]] || { log "not up ($work has no state)"; return 1; }
	for c in "${components[@]}"; do
		if alive "$c"; then printf '%-24s running, pid %s\n' "$c" "$(pidof_ "$c")"; else
			printf '%-24s NOT running\n' "$c"
			rc=1
		fi
	done
	bins=$("$repo/hack/cluster-bins.sh" --check)
	kubectl_ get nodes -o wide || rc=1
	return $rc
}

exec_() {
	bins=$("$repo/hack/cluster-bins.sh" --check)
	findmnt "$netns" >/dev/null || die "not up"
	exec nsenter --net="$netns" -- env KUBECONFIG="$work/kubeconfig" PATH="$bins:$PATH" \
		TERN_CLUSTER_DIR="$work" "$@"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
exec)
	shift
	exec_ "$@"
	;;
*)
	echo "usage: $0 up|down|status|exec CMD..." >&2
	exit 2
	;;
esac
