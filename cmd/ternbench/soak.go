package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/peer"
	"github.com/tern-gw/tern/bench/soak"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/selfsigned"
)

func runSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: ternbench soak [flags]

Starts ternd with the README's kind of config and every limit at its default (or attacks
-server), and for -duration runs at once: legitimate pion/turn clients relaying to an echo
peer, one user on one address allocating until the quota refuses it, a wrong-password flood
from one address, and idle TCP connections. With -attacks, issue 22's hardening attacks run one
after another, each for -attack-time, while the legitimate clients relay (ternd is then started
with TURN-TLS and TURN-DTLS listeners on the -listen port + 5 and a TURN-UDP listener with a wide
cluster on + 6). Prints the figures of docs/security.md.

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
		attacks     = fs.String("attacks", "", "hardening attacks of issue 22 to run one after another: all, or some of "+strings.Join(soak.AllAttacks, ","))
		attackTime  = fs.Duration("attack-time", 10*time.Second, "how long each attack runs (the budget attack up to 6 times this, until every address is refused)")
		spoofRate   = fs.Int("spoof-rate", 200, "spoof: forged packets per second from the victim's address (127.5.0.1)")
		adminConns  = fs.Int("admin-conns", 3000, "admin: keep-alive connections to the health port, 8 per address (127.6.x.y)")
		halfFrames  = fs.Int("half-frames", 10000, "halfframes: TCP connections each sending most of a 65,000-byte frame, -conns-per-ip per address (127.7.x.y)")
		halfBody    = fs.Int("half-frame-body", 60000, "halfframes: bytes of the frame's body each connection sends")
		dtlsRate    = fs.Int("dtls-rate", 2300, "dtls: datagrams per second to the TURN-DTLS listener, each from a new source port (127.8.x.y)")
		budgetAddrs = fs.Int("budget-addrs", 5, "budget: addresses that allocate with valid credentials until refused (127.9.0.x)")
		budgetChans = fs.Int("budget-channels", 4096, "budget: channel bindings per allocation (besides its 1,024 permissions)")
		rotateAddrs = fs.Int("rotate-addrs", 250, "rotate: addresses guessing a password (127.10.x.y)")
		rotateGuess = fs.Int("rotate-guesses", 13, "rotate: wrong-password guesses per address")
		reflectReqs = fs.Int("reflect-requests", 1000, "reflect: unauthenticated Allocates of each form")
		tlsServer   = fs.String("tls-server", "", "with -server: its TURN-TLS address, for the attacks' legitimate TLS allocations")
		dtlsServer  = fs.String("dtls-server", "", "with -server: its TURN-DTLS address (dtls attack)")
		wideServer  = fs.String("wide-server", "", "with -server: a TURN-UDP listener whose clusters are 0.0.0.0/0, ::/0 and 127.0.0.0/8 (metadata, self and budget attacks)")
		healthAddr  = fs.String("health", "", "with -server: its health endpoint (admin attack)")
		memLimit    = fs.Int("memory-limit-mib", 0, "the server's memory limit, MiB, when below a Dataplane's default 512: passed to the started ternd as --memory-limit-mib (its state budget is half of it), and its RSS must stay below it")
		out         = fs.String("o", "", "write the result as JSON to this file")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	attackList, err := soak.ParseAttacks(*attacks)
	if err != nil {
		return err
	}
	raiseNoFile()
	ctx, cancel := signalContext()
	defer cancel()

	cfg := soak.Config{
		Duration: *duration, Allocations: *allocs, PerIP: *perIP, Interval: *interval, Size: *size,
		QuotaRate: *quotaRate, FloodRate: *floodRate, IdleConns: *idle, ConnsPerIP: *connsPerIP,
		KeepAlive: *keepAlive, SampleEvery: *sampleEvery, Progress: os.Stderr,
		Creds:   turnclient.Credentials{Username: *user, Password: *pass},
		Attacks: attackList, AttackTime: *attackTime, MemoryLimit: int64(*memLimit) << 20,
		SpoofRate: *spoofRate, AdminConns: *adminConns, HalfFrames: *halfFrames, HalfFrameBody: *halfBody,
		DTLSRate: *dtlsRate, BudgetAddrs: *budgetAddrs, BudgetChannels: *budgetChans,
		RotateAddrs: *rotateAddrs, RotateGuesses: *rotateGuess, ReflectRequests: *reflectReqs,
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
		for _, a := range []struct {
			flag string
			to   *netip.AddrPort
		}{{*tlsServer, &cfg.TLSServer}, {*dtlsServer, &cfg.DTLSServer}, {*wideServer, &cfg.WideServer}, {*healthAddr, &cfg.HealthAddr}} {
			if a.flag == "" {
				continue
			}
			if *a.to, err = netip.ParseAddrPort(a.flag); err != nil {
				return err
			}
		}
		cfg.OwnUDP = []netip.AddrPort{cfg.Server}
		if cfg.DTLSServer.IsValid() {
			cfg.OwnUDP = append(cfg.OwnUDP, cfg.DTLSServer)
		}
		if cfg.WideServer.IsValid() {
			cfg.OwnUDP = append(cfg.OwnUDP, cfg.WideServer)
		}
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
		tc := soak.TerndConfig(la, ra, p.Addr().Addr())
		if len(attackList) > 0 {
			cert, key, err := selfsigned.Write(filepath.Join(dir, "cert"), "ternbench-soak", 24*time.Hour)
			if err != nil {
				return err
			}
			tc = soak.HardenedConfig(la, ra, p.Addr().Addr(), cert, key)
			soak.Hardened(&cfg, la)
		}
		var flags []string
		if *memLimit > 0 {
			flags = append(flags, "--memory-limit-mib", fmt.Sprint(*memLimit))
		}
		t, err := l.StartTernd("ternd", tc, la, flags...)
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
