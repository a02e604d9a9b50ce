package main

import (
	"flag"
	"time"

	"github.com/tern-gw/tern/bench"
)

func runThroughput(args []string) error {
	fs := flag.NewFlagSet("throughput", flag.ContinueOnError)
	var c common
	c.register(fs)
	clients := fs.String("clients", "8,64", "client counts N, comma list (quick: 8)")
	rates := fs.String("rates", "20k,50k,100k", "offered rates, packets/s, comma list (quick: 5k,20k)")
	sizes := fs.String("sizes", "100", "payload sizes, bytes, comma list")
	mode := fs.String("mode", "channel", "channel (ChannelData) or send (Send indications)")
	echo := fs.Bool("echo", false, "echoing peer, count at the clients (each packet crosses the server twice)")
	dur := fs.Duration("duration", 3*time.Second, "sending time per step (quick: 1s)")
	maxPkts := fs.Int("max-packets", 0, "packets per step at most (0: rate × duration)")
	senders := fs.Int("senders", 1, "sending goroutines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := visited(fs)
	if c.quick {
		quickDefault(set, "clients", clients, "8")
		quickDefault(set, "rates", rates, "5k,20k")
		if !set["duration"] {
			*dur = time.Second
		}
	}
	ns, err := ints(*clients)
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
	var steps []bench.ThroughputStep
	for _, n := range ns {
		for _, sz := range szs {
			for _, r := range rs {
				steps = append(steps, bench.ThroughputStep{Clients: n, Rate: r, Size: sz, Mode: bench.Mode(*mode),
					Echo: *echo, Duration: *dur, MaxPackets: *maxPkts, Senders: *senders})
			}
		}
	}
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	peers, stop, err := startPeers()
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := signalContext()
	defer cancel()
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	rep.Throughput = c.runner(ts).Throughput(ctx, steps, peers)
	return c.finish(rep)
}

func runLatency(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	var c common
	c.register(fs)
	clients := fs.Int("clients", 8, "clients, sending in turn")
	rate := fs.Int("rate", 500, "probes per second, all clients together")
	size := fs.Int("size", 100, "payload bytes (at least 16)")
	mode := fs.String("mode", "channel", "channel or send")
	dur := fs.Duration("duration", 10*time.Second, "probing time per target (quick: 2s)")
	maxPkts := fs.Int("max-packets", 0, "probes at most (0: rate × duration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.quick && !visited(fs)["duration"] {
		*dur = 2 * time.Second
	}
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	peers, stop, err := startPeers()
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := signalContext()
	defer cancel()
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	rep.Latency = c.runner(ts).Latency(ctx, []bench.LatencyStep{{Clients: *clients, Rate: *rate, Size: *size,
		Mode: bench.Mode(*mode), Duration: *dur, MaxPackets: *maxPkts}}, peers)
	return c.finish(rep)
}

func runAllocs(args []string) error {
	fs := flag.NewFlagSet("allocs", flag.ContinueOnError)
	var c common
	c.register(fs)
	workers := fs.Int("workers", 16, "concurrent clients")
	dur := fs.Duration("duration", 5*time.Second, "time per target (quick: 1s)")
	maxOps := fs.Int("max-ops", 100000, "cycles per target at most")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.quick && !visited(fs)["duration"] {
		*dur = time.Second
	}
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := signalContext()
	defer cancel()
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	rep.Allocs = c.runner(ts).Allocs(ctx, []bench.AllocsStep{{Workers: *workers, Duration: *dur, MaxOps: *maxOps}})
	return c.finish(rep)
}

func runMemory(args []string) error {
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	var c common
	c.register(fs)
	ks := fs.String("allocations", "10k,60k", "allocations K to hold, comma list (quick: 1k)")
	workers := fs.Int("workers", 32, "concurrent clients making allocations")
	timeout := fs.Duration("timeout", 60*time.Second, "time to make K allocations; what is held then is measured")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.quick {
		quickDefault(visited(fs), "allocations", ks, "1k")
	}
	kl, err := ints(*ks)
	if err != nil {
		return err
	}
	var steps []bench.MemoryStep
	for _, k := range kl {
		steps = append(steps, bench.MemoryStep{Allocations: k, Workers: *workers, Timeout: *timeout})
	}
	ts, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := signalContext()
	defer cancel()
	rep := &bench.Report{Meta: bench.NewMeta(ts, c.quick)}
	// Idle first: freshly launched servers that have served nothing but the
	// readiness probe. Only meaningful for servers this run launched.
	time.Sleep(idleSettle)
	rep.Idle = bench.MeasureIdle(ts)
	rep.Memory = c.runner(ts).Memory(ctx, steps)
	return c.finish(rep)
}

// idleSettle is how long the memory test lets freshly launched servers
// settle (start-up garbage collected, threads parked) before reading their
// idle RSS.
const idleSettle = 2 * time.Second

func visited(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func quickDefault(set map[string]bool, name string, v *string, quick string) {
	if !set[name] {
		*v = quick
	}
}
