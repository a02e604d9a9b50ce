#!/usr/bin/env bash
# Measures the eBPF ChannelData fast path (issue 15): ternd-offload beside
# ternd, the raw forwarder, coturn and pion, in network namespaces that
# ternbench makes and removes itself (-netns; names tob-PID-..., a later
# run sweeps those a killed one left), then regenerates BENCHMARKS.md with
# its "Offload (issue 15)" section. Root only; about 13 minutes on a
# 2-core machine.
#
#   hack/bench-offload.sh           the measurement (make bench-offload)
#   hack/bench-offload.sh --quick   a smoke: every step once, tiny
#
# Nothing touches the host's network settings: forwarding is turned on
# inside the namespaces, RPS on the server namespace's veths. Environment:
#   TERNBENCH_OUT     results directory (default bench/results; offload results in its offload/)
#   TERNBENCH_REPORT  the markdown written (default BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/.."

quick=""
for a in "$@"; do
	case "$a" in
	--quick) quick=1 ;;
	*)
		echo "usage: $0 [--quick]" >&2
		exit 2
		;;
	esac
done
if [[ $(id -u) != 0 ]]; then
	echo "$0: network namespaces and BPF need root" >&2
	exit 1
fi
for c in turnserver ip taskset; do
	command -v "$c" >/dev/null || { echo "$c is missing (apt-get install -y coturn iproute2 util-linux)" >&2; exit 1; }
done
out="${TERNBENCH_OUT:-bench/results}"
oout="$out/offload"
echo "== build"
mkdir -p bin "$oout"
CGO_ENABLED=0 go build -o bin/ternd ./cmd/ternd
go build -o bin/ternbench ./cmd/ternbench

work="$(mktemp -d -t ternbench-offload-XXXXXX)"
trap 'rm -rf "$work"' EXIT
targets=ternd-offload,ternd,forwarder,coturn,pion
common=(-launch "$targets" -ternd bin/ternd -work-dir "$work" -base-port 30000 -progress off)
if [[ -z "$quick" ]]; then
	reps=(-repeats 2)
	# Rates high enough that the relayed packets, not other tenants, make
	# most of the machine's busy time: the whole-machine figures divide it.
	fl=(-flows 64 -rates 40k -sizes 100 -duration 2s)
	flb=(-flows 64 -rates 100k -sizes 100 -duration 2s)
	wr=(-allocations 1000 -duration 5s)
	# Up to past the GSO generator's ceiling (direct, the same load with
	# no server, in the same run).
	pps=(-rates 200k,300k,400k,500k,600k,700k,800k,1000k -duration 2s)
else
	reps=()
	fl=(-flows 8 -rates 5k -sizes 100 -duration 1s)
	flb=("${fl[@]}")
	wr=(-allocations 100 -duration 1s)
	pps=(-rates 50k -duration 1s)
fi
cmds="$oout/commands.txt"
: >"$cmds"
run() {
	echo "$*" | sed "s|$work|\$WORK|g" >>"$cmds"
	"$@"
}
files=()
for topo in loopback veth; do
	echo "== $topo: flows, interleaved"
	run bin/ternbench flows -netns "$topo" "${common[@]}" "${reps[@]}" -direction c2p,p2c,both -pacing interleaved "${fl[@]}" -o "$oout/flows-$topo.json"
	echo "== $topo: flows, bursts"
	run bin/ternbench flows -netns "$topo" "${common[@]}" "${reps[@]}" -direction c2p,p2c -pacing burst "${flb[@]}" -o "$oout/burst-$topo.json"
	echo "== $topo: webrtc"
	run bin/ternbench webrtc -netns "$topo" "${common[@]}" "${reps[@]}" -transport udp "${wr[@]}" -o "$oout/webrtc-$topo.json"
	files+=("$oout/flows-$topo.json" "$oout/burst-$topo.json" "$oout/webrtc-$topo.json")
done
echo "== veth: delivered packets/s, servers on CPU 1, generator on CPU 0"
# -gso: each burst of 32 leaves as one UDP GSO send, segmented in software
# on the client's veth, and the sink counts with UDP GRO: one generator
# core then offers several times what the servers' core relays.
run taskset -c 0 bin/ternbench flows -netns veth -pin 1 -launch ternd-offload,ternd -ternd bin/ternd -work-dir "$work" -base-port 30000 -progress off \
	"${reps[@]}" -direction c2p -pacing burst -gso -flows 64 -sizes 100 "${pps[@]}" -o "$oout/pps-veth.json"
files+=("$oout/pps-veth.json")
(IFS=,; echo "${files[*]}") >"$oout/files.txt"
{
	echo "make bench-offload   # = hack/bench-offload.sh (root); --quick for a smoke"
	echo "# which runs, with WORK a temporary directory:"
	echo "CGO_ENABLED=0 go build -o bin/ternd ./cmd/ternd && go build -o bin/ternbench ./cmd/ternbench"
	cat "$cmds"
} >"$oout/reproduce.txt"
echo "== report"
hack/bench.sh --report
