package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/peer"
)

// common are the flags every measuring command shares.
type common struct {
	targets  listFlag
	launch   string
	ternd    string
	workDir  string
	threads  int
	basePort int
	repeats  int
	out      string
	quick    bool
	progress string
	relayIP  string
	netns    string
	pin      string
	// clientIP and peerIP place the generator's sockets on addresses of
	// this namespace other than loopback, for servers elsewhere (-t).
	clientIP, peerIP string
	// streams makes launched servers listen on TURN-TCP, TLS and DTLS too.
	streams bool
	// tlsUpstream is ternd-443's HTTPS upstream (launch.Launcher.TLSUpstream).
	tlsUpstream string
	// gso is flows -gso: the clients send with UDP GSO, so a -netns
	// topology segments it in software (netns.Topology.SegmentGSO).
	gso bool
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func (c *common) register(fs *flag.FlagSet) {
	fs.Var(&c.targets, "t", "target NAME=ADDR[,kind=turn|raw][,pid=PID][,user=U][,pass=P][,tcp=ADDR][,tls=ADDR][,dtls=ADDR]; repeatable")
	fs.StringVar(&c.launch, "launch", "", "servers to start and stop: comma list of "+strings.Join(append(launch.Names, launch.Extra...), ",")+", or all (= "+strings.Join(launch.Names, ",")+")")
	fs.StringVar(&c.ternd, "ternd", "bin/ternd", "ternd binary for -launch")
	fs.StringVar(&c.workDir, "work-dir", "", "configs and server logs of -launch (default a temporary directory)")
	fs.IntVar(&c.threads, "threads", 2, "listener sockets / relay threads of launched servers")
	fs.IntVar(&c.basePort, "base-port", 23478, "TURN port of the first launched server; the others follow in steps of 100")
	fs.IntVar(&c.repeats, "repeats", 1, "measurements of each target per step (interleaved)")
	fs.StringVar(&c.out, "o", "", "write results as JSON to this file")
	fs.BoolVar(&c.quick, "quick", false, "smoke-sized steps (figures not comparable)")
	fs.StringVar(&c.relayIP, "relay-ip", "127.0.0.2", "relay address of the first launched server; the others follow (+1, +2, ...)")
	fs.StringVar(&c.netns, "netns", "", "run everything in network namespaces made for the run and removed after (root; issue 15's offload runs): loopback (one namespace, all on 127.0.0.0/8, forwarding on) or veth (client — server — peer namespaces joined by veth pairs, 10.77.1.0/24 and 10.77.2.0/24); -relay-ip is then the topology's")
	fs.StringVar(&c.clientIP, "client-ip", "", "open the clients' sockets on this address of the current namespace (default 127.0.97.x), for a server elsewhere: a pod on a cluster, say; a comma list spreads the flows over the addresses in turn (a server's per-IP quota); not with -netns")
	fs.StringVar(&c.peerIP, "peer-ip", "", "open the peer's socket on this address of the current namespace (default 127.0.0.1), one the server's route admits; not with -netns")
	fs.StringVar(&c.pin, "pin", "", "pin launched servers to this CPU list (taskset -c), e.g. 1")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on stderr: auto (when a terminal), on, off")
}

// setup resolves targets (starting launched ones) and returns a cleanup
// that stops what was started.
func (c *common) setup() ([]bench.Target, func(), error) {
	var ts []bench.Target
	for _, s := range c.targets {
		t, err := bench.ParseTarget(s)
		if err != nil {
			return nil, nil, err
		}
		ts = append(ts, t)
	}
	cleanup := func() {}
	if c.launch != "" {
		raiseNoFile() // launched servers inherit it
		names := strings.Split(c.launch, ",")
		if c.launch == "all" {
			names = launch.Names
		}
		dir := c.workDir
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "ternbench-"); err != nil {
				return nil, nil, err
			}
		}
		self, err := os.Executable()
		if err != nil {
			return nil, nil, err
		}
		relay, err := netip.ParseAddr(c.relayIP)
		if err != nil || !relay.Is4() {
			return nil, nil, fmt.Errorf("-relay-ip %q: want an IPv4 address", c.relayIP)
		}
		l := &launch.Launcher{Dir: dir, Ternd: c.ternd, Self: self, Threads: c.threads, BasePort: c.basePort,
			RelayIP: relay, Streams: c.streams, CPUs: c.pin, TLSUpstream: c.tlsUpstream}
		bench.Net.ServerCPUs = c.pin
		removeNS := func() {}
		if c.netns != "" {
			if removeNS, err = c.setupNetns(l); err != nil {
				return nil, nil, err
			}
		}
		cleanup = func() { l.Stop(); removeNS() }
		for _, n := range names {
			t, err := l.Start(strings.TrimSpace(n))
			if err != nil {
				cleanup()
				return nil, nil, err
			}
			fmt.Fprintf(os.Stderr, "started %s (pid %d) on %v\n", t.Name, t.PID, t.Addr)
			if t.Name == "ternd-offload" {
				watchOffload(l, t)
			}
			if c.netns != "" && (t.Name == "ternd" || t.Name == "ternd-offload") {
				watchListeners(l, t)
			}
			ts = append(ts, t)
		}
	}
	if c.clientIP != "" || c.peerIP != "" {
		if c.netns != "" {
			return nil, nil, fmt.Errorf("-client-ip and -peer-ip are for a run without -netns (it places the sockets itself)")
		}
		for _, a := range []struct {
			flag, v string
			to      *netip.Addr
		}{{"-client-ip", c.clientIP, &bench.Net.ClientIP}, {"-peer-ip", c.peerIP, &bench.Net.PeerIP}} {
			if a.v == "" {
				continue
			}
			for i, v := range strings.Split(a.v, ",") {
				ip, err := netip.ParseAddr(strings.TrimSpace(v))
				if err != nil {
					return nil, nil, fmt.Errorf("%s %q: %w", a.flag, a.v, err)
				}
				switch {
				case i == 0:
					*a.to = ip
				case a.flag == "-client-ip":
					bench.Net.MoreClientIPs = append(bench.Net.MoreClientIPs, ip)
				default:
					return nil, nil, fmt.Errorf("-peer-ip %q: want one address", a.v)
				}
			}
		}
		bench.Net.Topology = "external"
	}
	if c.netns != "" && c.launch == "" {
		return nil, nil, fmt.Errorf("-netns needs -launch: the servers must run in its namespaces")
	}
	if len(ts) == 0 {
		cleanup()
		return nil, nil, fmt.Errorf("no targets: give -t and/or -launch")
	}
	return ts, cleanup, nil
}

func (c *common) runner(ts []bench.Target) *bench.Runner {
	r := &bench.Runner{Targets: ts, Repeats: c.repeats}
	if c.progress == "on" || (c.progress == "auto" && isatty.IsTerminal(os.Stderr.Fd())) {
		r.Progress = os.Stderr
	}
	return r
}

// finish prints the table and writes the JSON.
func (c *common) finish(rep *bench.Report) error {
	bench.PrintTable(os.Stdout, rep)
	if c.out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return err
	}
	return rep.WriteJSON(c.out)
}

// signalContext is cancelled by SIGINT/SIGTERM, so an interrupted run still
// stops the servers it started and writes what it measured.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func startPeers() (bench.Peers, func(), error) {
	lo := netip.MustParseAddrPort("127.0.0.1:0")
	sink, err := peer.Start(lo, false, 4<<20)
	if err != nil {
		return bench.Peers{}, nil, err
	}
	echo, err := peer.Start(lo, true, 4<<20)
	if err != nil {
		sink.Close()
		return bench.Peers{}, nil, err
	}
	return bench.Peers{Sink: sink, Echo: echo}, func() { sink.Close(); echo.Close() }, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		if n, ok := strings.CutSuffix(f, "k"); ok {
			f, mult = n, 1000
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, v*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list %q", s)
	}
	return out, nil
}
