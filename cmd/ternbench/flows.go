package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/turnclient"
)

// gsoProcs is the least GOMAXPROCS of a -gso run (unless GOMAXPROCS is
// set in the environment).
const gsoProcs = 4

// transports parses a -transport comma list.
func transports(s string) ([]turnclient.Proto, error) {
	var out []turnclient.Proto
	for _, f := range strings.Split(s, ",") {
		p, err := turnclient.ParseProto(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func runFlows(args []string) error {
	fs := flag.NewFlagSet("flows", flag.ContinueOnError)
	var c common
	c.register(fs)
	flows := fs.String("flows", "64", "allocations (flows) N, comma list")
	rates := fs.String("rates", "20k", "packets/s the generator offers in all (clients for c2p/both, the peer for p2c), comma list")
	sizes := fs.String("sizes", "100", "payload bytes, comma list")
	dir := fs.String("direction", "c2p,p2c,both", "comma list of c2p (client → peer, counted at the peer), p2c (the peer sends to every relayed address, counted at the clients), both (an echoing peer: every packet goes both ways, round trips timed)")
	pacing := fs.String("pacing", "interleaved", "interleaved (one datagram per send call, flows round-robin on a fixed schedule) or burst (32 per flow per sendmmsg), comma list")
	tr := fs.String("transport", "udp", "client ↔ server transports, comma list of udp,tcp,tls,dtls (the relay leg is UDP)")
	dur := fs.Duration("duration", 3*time.Second, "sending time per step (quick: 1s)")
	maxPkts := fs.Int("max-packets", 0, "packets per step at most (0: rate × duration)")
	baseline := fs.Bool("baseline", true, "also measure the generator with no server (target \"direct\") for the whole-machine CPU baseline")
	fs.BoolVar(&c.gso, "gso", false, "clients send each burst (burst pacing, c2p and both, UDP) as one UDP GSO send (UDP_SEGMENT, Linux): 32 datagrams per system call, for a generator that outruns the servers; with -netns the generator's devices segment in software (tx-udp-segmentation off), so servers receive one datagram per segment")
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := visited(fs)
	if c.gso && os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < gsoProcs {
		// Pinned to one CPU (taskset -c 0), Go would run the sender and
		// the sink on one P: the sink's reads hold it while the sender's
		// next burst falls due, and the schedule slips. With a P each the
		// kernel interleaves them at every wake-up instead.
		runtime.GOMAXPROCS(gsoProcs)
	}
	if c.quick {
		quickDefault(set, "flows", flows, "8")
		quickDefault(set, "rates", rates, "5k")
		if !set["duration"] {
			*dur = time.Second
		}
	}
	ns, err := ints(*flows)
	if err != nil {
		return err
	}
	rs, err := ints(*rates)
	if err != nil {
		return err
	}
	szs, err := ints(*sizes)
	if err != nil {
		return err
	}
	ps, err := transports(*tr)
	if err != nil {
		return err
	}
	var dirs []bench.Direction
	for _, d := range strings.Split(*dir, ",") {
		v, err := bench.ParseDirection(strings.TrimSpace(d))
		if err != nil {
			return err
		}
		dirs = append(dirs, v)
	}
	var pacings []bench.Pacing
	for _, p := range strings.Split(*pacing, ",") {
		v, err := bench.ParsePacing(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		pacings = append(pacings, v)
	}
	var steps []bench.FlowsStep
	for _, pc := range pacings {
		for _, p := range ps {
			for _, d := range dirs {
				for _, n := range ns {
					for _, sz := range szs {
						for _, r := range rs {
							st := bench.FlowsStep{Flows: n, Rate: r, Size: sz, Direction: d, Pacing: pc,
								Transport: p, Duration: *dur, MaxPackets: *maxPkts, GSO: c.gso}
							if p == turnclient.UDP {
								if err := st.CheckGSO(); err != nil {
									return fmt.Errorf("-gso: %w", err)
								}
							}
							steps = append(steps, st)
						}
					}
				}
			}
		}
	}
	c.streams = needsStreams(ps)
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := signalContext()
	defer cancel()
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	rep.Flows = c.runner(ts).Flows(ctx, steps, *baseline)
	return c.finish(rep)
}

func needsStreams(ps []turnclient.Proto) bool {
	for _, p := range ps {
		if p != turnclient.UDP {
			return true
		}
	}
	return false
}

func runWebRTC(args []string) error {
	fs := flag.NewFlagSet("webrtc", flag.ContinueOnError)
	var c common
	c.register(fs)
	ks := fs.String("allocations", "1000,5000", "allocations K, comma list (quick: 100)")
	video := fs.Float64("video-share", 0.1, "share of allocations that also send video (500 pps, 1100 B)")
	tr := fs.String("transport", "udp", "client ↔ server transports, comma list of udp,tcp,tls,dtls")
	dur := fs.Duration("duration", 20*time.Second, "sending time per step and target (quick: 2s)")
	maxPPS := fs.Int("max-pps", 40000, "cap on relayed packets/s (both directions); every flow's rate is scaled down to fit, 0: full rate")
	baseline := fs.Bool("baseline", true, "also measure the generator with no server (target \"direct\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := visited(fs)
	if c.quick {
		quickDefault(set, "allocations", ks, "100")
		if !set["duration"] {
			*dur = 2 * time.Second
		}
	}
	kl, err := ints(*ks)
	if err != nil {
		return err
	}
	ps, err := transports(*tr)
	if err != nil {
		return err
	}
	var steps []bench.WebRTCStep
	for _, p := range ps {
		for _, k := range kl {
			steps = append(steps, bench.NewWebRTCStep(k, *video, p, *dur, *maxPPS))
		}
	}
	c.streams = needsStreams(ps)
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := signalContext()
	defer cancel()
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	rep.WebRTC = c.runner(ts).WebRTC(ctx, steps, *baseline)
	return c.finish(rep)
}
