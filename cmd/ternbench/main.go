// Command ternbench is Tern's load harness: it drives real TURN allocations
// against TURN servers (ternd, coturn, pion/turn, STUNner, ...) and a raw UDP
// forwarder, interleaved, and reports delivered packets/s, loss, round-trip
// latency, allocations/s, and the server's CPU time per relayed packet and
// resident memory per allocation. See BENCHMARKS.md for the method.
//
//	ternbench flows|webrtc [flags]                       WebRTC-shaped load (issue 14)
//	ternbench throughput|latency|allocs|memory [flags]   measure
//	ternbench soak [flags]                               ternd under attack (docs/security.md)
//	ternbench https443 [flags]                           HTTPS through a shared TURN-TLS port (issue 23)
//	ternbench report [flags] results.json...             BENCHMARKS.md + plots
//	ternbench serve-pion|serve-forwarder [flags]         peer servers
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

var commands = map[string]func(args []string) error{
	"flows":           runFlows,
	"webrtc":          runWebRTC,
	"throughput":      runThroughput,
	"latency":         runLatency,
	"allocs":          runAllocs,
	"memory":          runMemory,
	"soak":            runSoak,
	"https443":        runHTTPS443,
	"report":          runReport,
	"serve-pion":      servePion,
	"serve-forwarder": serveForwarder,
}

const usage = `usage: ternbench <command> [flags]

measure (targets from -t and/or -launch; -h on each for its flags):
  flows        WebRTC-shaped load: -direction c2p|p2c|both, -pacing interleaved|burst,
               -transport udp,tcp,tls,dtls; server and whole-machine CPU µs per relayed
               packet (minus a no-server baseline), loss %, round trips (both)
  webrtc       K allocations of audio (and some video) both ways, downstream 3× upstream:
               CPU per relayed packet, loss, round-trip p50/p99
  throughput   offered vs delivered packets/s, loss %, server CPU µs per relayed packet
               (bursts of up to 64 per flow, client → peer)
  latency      round-trip p50/p90/p99/p99.9 through an echoing peer at a fixed rate
  allocs       authenticated Allocate + Refresh(0) cycles per second
  memory       server RSS bytes per held allocation
  soak         legitimate clients relaying while ternd is attacked (quota, password flood,
               idle TCP connections) with its default limits; docs/security.md
  https443     HTTPS through a TURN-TLS port shared with it (ternd-443) against straight to
               the upstream: handshake + GET latency, connections/s, HTTP/2 download MB/s,
               the server's CPU per connection and per MB

other:
  report           merge results JSON into BENCHMARKS.md and plots
  serve-pion       run a pion/turn v4 server (a peer to compare against)
  serve-forwarder  run the raw UDP forwarder (the ceiling)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches on the command and returns the exit code: 0 also for help
// asked for (--help, or -h on a command, whose flag set has printed its
// flags), 2 for an unknown command, 1 when the command failed.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) < 1 || commands[args[0]] == nil {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err := commands[args[0]](args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "ternbench %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
