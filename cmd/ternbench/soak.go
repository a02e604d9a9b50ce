package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/peer"
	"github.com/tern-gw/tern/bench/soak"
	"github.com/tern-gw/tern/bench/turnclient"
)

func runSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: ternbench soak [flags]

Starts ternd with the README's kind of config and every limit at its default (or attacks
-server), and for -duration runs at once: legitimate pion/turn clients relaying to an echo
peer, one user on one address allocating until the quota refuses it, a wrong-password flood
from one address, and idle TCP connections. Prints the figures of docs/security.md.

`)
		fs.PrintDefaults()
	}
	var (
		ternd       = fs.String("ternd", "bin/ternd", "ternd binary to start")
		workDir     = fs.String("work-dir", "", "ternd's config and log (default a temporary directory)")
		listen      = fs.String("listen", "127.0.0.1:3478", "TURN-UDP and TURN-TCP address of the started ternd; metrics on the next port, health on the one after")
		relayIP     = fs.String("relay-ip", "127.0.0.1", "relay address of the started ternd (ports 20000-29999)")
		server      = fs.String("server", "", "attack this TURN-UDP address instead of starting ternd")
		tcpServer   = fs.String("tcp-server", "", "with -server: its TURN-TCP address for the idle connections")
		pid         = fs.Int("pid", 0, "with -server: its process, for RSS and CPU")
		metricsURL  = fs.String("metrics-url", "", "with -server: its /metrics URL")
		user        = fs.String("user", soak.User, "with -server: a valid username")
		pass        = fs.String("pass", soak.Pass, "with -server: its password")
		duration    = fs.Duration("duration", 10*time.Minute, "how long everything runs at once")
		allocs      = fs.Int("allocs", 5000, "legitimate allocations (pion/turn clients), each relaying to an echo peer")
		perIP       = fs.Int("allocs-per-ip", 100, "legitimate allocations per source address (127.1.x.y); the default quota is 200")
		interval    = fs.Duration("interval", time.Second, "time between two datagrams of one allocation")
		size        = fs.Int("size", 100, "datagram payload, bytes")
		quotaRate   = fs.Float64("quota-rate", 10, "quota attacker's attempts per second once refused (0: no quota attacker)")
		floodRate   = fs.Int("flood-rate", 1000, "wrong-password requests per second from 127.3.0.1 (0: no flood)")
		idle        = fs.Int("idle-conns", 5000, "idle TCP connections (0: none)")
		connsPerIP  = fs.Int("conns-per-ip", 400, "idle connections per source address (127.4.x.y); the default limit is 500")
		keepAlive   = fs.Duration("keepalive", 20*time.Second, "Binding interval on each idle connection (0: none, so ternd's idle timeout closes them and they are reopened)")
		sampleEvery = fs.Duration("sample", 10*time.Second, "time-series interval")
		out         = fs.String("o", "", "write the result as JSON to this file")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	raiseNoFile()
	ctx, cancel := signalContext()
	defer cancel()

	cfg := soak.Config{
		Duration: *duration, Allocations: *allocs, PerIP: *perIP, Interval: *interval, Size: *size,
		QuotaRate: *quotaRate, FloodRate: *floodRate, IdleConns: *idle, ConnsPerIP: *connsPerIP,
		KeepAlive: *keepAlive, SampleEvery: *sampleEvery, Progress: os.Stderr,
		Creds: turnclient.Credentials{Username: *user, Password: *pass},
	}
	p, err := peer.Start(netip.MustParseAddrPort("127.0.0.1:0"), true, 4<<20)
	if err != nil {
		return err
	}
	defer p.Close()
	cfg.Peer, cfg.PeerPackets = p.Addr(), p.Packets

	if *server != "" {
		if cfg.Server, err = netip.ParseAddrPort(*server); err != nil {
			return err
		}
		if *tcpServer != "" {
			if cfg.TCPServer, err = netip.ParseAddrPort(*tcpServer); err != nil {
				return err
			}
		}
		cfg.PID, cfg.MetricsURL = *pid, *metricsURL
	} else {
		la, err := netip.ParseAddrPort(*listen)
		if err != nil {
			return err
		}
		ra, err := netip.ParseAddr(*relayIP)
		if err != nil {
			return err
		}
		dir := *workDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "ternbench-soak-"); err != nil {
				return err
			}
		}
		l := &launch.Launcher{Dir: dir, Ternd: *ternd}
		defer l.Stop()
		t, err := l.StartTernd("ternd", soak.TerndConfig(la, ra, p.Addr().Addr()), la)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "started ternd (pid %d) on %v udp+tcp; config and log in %s\n", t.PID, la, dir)
		cfg.Server, cfg.TCPServer, cfg.PID = la, la, t.PID
		cfg.MetricsURL = soak.MetricsURL(la)
		if *workDir == "" {
			fmt.Fprintf(os.Stderr, "(%s is left in place for the log: %s)\n", dir, filepath.Join(dir, "ternd.log"))
		}
	}

	res, err := soak.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.WriteSummary(os.Stdout)
	if *out != "" {
		if err := res.WriteJSON(*out); err != nil {
			return err
		}
	}
	if fs := res.Failures(); len(fs) > 0 {
		return fmt.Errorf("the soak missed %d goal(s)", len(fs))
	}
	return nil
}
