#!/usr/bin/env bash
# Runs Tern's benchmarks side by side with coturn, pion/turn and the raw
# forwarder, and regenerates BENCHMARKS.md and the plots in bench/results/.
#
#   hack/bench.sh            full run: the WebRTC-shaped matrix, then the burst measurements
#                            (~30-35 minutes on a 2-core machine)
#   hack/bench.sh --webrtc   the WebRTC-shaped matrix alone (flows and webrtc, < 20 minutes;
#                            make bench-webrtc), then the report from every result present
#   hack/bench.sh --quick    smoke of everything: every target works, figures not comparable
#   hack/bench.sh --webrtc --quick   smoke of the WebRTC-shaped matrix
#   hack/bench.sh --report   only the report, from every result present (the offload
#                            results of hack/bench-offload.sh in $TERNBENCH_OUT/offload too)
#
# Everything runs on 127.0.0.0/8. ternbench starts the servers itself
# (-launch) and stops only those, by PID. Environment:
#   TERNBENCH_BASE_PORT  first TURN port (default 23478; the others +100, +200, +300)
#   TERNBENCH_OUT        results directory (default bench/results)
#   TERNBENCH_RELAY_IP   relay address of the first server (default 127.0.0.2; the others +1...)
#   TERNBENCH_REPORT     the markdown written (default BENCHMARKS.md)
#   TERNBENCH_BIN        (--report) the ternbench binary built and run (default bin/ternbench)
#   TERNBENCH_PLOTS      where the plots are written (default TERNBENCH_OUT; the markdown links
#                        them in TERNBENCH_OUT all the same)
# The hand-written parts of BENCHMARKS.md live in bench/report/template.md,
# bench/CLUSTER.md (the real cluster's figures) and bench/PROFILE*.md: edit those
# and run --report, never BENCHMARKS.md itself (test/docs checks that it is what
# --report writes).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=""
webrtc_only=""
report_only=""
for a in "$@"; do
	case "$a" in
	--report) report_only=1 ;;
	--quick) quick="-quick" ;;
	--webrtc) webrtc_only=1 ;;
	*)
		echo "usage: $0 [--webrtc] [--quick] | --report" >&2
		exit 2
		;;
	esac
done
out="${TERNBENCH_OUT:-bench/results}"
base="${TERNBENCH_BASE_PORT:-23478}"
relay="${TERNBENCH_RELAY_IP:-127.0.0.2}"
report="${TERNBENCH_REPORT:-BENCHMARKS.md}"
ternbench=bin/ternbench

# The report: every result present, and the offload section (issue 15)
# where hack/bench-offload.sh left its results.
report() {
	results=()
	for f in flows flows-burst webrtc throughput latency allocs memory; do
		[[ -f "$out/$f.json" ]] && results+=("$out/$f.json")
	done
	metrics=()
	[[ -f "$out/metrics.json" ]] && metrics=(-metrics "$out/metrics.json")
	offload=()
	if [[ -f "$out/offload/files.txt" && -f "$out/offload/reproduce.txt" ]]; then
		offload=(-offload "$(cat "$out/offload/files.txt")" -offload-commands "$out/offload/reproduce.txt")
		[[ -f bench/PROFILE-offload.md ]] && offload+=(-offload-profile bench/PROFILE-offload.md)
	fi
	tls443=()
	if [[ -f "$out/tls443-flows.json" && -f "$out/https443.json" ]]; then
		tls443=(-tls443 "$out/tls443-flows.json,$out/https443.json")
	fi
	cluster=()
	[[ -f bench/CLUSTER.md ]] && cluster=(-cluster bench/CLUSTER.md)
	profile=()
	if [[ -f bench/PROFILE.md ]]; then
		profile=(-profile bench/PROFILE.md)
	fi
	commands=()
	[[ -f "$out/reproduce.txt" ]] && commands=(-commands "$out/reproduce.txt")
	"$ternbench" report -o "$report" -plots "${TERNBENCH_PLOTS:-$out}" -plots-rel "$out" "${commands[@]}" "${profile[@]}" "${cluster[@]}" "${metrics[@]}" "${offload[@]}" "${tls443[@]}" "${results[@]}" >/dev/null
	echo "wrote $report and $out/"
}
if [[ -n "$report_only" ]]; then
	ternbench="${TERNBENCH_BIN:-bin/ternbench}"
	go build -o "$ternbench" ./cmd/ternbench # never a stale one: the report is this tree's
	report
	exit 0
fi

if ! command -v turnserver >/dev/null; then
	echo "coturn is missing: apt-get install -y coturn" >&2
	exit 1
fi

echo "== build"
mkdir -p bin "$out"
CGO_ENABLED=0 go build -o bin/ternd ./cmd/ternd # static, as make build and the image build it
# ternbench also serves the pion/turn peer (serve-pion) and the raw
# forwarder (serve-forwarder), so one build brings all three.
go build -o bin/ternbench ./cmd/ternbench

work="$(mktemp -d -t ternbench-XXXXXX)"
common=(-launch all -ternd bin/ternd -work-dir "$work" -base-port "$base" -relay-ip "$relay" $quick)
# ternd beside ternd-443, whose TURN-TLS port is shared with HTTPS (issue 23).
shared=(-launch ternd,ternd-443 -ternd bin/ternd -work-dir "$work" -base-port "$base" -relay-ip "$relay" $quick)
https=(-launch ternd-443 -ternd bin/ternd -work-dir "$work" -base-port "$base" -relay-ip "$relay" $quick)
# ternd beside itself with metrics off (issue 12), in a throughput run of their own.
onoff=(-launch ternd,ternd-nometrics -ternd bin/ternd -work-dir "$work" -base-port "$base" -relay-ip "$relay" $quick)
if [[ -z "$quick" ]]; then
	repeats=(-repeats 3)
else
	repeats=()
fi

# The exact commands, recorded for BENCHMARKS.md: the WebRTC-shaped
# matrix's and the burst measurements' apart, so that a --webrtc run keeps
# the commands of the burst results it reports beside its own.
wcmds="$out/commands-webrtc.txt"
cmds="$out/commands.txt"
run() {
	echo "bin/ternbench $*" | sed "s|$work|\$WORK|g" >>"$target_cmds"
	bin/ternbench "$@"
}

# The WebRTC-shaped matrix (issue 14): every direction over every client
# transport with interleaved flows (64 allocations, 20k packets/s, 100 B;
# the forwarder on UDP only), the burst view of the same over UDP and TLS,
# and the webrtc profile at 1,000 and 5,000 allocations, 20 s each.
target_cmds="$wcmds"
: >"$wcmds"
echo "== flows (interleaved)"
if [[ -z "$quick" ]]; then
	run flows "${common[@]}" -repeats 2 -direction c2p,p2c,both -transport udp,tcp,tls,dtls -pacing interleaved \
		-flows 64 -rates 20k -sizes 100 -duration 3s -o "$out/flows.json"
	echo "== flows (burst)"
	run flows "${common[@]}" -repeats 2 -direction c2p,p2c -transport udp,tls -pacing burst \
		-flows 64 -rates 20k -sizes 100 -duration 3s -o "$out/flows-burst.json"
	echo "== webrtc"
	run webrtc "${common[@]}" -allocations 1000,5000 -transport udp -duration 20s -o "$out/webrtc.json"
	echo "== TURN-TLS and HTTPS on one port"
	run flows "${shared[@]}" -repeats 2 -direction c2p,p2c,both -transport tls -pacing interleaved \
		-flows 64 -rates 20k -sizes 100 -duration 3s -o "$out/tls443-flows.json"
	run https443 "${https[@]}" -repeats 3 -o "$out/https443.json"
else
	run flows "${common[@]}" -direction c2p,p2c,both -transport udp,tcp,tls,dtls -o "$out/flows.json"
	run flows "${common[@]}" -direction c2p,p2c -transport udp,tls -pacing burst -o "$out/flows-burst.json"
	run webrtc "${common[@]}" -o "$out/webrtc.json"
	run flows "${shared[@]}" -direction c2p,p2c,both -transport tls -o "$out/tls443-flows.json"
	run https443 "${https[@]}" -o "$out/https443.json"
fi

target_cmds="$cmds"
if [[ -n "$webrtc_only" ]]; then
	echo "== (--webrtc: the burst measurements keep their last results)"
else
: >"$cmds"
echo "== throughput"
if [[ -z "$quick" ]]; then
	run throughput "${common[@]}" "${repeats[@]}" -clients 8,64 -rates 20k,50k,100k,150k -sizes 100 -duration 3s -o "$out/throughput.json"
else
	run throughput "${common[@]}" -o "$out/throughput.json"
fi
echo "== metrics on/off"
if [[ -z "$quick" ]]; then
	run throughput "${onoff[@]}" -repeats 5 -clients 8,64 -rates 20k,50k,100k,150k -sizes 100 -duration 3s -o "$out/metrics.json"
else
	run throughput "${onoff[@]}" -o "$out/metrics.json"
fi
echo "== latency"
run latency "${common[@]}" "${repeats[@]}" -rate 500 -o "$out/latency.json"
echo "== allocs"
run allocs "${common[@]}" "${repeats[@]}" -o "$out/allocs.json"
echo "== memory"
# K=60k needs RLIMIT_NOFILE above 60k for each server's relay sockets;
# where the hard limit is lower, the result says how many were held and why.
run memory "${common[@]}" -o "$out/memory.json"
fi

echo "== report"
results=()
for f in flows flows-burst webrtc throughput latency allocs memory; do
	[[ -f "$out/$f.json" ]] && results+=("$out/$f.json")
done
metrics=()
[[ -f "$out/metrics.json" ]] && metrics=(-metrics "$out/metrics.json")
{
	echo "make bench          # = hack/bench.sh; --quick for a smoke"
	echo "make bench-webrtc   # = hack/bench.sh --webrtc: the WebRTC-shaped matrix alone, < 20 minutes"
	echo "# which run, with WORK a temporary directory:"
	echo "CGO_ENABLED=0 go build -o bin/ternd ./cmd/ternd && go build -o bin/ternbench ./cmd/ternbench"
	cat "$wcmds"
	[[ -f "$cmds" ]] && cat "$cmds"
	tls443=""
	[[ -f "$out/tls443-flows.json" && -f "$out/https443.json" ]] && tls443="-tls443 $out/tls443-flows.json,$out/https443.json"
	echo "bin/ternbench report -o $report -plots $out -cluster bench/CLUSTER.md ${metrics[*]} $tls443 ${results[*]}"
} >"$out/reproduce.txt"
report
rm -rf "$work"
