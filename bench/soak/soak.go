// Package soak is ternbench's soak under attack: for a fixed time, against one TURN server
// with its default limits, legitimate pion/turn clients relay through their allocations while
// an attacker (1) takes allocations from one address until the quota answers 486, (2) floods
// signed requests with a wrong password from one address, and (3) holds thousands of TCP
// connections that never allocate. It measures what the legitimate clients see (loss per
// client, round-trip time, failed refreshes) and what the server pays (resident memory and CPU
// over time, its refusal counters), so the claim "safe by default under attack"
// (docs/security.md) has figures behind it.
//
// Besides those, Config.Attacks runs the hardening attacks of issue 22 (attack.go), one after
// another for a few seconds each while the legitimate clients relay: forged nonces from a
// victim's address, keep-alive connections to the health port, half-sent stream frames, DTLS
// garbage, permission and channel floods with credentials, metadata peers, wrong passwords
// from rotating addresses, relaying to ternd's own listeners and unauthenticated Allocates as
// reflection; one file each.
//
// Every client and attacker uses source addresses of its own in 127.0.0.0/8, so the per-address
// limits apply to each as they would to separate hosts:
//
//	127.1.x.y   legitimate clients, Config.PerIP allocations per address
//	127.2.0.1   the quota attacker
//	127.3.0.1   the wrong-password flood
//	127.4.x.y   idle TCP connections, Config.ConnsPerIP per address
//	127.5.0.1   the spoofing attack's victim (and the forged packets' source); 127.5.1.1 the spoofer's own address
//	127.6.x.y   keep-alive connections to the health port, 8 per address
//	127.7.x.y   half-sent stream frames, Config.ConnsPerIP per address
//	127.8.x.y   DTLS garbage, a new source address and port per datagram
//	127.9.0.x   the permission and channel flood, one user per address
//	127.10.x.y  wrong passwords from rotating addresses, one guesser per address
//	127.11.0.x  metadata peers (.1), ternd's own listeners as peers (.2, .3)
//	127.12.0.1  unauthenticated Allocates (reflection)
//	127.13.0.x  legitimate TCP, TLS and DTLS allocations made during the attacks
//
// The attacks send only to the server's addresses; the peers they name (metadata addresses,
// 127.200.0.0/16) are never sent a packet.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/tern-gw/tern/bench/procstat"
	"github.com/tern-gw/tern/bench/turnclient"
)

// Config is one soak run. Zero counts turn a part off.
type Config struct {
	// Server is the TURN-UDP listener; TCPServer the TURN-TCP listener the idle connections
	// go to (zero: none).
	Server, TCPServer netip.AddrPort
	// Creds are the valid static credentials.
	Creds turnclient.Credentials
	// PID is the server process, for RSS and CPU time from /proc (0: not measured).
	PID int
	// MetricsURL is the server's Prometheus endpoint ("" : not scraped).
	MetricsURL string
	// Peer is an echoing UDP peer the legitimate clients relay to; PeerPackets, when set,
	// returns the datagrams it has received, to tell where lost ones were lost.
	Peer        netip.AddrPort
	PeerPackets func() uint64 `json:"-"`

	// Duration is how long everything runs at once, from the start of the ramp.
	Duration time.Duration
	// Allocations is the legitimate clients, one pion/turn allocation each, PerIP per source
	// address; each sends a Size-byte datagram every Interval to the peer, which echoes it.
	Allocations, PerIP int
	Interval           time.Duration
	Size               int
	// QuotaRate is the quota attacker's allocation attempts per second once its quota is
	// used up (before that it allocates as fast as the server answers); 0: no quota attacker.
	QuotaRate float64
	// FloodRate is wrong-password requests per second from one address; 0: no flood.
	FloodRate int
	// IdleConns TCP connections, ConnsPerIP per source address, each sending a Binding
	// request when opened and then every KeepAlive (0: never again, so the server's idle
	// timeout closes them and they are opened again).
	IdleConns, ConnsPerIP int
	KeepAlive             time.Duration
	// Attacks are the hardening attacks to run (AllAttacks, ParseAttacks), one after another
	// once the legitimate clients have allocated, each for at most AttackTime; with
	// attacks, the run lasts until they are done and at least Duration.
	Attacks    []string
	AttackTime time.Duration
	// TLSServer and DTLSServer are TURN-TLS and TURN-DTLS listeners, for the legitimate
	// allocations made during the attacks (zero: not tried); WideServer a TURN-UDP listener
	// whose clusters are 0.0.0.0/0, ::/0 and 127.0.0.0/8 and whose relay has an IPv6
	// address, for the metadata, self and budget attacks; HealthAddr the health endpoint
	// the admin attack holds connections to; OwnUDP ternd's UDP listener addresses (TURN-UDP
	// and TURN-DTLS), the peers the self attack asks for.
	TLSServer, DTLSServer, WideServer, HealthAddr netip.AddrPort
	OwnUDP                                        []netip.AddrPort
	// SpoofRate is forged packets per second from the victim's address.
	SpoofRate int
	// AdminConns is keep-alive connections to HealthAddr, 8 per source address.
	AdminConns int
	// HalfFrames is TCP connections (ConnsPerIP per address) to TCPServer that each send a
	// STUN header declaring 65,000 bytes and HalfFrameBody bytes of it.
	HalfFrames, HalfFrameBody int
	// DTLSRate is datagrams per second to DTLSServer, half 14-byte garbage with first byte
	// 22, half ClientHellos without a cookie.
	DTLSRate int
	// BudgetAddrs is the addresses that allocate with valid credentials until refused, each
	// allocation filling its 1,024 permissions and BudgetChannels channel bindings.
	BudgetAddrs, BudgetChannels int
	// RotateAddrs is the addresses that each fetch a nonce and send RotateGuesses signed
	// requests with a wrong password.
	RotateAddrs, RotateGuesses int
	// ReflectRequests is the unauthenticated Allocates of each form the reflection attack
	// sends.
	ReflectRequests int

	// MemoryLimit is the server's memory limit, bytes, when it runs under one smaller than a
	// Dataplane's default (ternd --memory-limit-mib); its RSS must stay below it. 0: MaxRSS.
	MemoryLimit int64

	// SampleEvery is the interval of the time series (RSS, CPU, counters).
	SampleEvery time.Duration
	// Progress, when set, gets one line per sample.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.PerIP <= 0 {
		c.PerIP = 100
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Size < 16 {
		c.Size = 100
	}
	if c.ConnsPerIP <= 0 {
		c.ConnsPerIP = 400
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 10 * time.Second
	}
	if c.AttackTime <= 0 {
		c.AttackTime = 5 * time.Second
	}
	if c.HalfFrameBody <= 0 || c.HalfFrameBody > halfFrameLen {
		c.HalfFrameBody = 60000
	}
	if c.BudgetChannels <= 0 {
		c.BudgetChannels = 64
	}
	if c.RotateGuesses <= 0 {
		c.RotateGuesses = 13
	}
	if c.ReflectRequests <= 0 {
		c.ReflectRequests = 200
	}
}

// rssBudget is the RSS the server must stay below: MemoryLimit when set and smaller than
// MaxRSS, else MaxRSS.
func (c *Config) rssBudget() int64 {
	if c.MemoryLimit > 0 && c.MemoryLimit < MaxRSS {
		return c.MemoryLimit
	}
	return MaxRSS
}

// Result is what a run measured. Counts are totals over the run unless named otherwise.
type Result struct {
	Config  Config         `json:"config"`
	Elapsed time.Duration  `json:"elapsed_ns"`
	Legit   LegitResult    `json:"legit"`
	Quota   QuotaResult    `json:"quota"`
	Flood   FloodResult    `json:"flood"`
	Conns   ConnsResult    `json:"conns"`
	Attacks []AttackResult `json:"attacks,omitempty"`
	// MaxFDs is the server's limit on open files.
	MaxFDs  int      `json:"max_fds,omitempty"`
	Samples []Sample `json:"samples"`
	// Server is the server's counters at the end (metric series name and labels -> value).
	Server map[string]float64 `json:"server,omitempty"`
}

// Run runs the soak until cfg.Duration has passed or ctx is done, and returns what it saw.
// The error is for a run that could not start (no peer, no server); failures during the
// run are in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if !cfg.Server.IsValid() || !cfg.Peer.IsValid() {
		return nil, errors.New("soak: Server and Peer are required")
	}
	if cfg.PID > 0 {
		if _, err := procstat.RSS(cfg.PID); err != nil {
			return nil, fmt.Errorf("soak: server pid %d: %w", cfg.PID, err)
		}
	}
	for _, a := range cfg.Attacks {
		if _, ok := attackItem[a]; !ok {
			return nil, fmt.Errorf("soak: unknown attack %q", a)
		}
	}
	start := time.Now()
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	attacksDone := make(chan struct{})
	if len(cfg.Attacks) == 0 {
		close(attacksDone)
	}
	// The run ends at Duration, or once the attacks are done (and the echoes of the last
	// second are back), whichever is later.
	go func() {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		select {
		case <-attacksDone:
		case <-ctx.Done():
		}
		cancel()
	}()

	legit := newLegit(cfg, start)
	quota := &quotaAttacker{cfg: cfg}
	flood := &flooder{cfg: cfg}
	conns := &connHolder{cfg: cfg}
	s := &sampler{cfg: cfg, start: start, legit: legit, quota: quota, flood: flood, conns: conns}
	s.sample() // the server before anything happens

	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(s.run)
	if cfg.IdleConns > 0 && cfg.TCPServer.IsValid() {
		run(conns.run)
	}
	if cfg.FloodRate > 0 {
		run(flood.run)
	}
	if cfg.QuotaRate > 0 {
		run(quota.run)
	}
	run(legit.run)
	var attacks []AttackResult
	if len(cfg.Attacks) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(attacksDone)
			select {
			case <-legit.allocDone:
			case <-ctx.Done():
				return
			}
			attacks = runAttacks(outer, cfg, s)
		}()
	}
	wg.Wait()

	res := &Result{Config: cfg, Elapsed: time.Since(start)}
	res.Legit = legit.result()
	res.Quota = quota.result()
	res.Flood = flood.result()
	res.Conns = conns.result()
	res.Attacks = attacks
	if cfg.PID > 0 {
		res.MaxFDs, _ = procstat.MaxFDs(cfg.PID)
	}
	// After the clients have gone (their Refresh 0 in flight): what the server holds on to.
	time.Sleep(time.Second)
	s.sample()
	res.Samples = s.samples
	res.Server = s.lastMetrics
	return res, nil
}

// clientAddr is the i-th source address of a block: 127.<block>.<i/250>.<1+i%250>.
func clientAddr(block byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, block, byte(i / 250), byte(1 + i%250)})
}
