// Command ternbench is Tern's load harness: it drives real TURN allocations
// against TURN servers (ternd, coturn, pion/turn, STUNner, ...) and a raw UDP
// forwarder, interleaved, and reports delivered packets/s, loss, round-trip
// latency, allocations/s, and the server's CPU time per relayed packet and
// resident memory per allocation. See BENCHMARKS.md for the method.
//
//	ternbench throughput|latency|allocs|memory [flags]   measure
//	ternbench report [flags] results.json...             BENCHMARKS.md + plots
//	ternbench serve-pion|serve-forwarder [flags]         peer servers
package main

import (
	"fmt"
	"os"
)

var commands = map[string]func(args []string) error{
	"throughput":      runThroughput,
	"latency":         runLatency,
	"allocs":          runAllocs,
	"memory":          runMemory,
	"report":          runReport,
	"serve-pion":      servePion,
	"serve-forwarder": serveForwarder,
}

const usage = `usage: ternbench <command> [flags]

measure (targets from -t and/or -launch; -h on each for its flags):
  throughput   offered vs delivered packets/s, loss %, server CPU µs per relayed packet
  latency      round-trip p50/p90/p99/p99.9 through an echoing peer at a fixed rate
  allocs       authenticated Allocate + Refresh(0) cycles per second
  memory       server RSS bytes per held allocation

other:
  report           merge results JSON into BENCHMARKS.md and plots
  serve-pion       run a pion/turn v4 server (a peer to compare against)
  serve-forwarder  run the raw UDP forwarder (the ceiling)
`

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err := commands[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "ternbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
