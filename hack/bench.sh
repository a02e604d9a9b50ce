#!/usr/bin/env bash
# Runs Tern's benchmarks side by side with coturn, pion/turn and the raw
# forwarder, and regenerates BENCHMARKS.md and the plots in bench/results/.
#
#   hack/bench.sh            full run (~15-20 minutes on a 2-core machine)
#   hack/bench.sh --quick    one-minute smoke: every target works, figures not comparable
#
# Everything runs on 127.0.0.0/8. ternbench starts the servers itself
# (-launch) and stops only those, by PID. Environment:
#   TERNBENCH_BASE_PORT  first TURN port (default 23478; the others +100, +200, +300)
#   TERNBENCH_OUT        results directory (default bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."

quick=""
if [[ "${1:-}" == "--quick" ]]; then
	quick="-quick"
elif [[ $# -gt 0 ]]; then
	echo "usage: $0 [--quick]" >&2
	exit 2
fi
out="${TERNBENCH_OUT:-bench/results}"
base="${TERNBENCH_BASE_PORT:-23478}"

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
common=(-launch all -ternd bin/ternd -work-dir "$work" -base-port "$base" $quick)
# ternd beside itself with metrics off (issue 12), in a throughput run of their own.
onoff=(-launch ternd,ternd-nometrics -ternd bin/ternd -work-dir "$work" -base-port "$base" $quick)
if [[ -z "$quick" ]]; then
	repeats=(-repeats 3)
else
	repeats=()
fi

# The exact commands, recorded for BENCHMARKS.md.
cmds="$out/commands.txt"
: >"$cmds"
run() {
	echo "bin/ternbench $*" | sed "s|$work|\$WORK|g" >>"$cmds"
	bin/ternbench "$@"
}

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

echo "== report"
{
	echo "make bench   # = hack/bench.sh; hack/bench.sh --quick for a smoke"
	echo "# which runs, with WORK a temporary directory:"
	echo "CGO_ENABLED=0 go build -o bin/ternd ./cmd/ternd && go build -o bin/ternbench ./cmd/ternbench"
	cat "$cmds"
	echo "bin/ternbench report -o BENCHMARKS.md -plots $out -metrics $out/metrics.json $out/throughput.json $out/latency.json $out/allocs.json $out/memory.json"
} >"$out/reproduce.txt"
profile=()
if [[ -f bench/PROFILE.md ]]; then
	profile=(-profile bench/PROFILE.md)
fi
bin/ternbench report -o BENCHMARKS.md -plots "$out" -commands "$out/reproduce.txt" "${profile[@]}" -metrics "$out/metrics.json" \
	"$out/throughput.json" "$out/latency.json" "$out/allocs.json" "$out/memory.json" >/dev/null
rm -f "$cmds"
echo "wrote BENCHMARKS.md and $out/"
rm -rf "$work"
