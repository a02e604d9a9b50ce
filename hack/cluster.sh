#!/usr/bin/env bash
# hack/cluster.sh — a real Kubernetes cluster of one or more nodes on this machine, for the tests:
#
#   hack/cluster.sh up         start it (idempotent: a running cluster of as many nodes is left
#                              as it is; one of another size is taken down and started afresh)
#   hack/cluster.sh status     what runs, and the nodes
#   hack/cluster.sh exec CMD   run CMD where the API server and every node are reachable (the
#                              control plane's network namespace, KUBECONFIG set, the
#                              binaries' directory first on PATH)
#   hack/cluster.sh node-exec NODE CMD   run CMD in node NODE's network namespace (tern-node-2)
#   hack/cluster.sh node-kill NODE   lose node NODE: SIGKILL to its kubelet, kube-proxy,
#                              containerd, shims and containers (by PID, only this script's)
#   hack/cluster.sh node-start NODE  start a killed node's processes again, wait until Ready
#   hack/cluster.sh down       stop everything and remove every trace
#
# The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) runs in a
# network namespace of its own; it holds the bridge tern0 (10.244.0.1/24, the API server's
# address, and fd00:244::1/64) that joins the nodes. Each of the NODES nodes, tern-node-1 ... tern-node-N, runs its
# containerd, kubelet and kube-proxy (hack/cluster-bins.sh's binaries, Debian's containerd, runc
# and containernetworking-plugins) in a network namespace and a mount namespace of its own; all
# are bound to files in <work dir>/ns, not named in /run/netns, so nothing they do reaches the
# host:
#   - node i's network namespace holds its addresses 10.244.0.(10+i)/24 and fd00:244::(10+i)/64
#     on eth0 (a veth whose other end is on tern0), its pods' bridge cni0 with their subnets
#     10.88.i.0/24 and fd00:88:0:i::/64 (the CNI bridge plugin, host-local addresses: each pod
#     gets one of each, so status.podIPs lists both), a route to every other node's pod subnets
#     via that node's addresses, its iptables rules and its forwarding (IPv4 and IPv6); the
#     control plane's namespace has routes to every pod subnet of both families and to the
#     Services (10.96.0.0/16, via tern-node-1, whose kube-proxy rules translate them), so
#     `exec` reaches pods, nodes and Services; each Node's spec.podCIDRs names its two pod
#     subnets (written by `up`, as kube-controller-manager's node IPAM would), which is how
#     tern-operator sees a dual-stack cluster; every IPv6 address is a ULA (fd00::/8) inside the
#     cluster's namespaces; the host's network settings are never touched, and nothing of the
#     cluster is reachable from the host;
#   - Services are IPv4 only (the API server has one Service range, kube-proxy one cluster
#     CIDR and IPv4 node-port addresses): pods are dual-stack, Services are not. With a
#     dual-stack Service range kube-proxy writes every Gateway's Service (PreferDualStack on a
#     dual-stack cluster) for IPv6 too, 43-76% more rule-sync time, and runs with it lost packets
#     in other tests, not reproduced since (bench/CLUSTER.md, "IPv6 through the offload in a
#     pod"; DUALSTACK_SERVICES=1 brings it back). An IPv6 peer is named by a selectorless
#     headless Service and an EndpointSlice of addressType IPv6, which need no Service range;
#   - kube-proxy (iptables mode) writes its Service rules with the iptables of its node's
#     network namespace, and is configured to leave every conntrack setting alone
#     (nf_conntrack_max and the hash size are machine-wide); `up` fails if a KUBE- rule shows up
#     in the host's tables;
#   - a node's mount namespace has a fresh tmpfs on /run and the node's own /var/lib and
#     /var/log (in the work dir) bound over the host's, so the paths the kubelet and containerd
#     hard-code (/var/lib/kubelet/device-plugins, /var/log/pods, /var/log/containers,
#     /run/containerd, /run/netns) and every volume and overlay mount stay in there and go with it;
#   - pods' cgroups are under tern-cluster[-<work dir name>]/<node> in each cgroup v1
#     hierarchy, removed by `down`;
#   - the kubelet is built never to write machine-wide sysctls (see hack/cluster-bins.sh).
# The API server has the aggregation layer's settings (a front-proxy CA and client certificate
# of their own, --enable-aggregator-routing): an extension API server registered as an
# APIService, such as KEDA's metrics API server, may run as a process in the control plane's
# namespace, named by a Service without selector whose Endpoints hold 10.244.0.1 and its port
# (test/cluster's TestKEDAScaling does that).
# Every process is started here, its PID recorded under the work dir and stopped by that PID.
#
# Images: the pause image (the sandbox image, tern.local/pause:3.10) and every bin/images/*.tar
# are imported into each node's containerd (its k8s.io namespace); nothing can be pulled.
#
# Environment:
#   NODES              how many nodes `up` starts (default 1, the quick one; make cluster-e2e
#                      uses 3). The other commands read the size from the work dir.
#   TERN_CLUSTER_DIR   work dir (default /tmp/tern-cluster): state, logs, kubeconfig. Clusters
#                      with different work dirs run side by side: each has its own namespaces,
#                      and its cgroups go under tern-cluster-<basename of the work dir>
#   TERN_CLUSTER_IMAGES directory of image archives to import (default <repo>/bin/images)
#   DUALSTACK_SERVICES 1: `up` gives Services both families too (a second, IPv6 Service range
#                      fd00:96::/112, kube-proxy's IPv6 cluster CIDR and node-port addresses),
#                      as the cluster had it at first on 2026-11-27; only to repeat the
#                      measurement of bench/CLUSTER.md (make cluster-e2e passes it through)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${TERN_CLUSTER_DIR:-/tmp/tern-cluster}
netns=$work/ns/net # the control plane's network namespace, bound to a file (never /run/netns)
images=${TERN_CLUSTER_IMAGES:-$repo/bin/images}
cp_ip=10.244.0.1 # the API server's address on tern0
cp_ip6=fd00:244::1 # the control plane's IPv6 address on tern0 (a ULA, as is every IPv6 address here)
pod_cidr=10.88.0.0/16
pod_cidr6=fd00:88::/48
svc_cidr=10.96.0.0/16
svc_ip=10.96.0.1
svc_cidr6=fd00:96::/112 # only with DUALSTACK_SERVICES=1
svc_ranges=$svc_cidr proxy_cidrs=$pod_cidr
if [[ "${DUALSTACK_SERVICES:-}" == 1 ]]; then svc_ranges=$svc_cidr,$svc_cidr6 proxy_cidrs=$pod_cidr,$pod_cidr6; fi
cg_root=tern-cluster${TERN_CLUSTER_DIR:+-$(basename "$work")}
cp_components=(etcd kube-apiserver kube-controller-manager kube-scheduler)
node_components=(containerd kubelet kube-proxy)

# The nodes: NODES for `up`; the work dir's nodes/ for everything else.
node_count() {
	local n
	if [[ -s "$work/nodes.count" ]]; then n=$(<"$work/nodes.count"); else n=${NODES:-1}; fi
	[[ "$n" =~ ^[1-9]$ ]] || die "NODES=$n: want 1 to 9"
	echo "$n"
}
node_name() { echo "tern-node-$1"; }
node_ip() { echo "10.244.0.$((10 + $1))"; }
node_pod_cidr() { echo "10.88.$1.0/24"; }
node_ip6() { echo "fd00:244::$((10 + $1))"; }
node_pod_cidr6() { echo "fd00:88:0:$1::/64"; }
node_dir() { echo "$work/nodes/tern-node-$1"; }
node_netns() { echo "$work/ns/tern-node-$1.net"; }
node_mntns() { echo "$work/ns/tern-node-$1.mnt"; }
node_sock() { echo "$(node_dir "$1")/containerd/containerd.sock"; }
# components: every component's name (a node's are NODE.COMPONENT).
components() {
	local i c
	printf '%s\n' "${cp_components[@]}"
	for ((i = 1; i <= $(node_count); i++)); do
		for c in "${node_components[@]}"; do echo "$(node_name "$i").$c"; done
	done
}

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
ctr_() { ctr --address "$(node_sock "$1")" --namespace k8s.io "${@:2}"; }
in_ns() { nsenter --net="$netns" -- "$@"; }
in_node() { nsenter --net="$(node_netns "$1")" -- "${@:2}"; }

tail_log() {
	local f=$work/log/$1.log
	[[ -f "$f" ]] || return 0
	printf '\n===== last lines of %s =====\n' "$f" >&2
	tail -n 40 "$f" >&2
	printf '===== end of %s =====\n\n' "$1" >&2
}

# fail NAME MSG: print the log tail of NAME (or of every component not running) and exit 1.
fail() {
	local c=$1
	shift
	log "FAILED: $*"
	if [[ -n "$c" ]]; then
		tail_log "$c"
	else
		for c in $(components); do alive "$c" || tail_log "$c"; done
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

# start NAME NODE CMD...: run CMD, logging to log/NAME.log, and record its PID (nsenter execs
# CMD, so $! is CMD's PID): in the control plane's network namespace when NODE is 0, else in
# node NODE's network and mount namespaces.
start() {
	local name=$1 i=$2
	shift 2
	if alive "$name"; then return 0; fi
	if ((i == 0)); then
		nsenter --net="$netns" -- "$@" >>"$work/log/$name.log" 2>&1 </dev/null &
	else
		nsenter --mount="$(node_mntns "$i")" --net="$(node_netns "$i")" -- "$@" >>"$work/log/$name.log" 2>&1 </dev/null &
	fi
	local pid=$!
	echo "$pid $(starttime "$pid")" >"$(pidfile "$name")"
}

# --- certificates and kubeconfigs ---------------------------------------------------------

pki() {
	local p=$work/pki i
	mkdir -p "$p"
	cd "$p"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=tern-cluster-ca 2>/dev/null
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	# cert NAME SUBJECT [SAN]
	cert() {
		local ca=${4:-ca}
		openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
		local ext=$1.ext
		printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' >"$ext"
		if [[ -n "${3:-}" ]]; then
			printf 'extendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$3" >>"$ext"
		else
			printf 'extendedKeyUsage=clientAuth\n' >>"$ext"
		fi
		openssl x509 -req -in "$1.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -out "$1.crt" -days 2 -extfile "$ext" 2>/dev/null
	}
	cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:$cp_ip,IP:$svc_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin "/O=system:masters/CN=tern-admin"
	# Each kubelet its own identity: the Node authorizer lets it touch its node's objects only.
	for ((i = 1; i <= $(node_count); i++)); do cert "$(node_name "$i")" "/O=system:nodes/CN=system:node:$(node_name "$i")"; done
	cert kcm /CN=system:kube-controller-manager
	cert scheduler /CN=system:kube-scheduler
	cert kube-proxy /CN=system:kube-proxy # bound to system:node-proxier by the default RBAC
	# The aggregation layer (extension API servers such as KEDA's metrics server): the API
	# server proxies to them with this client certificate, of a CA of its own, and they trust
	# the X-Remote-User/Group headers of requests signed by that CA and name only.
	openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 2 -subj /CN=tern-front-proxy-ca 2>/dev/null
	cert front-proxy-client /CN=front-proxy-client "" front-proxy-ca
	cd - >/dev/null
	kubeconfig admin https://127.0.0.1:6443 >"$work/kubeconfig"
	kubeconfig kcm https://127.0.0.1:6443 >"$work/kcm.kubeconfig"
	kubeconfig scheduler https://127.0.0.1:6443 >"$work/scheduler.kubeconfig"
	# The nodes reach the API server across tern0.
	kubeconfig kube-proxy "https://$cp_ip:6443" >"$work/kube-proxy.kubeconfig"
	for ((i = 1; i <= $(node_count); i++)); do
		mkdir -p "$(node_dir "$i")"
		kubeconfig "$(node_name "$i")" "https://$cp_ip:6443" >"$(node_dir "$i")/kubelet.kubeconfig"
	done
}

# kubeconfig USER SERVER
kubeconfig() {
	cat <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: tern
		  cluster:
		    server: $2
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

# node_configs I: node I's CNI, containerd, kubelet and kube-proxy configs, in its node dir.
node_configs() {
	local i=$1 d name ip sock
	d=$(node_dir "$i") name=$(node_name "$i") ip=$(node_ip "$i") sock=$(node_sock "$i")
	mkdir -p "$d/cni/net.d" "$d/cni/ipam" "$d/containerd" "$d/kubelet" "$d/var/lib" "$d/var/log"
	cat >"$d/cni/net.d/10-tern.conflist" <<-EOF
		{
		  "cniVersion": "0.4.0",
		  "name": "tern",
		  "plugins": [
		    {
		      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		      "ipam": {
		        "type": "host-local", "dataDir": "$d/cni/ipam",
		        "ranges": [[{"subnet": "$(node_pod_cidr "$i")"}], [{"subnet": "$(node_pod_cidr6 "$i")"}]],
		        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
		      }
		    },
		    {"type": "portmap", "capabilities": {"portMappings": true}}
		  ]
		}
	EOF
	# restrict_oom_score_adj: without CAP_SYS_RESOURCE runc cannot lower a sandbox's OOM score.
	cat >"$d/containerd/config.toml" <<-EOF
		version = 2
		root = "$d/containerd/root"
		state = "$d/containerd/state"
		oom_score = 0
		[grpc]
		  address = "$sock"
		[ttrpc]
		  address = "$sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$d/containerd/opt"
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
		    conf_dir = "$d/cni/net.d"
	EOF
	# failCgroupV1: this machine has cgroups v1 only. protectKernelDefaults stays false: the
	# kubelet of hack/cluster-bins.sh only warns about kernel settings (true would make it refuse
	# to start here). The image GC thresholds keep the imported images: none can be pulled again.
	cat >"$d/kubelet/config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupRoot: /$cg_root/$name
		containerRuntimeEndpoint: unix://$sock
		address: $ip
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
	cat >"$d/kube-proxy.yaml" <<-EOF
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $work/kube-proxy.kubeconfig}
		hostnameOverride: $name
		bindAddress: $ip
		healthzBindAddress: 127.0.0.1:10256
		metricsBindAddress: 127.0.0.1:10249
		mode: iptables
		clusterCIDR: $proxy_cidrs
		detectLocalMode: ClusterCIDR
		nodePortAddresses: [$ip/32$([[ "${DUALSTACK_SERVICES:-}" != 1 ]] || echo ", $(node_ip6 "$i")/128")]
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

# new_netns FILE: a network namespace bound to FILE, lo up.
new_netns() {
	if ! findmnt "$1" >/dev/null; then
		touch "$1"
		unshare --net="$1" true
	fi
	nsenter --net="$1" -- ip link set lo up
}

# netns_up: the control plane's namespace with the bridge tern0, and each node's namespace with
# eth0 on tern0, its addresses, forwarding (a namespace's own settings, both families) and the
# routes to the other nodes' pod subnets; the control plane's namespace routes the pod subnets
# and the Services. The IPv6 addresses skip duplicate address detection (nodad): each is the
# only one of its value on its link, and a tentative address would fail the first sends.
netns_up() {
	local i j n ns
	n=$(node_count)
	new_netns "$netns"
	if ! in_ns ip link show tern0 >/dev/null 2>&1; then
		in_ns ip link add tern0 type bridge
		in_ns ip addr add "$cp_ip/24" dev tern0
		in_ns ip addr add "$cp_ip6/64" dev tern0 nodad
		in_ns ip link set tern0 up
	fi
	for ((i = 1; i <= n; i++)); do
		ns=$(node_netns "$i")
		new_netns "$ns"
		if ! in_ns ip link show "tn$i" >/dev/null 2>&1; then
			in_ns ip link add "tn$i" type veth peer name eth0 netns "$ns"
			in_ns ip link set "tn$i" master tern0 up
			in_node "$i" ip addr add "$(node_ip "$i")/24" dev eth0
			in_node "$i" ip addr add "$(node_ip6 "$i")/64" dev eth0 nodad
			in_node "$i" ip link set eth0 up
			in_node "$i" ip route add default via "$cp_ip" dev eth0
			in_node "$i" sysctl -qw net.ipv4.ip_forward=1
			in_node "$i" sysctl -qw net.ipv6.conf.all.forwarding=1
			for ((j = 1; j <= n; j++)); do
				((j == i)) && continue
				in_node "$i" ip route add "$(node_pod_cidr "$j")" via "$(node_ip "$j")" dev eth0
				in_node "$i" ip -6 route add "$(node_pod_cidr6 "$j")" via "$(node_ip6 "$j")" dev eth0
			done
			in_ns ip route add "$(node_pod_cidr "$i")" via "$(node_ip "$i")" dev tern0
			in_ns ip -6 route add "$(node_pod_cidr6 "$i")" via "$(node_ip6 "$i")" dev tern0
		fi
	done
	in_ns ip route replace "$svc_cidr" via "$(node_ip 1)" dev tern0
	if [[ "${DUALSTACK_SERVICES:-}" == 1 ]]; then in_ns ip -6 route replace "$svc_cidr6" via "$(node_ip6 1)" dev tern0; fi
}

# mountns_up I: node I's mount namespace (a fresh /run, its own /var/lib and /var/log).
mountns_up() {
	local d mnt
	d=$(node_dir "$1") mnt=$(node_mntns "$1")
	[[ -e "$mnt" ]] && findmnt "$mnt" >/dev/null && return 0
	mkdir -p "$d/var/lib" "$d/var/log"
	touch "$mnt"
	unshare --mount="$mnt" --propagation private true
	nsenter --mount="$mnt" -- sh -ec "
		mount -t tmpfs -o mode=755 tern-run /run
		mkdir -p /run/netns /run/lock
		mount --bind '$d/var/lib' /var/lib
		mount --bind '$d/var/log' /var/log
	"
}

cgroups_up() {
	local d g i
	for d in /sys/fs/cgroup/*/; do
		[[ -f "$d/cgroup.procs" && -f "$d/tasks" ]] || continue # v1 hierarchies only
		for g in "$cg_root" $(for ((i = 1; i <= $(node_count); i++)); do echo "$cg_root/$(node_name "$i")"; done); do
			mkdir -p "$d$g"
			if [[ -f "$d/cpuset.cpus" ]]; then
				cat "$d/cpuset.cpus" >"$d$g/cpuset.cpus"
				cat "$d/cpuset.mems" >"$d$g/cpuset.mems"
			fi
		done
	done
}

# --- up -----------------------------------------------------------------------------------

kubectl_() { in_ns env KUBECONFIG="$work/kubeconfig" "$bins/kubectl" "$@"; }

# kube_proxy_synced I: node I's kube-proxy has written the kubernetes Service's rule (in its
# namespace).
kube_proxy_synced() { in_node "$1" iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $svc_ip/32"; }

# host_kube_rules: the KUBE- lines of the host's own iptables (read only; kube-proxy must
# write none there).
host_kube_rules() { { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | { grep 'KUBE-' || true; } | sed 's/\[[0-9]*:[0-9]*\]//g' | sort; }

# node_pod_cidrs I: node I's Node gets spec.podCIDRs, its IPv4 and IPv6 pod subnets (those of
# its CNI config), as kube-controller-manager's node IPAM (--allocate-node-cidrs) would write
# them on a dual-stack cluster; the API server lets them be set once, from empty.
node_pod_cidrs() {
	local name cidrs
	name=$(node_name "$1")
	cidrs=$(kubectl_ get node "$name" -o 'jsonpath={.spec.podCIDRs}')
	[[ -z "$cidrs" ]] || return 0
	kubectl_ patch node "$name" --type merge -p \
		"{\"spec\":{\"podCIDR\":\"$(node_pod_cidr "$1")\",\"podCIDRs\":[\"$(node_pod_cidr "$1")\",\"$(node_pod_cidr6 "$1")\"]}}" >/dev/null ||
		fail "" "cannot set node $name's spec.podCIDRs"
}

node_ready() {
	[[ "$(kubectl_ get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

up() {
	local t0=$SECONDS i n c
	bins=$("$repo/hack/cluster-bins.sh" --check) || die "no cluster binaries: run hack/cluster-bins.sh first"
	command -v containerd >/dev/null && command -v runc >/dev/null && [[ -x /usr/lib/cni/bridge ]] && command -v iptables >/dev/null ||
		die "needs Debian's containerd, runc, containernetworking-plugins and iptables (apt-get install containerd runc containernetworking-plugins iptables)"
	[[ $EUID == 0 ]] || die "needs root (network and mount namespaces, cgroups)"
	n=${NODES:-1}
	[[ "$n" =~ ^[1-9]$ ]] || die "NODES=$n: want 1 to 9"

	if [[ -d "$work/run" ]]; then
		local all=1
		[[ "$(node_count)" == "$n" ]] || all=0
		if ((all)); then for c in $(components); do alive "$c" || all=0; done; fi
		if ((all)); then for ((i = 1; i <= n; i++)); do node_ready "$(node_name "$i")" || all=0; done; fi
		if ((all)); then
			log "already up with $n node(s); KUBECONFIG=$work/kubeconfig (use: hack/cluster.sh exec kubectl ...)"
			return 0
		fi
		log "a partial cluster or one of another size is in $work; taking it down first"
		down
	fi
	mkdir -p "$work/run" "$work/log" "$work/etcd"
	echo "$n" >"$work/nodes.count"
	log "work dir $work, $n node(s), binaries $bins"
	pki
	for ((i = 1; i <= n; i++)); do node_configs "$i"; done
	ns_dir_up
	netns_up
	for ((i = 1; i <= n; i++)); do mountns_up "$i"; done
	cgroups_up

	start etcd 0 "$bins/etcd" --data-dir "$work/etcd" --name tern \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster tern=http://127.0.0.1:2380 --unsafe-no-fsync --quota-backend-bytes 2147483648
	for ((i = 1; i <= n; i++)); do start_containerd "$i"; done
	wait_for 30 etcd "etcd health" in_ns curl -sf http://127.0.0.1:2379/health

	local p=$work/pki
	start kube-apiserver 0 "$bins/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$cp_ip" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
		--client-ca-file "$p/ca.crt" --kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range "$svc_ranges" \
		--authorization-mode Node,RBAC --allow-privileged=true --kubelet-preferred-address-types InternalIP \
		--requestheader-client-ca-file "$p/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
		--requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
		--requestheader-extra-headers-prefix X-Remote-Extra- \
		--proxy-client-cert-file "$p/front-proxy-client.crt" --proxy-client-key-file "$p/front-proxy-client.key" \
		--enable-aggregator-routing=true
	wait_for 60 kube-apiserver "API server readiness" kubectl_ get --raw /readyz

	start kube-controller-manager 0 "$bins/kube-controller-manager" --kubeconfig "$work/kcm.kubeconfig" \
		--authentication-kubeconfig "$work/kcm.kubeconfig" --authorization-kubeconfig "$work/kcm.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key"
	start kube-scheduler 0 "$bins/kube-scheduler" --kubeconfig "$work/scheduler.kubeconfig" \
		--authentication-kubeconfig "$work/scheduler.kubeconfig" --authorization-kubeconfig "$work/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false

	local name host_rules
	for ((i = 1; i <= n; i++)); do
		name=$(node_name "$i")
		wait_for 30 "$name.containerd" "$name's containerd" ctr_ "$i" version
		import_images "$i"
		start_kubelet "$i"
	done
	# kube-proxy reads the node's addresses at start and exits when they change later (as a
	# DaemonSet would restart it): it starts once the kubelet has registered the node.
	host_rules=$(host_kube_rules)
	for ((i = 1; i <= n; i++)); do
		name=$(node_name "$i")
		wait_for 60 "$name.kubelet" "node $name registered" kubectl_ get node "$name"
		node_pod_cidrs "$i"
		start_kube_proxy "$i"
	done
	for ((i = 1; i <= n; i++)); do
		name=$(node_name "$i")
		wait_for 120 "$name.kubelet" "Ready node $name" node_ready "$name"
		wait_for 30 "$name.kube-proxy" "$name's kube-proxy rules in its network namespace" kube_proxy_synced "$i"
	done
	[[ "$(host_kube_rules)" == "$host_rules" ]] || fail "$(node_name 1).kube-proxy" "kube-proxy changed the HOST's iptables (KUBE- rules); take the cluster down"
	for c in $(components); do alive "$c" || fail "$c" "$c is not running"; done
	log "up with $n node(s) in $((SECONDS - t0))s; KUBECONFIG=$work/kubeconfig, reachable with: hack/cluster.sh exec kubectl get nodes"
}

# start_containerd I, start_kubelet I, start_kube_proxy I: node I's processes (up, and
# node-start after node-kill).
start_containerd() { start "$(node_name "$1").containerd" "$1" containerd --config "$(node_dir "$1")/containerd/config.toml"; }
start_kubelet() {
	local d name
	d=$(node_dir "$1") name=$(node_name "$1")
	start "$name.kubelet" "$1" "$bins/kubelet" --config "$d/kubelet/config.yaml" --kubeconfig "$d/kubelet.kubeconfig" \
		--root-dir "$d/kubelet" --node-ip "$(node_ip "$1")" --hostname-override "$name" --v 2
}
start_kube_proxy() { start "$(node_name "$1").kube-proxy" "$1" "$bins/kube-proxy" --config "$(node_dir "$1")/kube-proxy.yaml" --v 2; }

# node_index NODE: I of tern-node-I, which must be up.
node_index() {
	[[ "$1" =~ ^tern-node-([1-9])$ ]] || die "no node $1 (tern-node-1 ... tern-node-$(node_count))"
	((BASH_REMATCH[1] <= $(node_count))) || die "no node $1 (tern-node-1 ... tern-node-$(node_count))"
	echo "${BASH_REMATCH[1]}"
}

# node_kill NODE: a node lost. SIGKILL to the processes this script started for it (its
# kubelet, kube-proxy and containerd, by their pid files), its containerd's shims (by its
# socket) and every process in its cgroup (its pods' containers). Its network namespace stays,
# with nothing in it answering; the API server learns of the loss as of a real node's: the
# node controller marks it NotReady when its leases stop. node-start brings it back.
node_kill() {
	local i name c pid
	i=$(node_index "$1") name=$1
	for c in kubelet kube-proxy containerd; do
		if alive "$name.$c"; then kill -9 "$(pidof_ "$name.$c")" 2>/dev/null || true; fi
	done
	for pid in $(shim_pids "$(node_sock "$i")"); do kill -9 "$pid" 2>/dev/null || true; done
	local d
	for d in /sys/fs/cgroup/*/"$cg_root/$name"; do
		[[ -d "$d" ]] || continue
		for pid in $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do kill -9 "$pid" 2>/dev/null || true; done
	done
	log "node $name killed"
}

# node_start NODE: node-kill undone: its containerd, kubelet and kube-proxy started again,
# waiting until the node is Ready.
node_start() {
	local i name
	i=$(node_index "$1") name=$1
	bins=$("$repo/hack/cluster-bins.sh" --check)
	start_containerd "$i"
	wait_for 30 "$name.containerd" "$name's containerd" ctr_ "$i" version
	start_kubelet "$i"
	start_kube_proxy "$i"
	wait_for 180 "$name.kubelet" "Ready node $name" node_ready "$name"
	log "node $name started again"
}

# import_images I: the pause image and bin/images/*.tar into node I's containerd.
import_images() {
	local f
	for f in "$bins/pause.tar" "$images"/*.tar; do
		[[ -f "$f" ]] || continue
		log "importing $f into $(node_name "$1")"
		ctr_ "$1" images import "$f" >&2 || fail "$(node_name "$1").containerd" "cannot import $f"
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

# down_nodes: "PREFIX SOCKET" for each node (PREFIX its components' name prefix, SOCKET its
# containerd's), and for a work dir of the single-node layout of earlier versions (its
# components unprefixed, its containerd's socket in <work dir>/containerd) " SOCKET" too.
down_nodes() {
	local i
	for ((i = 1; i <= $(node_count); i++)); do echo "$(node_name "$i"). $(node_sock "$i")"; done
	if [[ -e "$work/run/kubelet.pid" || -e "$work/run/containerd.pid" ]]; then echo " $work/containerd/containerd.sock"; fi
}

# shim_pids SOCKET...: the containerd shims of the containerds listening on SOCKET... (they
# re-parent to PID 1, so they are found by the socket address in their command line).
shim_pids() {
	local p s cmd
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		[[ "$cmd" == *containerd-shim* ]] || continue
		for s in "$@"; do
			if [[ "$cmd" == *" -address $s "* ]]; then echo "${p#/proc/}"; fi
		done
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
	local t0=$SECONDS c pid f pfx sock t i
	[[ -d "$work" ]] || { log "nothing to take down"; return 0; }
	local pfxs=() socks=()
	while read -r pfx sock; do
		[[ -n "$sock" ]] || { sock=$pfx pfx=; }
		pfxs+=("$pfx") socks+=("$sock")
	done < <(down_nodes)
	local procs=()
	for pfx in "${pfxs[@]}"; do
		if alive "${pfx}kubelet"; then procs+=("${pfx}kubelet=$(pidof_ "${pfx}kubelet")"); fi
	done
	((${#procs[@]} == 0)) || stop_pids "${procs[@]}"
	# Containers first, while containerd can still stop them.
	for i in "${!pfxs[@]}"; do
		alive "${pfxs[i]}containerd" || continue
		sock=${socks[i]}
		for t in $(ctr --address "$sock" --namespace k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$sock" --namespace k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
		done
		sleep 0.5
		for t in $(ctr --address "$sock" --namespace k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$sock" --namespace k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true
		done
	done
	procs=()
	for c in kube-scheduler kube-controller-manager kube-apiserver $(for pfx in "${pfxs[@]}"; do echo "${pfx}kube-proxy ${pfx}containerd"; done); do
		if alive "$c"; then procs+=("$c=$(pidof_ "$c")"); fi
	done
	for pid in $(shim_pids "${socks[@]}"); do procs+=("containerd-shim=$pid"); done
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
	# namespaces take their bridges, veths, routes and iptables rules with them.
	for f in "$work"/ns/*.mnt "$work/ns/mnt" "$work"/ns/*.net "$netns"; do
		if findmnt "$f" >/dev/null 2>&1; then umount "$f" || log "could not unmount the namespace $f"; fi
	done
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
	for c in $(components); do
		if alive "$c"; then printf '%-28s running, pid %s\n' "$c" "$(pidof_ "$c")"; else
			printf '%-28s NOT running\n' "$c"
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

# node_exec NODE CMD...: CMD in node NODE's network namespace (the host's mounts: the work
# dir's kubeconfig still works, but the API server is at https://10.244.0.1:6443 from there).
node_exec() {
	local node=$1 i
	shift
	[[ "$node" =~ ^tern-node-([1-9])$ ]] || die "node-exec: no node $node (tern-node-1 ... tern-node-$(node_count))"
	i=${BASH_REMATCH[1]}
	findmnt "$(node_netns "$i")" >/dev/null || die "no node $node up"
	bins=$("$repo/hack/cluster-bins.sh" --check)
	exec nsenter --net="$(node_netns "$i")" -- env PATH="$bins:$PATH" TERN_CLUSTER_DIR="$work" "$@"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
exec)
	shift
	exec_ "$@"
	;;
node-kill)
	[[ $# -eq 2 ]] || die "usage: $0 node-kill NODE"
	node_kill "$2"
	;;
node-start)
	[[ $# -eq 2 ]] || die "usage: $0 node-start NODE"
	node_start "$2"
	;;
node-exec)
	shift
	[[ $# -ge 2 ]] || die "usage: $0 node-exec NODE CMD..."
	node_exec "$@"
	;;
*)
	echo "usage: $0 up|down|status|exec CMD...|node-exec NODE CMD...|node-kill NODE|node-start NODE" >&2
	exit 2
	;;
esac
