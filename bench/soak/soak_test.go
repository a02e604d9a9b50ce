package soak_test

import (
	"bytes"
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/peer"
	"github.com/tern-gw/tern/bench/soak"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestSoakShort is `ternbench soak` in small: 10 s against a built ternd with its default
// limits, 100 legitimate allocations relaying from two addresses while one address takes
// allocations until refused, another floods wrong passwords and 300 TCP connections stay
// open. The legitimate clients must all allocate and relay, the quota must stop the attacker
// at 200 allocations with 486, the flood must be answered at most burst + rate × time
// (10 + 2/s), and the idle connections, which send a Binding every 3 s, stay: 300 is below
// every limit. docs/security.md has the 10-minute run.
func TestSoakShort(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.SkipOrFail(t, "the soak reads /proc: Linux only, this is %s", runtime.GOOS)
	}
	dir := t.TempDir()
	ternd := testenv.Ternd(t)
	echo, err := peer.Start(netip.MustParseAddrPort("127.0.0.1:0"), true, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	// A port and relay address of its own, apart from the bench's and the examples'.
	listen := netip.MustParseAddrPort("127.0.0.1:25478")
	l := &launch.Launcher{Dir: dir, Ternd: ternd}
	defer l.Stop()
	tt, err := l.StartTernd("ternd", soak.TerndConfig(listen, netip.MustParseAddr("127.0.98.1"), echo.Addr().Addr()), listen)
	if err != nil {
		t.Fatal(err)
	}
	cfg := soak.Config{
		Server: listen, TCPServer: listen, PID: tt.PID, MetricsURL: soak.MetricsURL(listen),
		Peer: echo.Addr(), PeerPackets: echo.Packets,
		Creds:    turnclient.Credentials{Username: soak.User, Password: soak.Pass},
		Duration: 10 * time.Second, Allocations: 100, PerIP: 50, Interval: 200 * time.Millisecond,
		QuotaRate: 10, FloodRate: 200, IdleConns: 300, ConnsPerIP: 150, KeepAlive: 3 * time.Second,
		SampleEvery: 2 * time.Second,
	}
	res, err := soak.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	res.WriteSummary(&sum)
	t.Log("\n" + sum.String())

	lg := res.Legit
	if lg.Allocated != cfg.Allocations || lg.Silent > 0 || lg.Received == 0 {
		t.Errorf("legitimate clients: %d of %d allocated, %d silent, %d echoes", lg.Allocated, cfg.Allocations, lg.Silent, lg.Received)
	}
	// Loss is not held to the run's per-client 1% here: 50 datagrams a client on a shared
	// machine make one lost datagram 2%. Overall, loopback loses next to nothing.
	if lg.Loss >= soak.MaxLoss {
		t.Errorf("legitimate loss %.2f%%, want below %.0f%%", 100*lg.Loss, 100*soak.MaxLoss)
	}
	if q := res.Quota; q.Held != 200 || q.Refused[486] == 0 {
		t.Errorf("quota attacker: %v; want 200 held (the default per-address quota), then 486", q)
	}
	answered := uint64(0)
	for _, n := range res.Flood.Answered {
		answered += n
	}
	if bound := uint64(10 + 2*res.Elapsed.Seconds() + 2); res.Flood.Sent < 1000 || answered > bound {
		t.Errorf("wrong-password flood: %d sent, %d answered; want at most %d answered", res.Flood.Sent, answered, bound)
	}
	if c := res.Conns; c.HeldMin != cfg.IdleConns || c.Closed != 0 {
		t.Errorf("idle connections: %+v; want all %d held", c, cfg.IdleConns)
	}
	if res.PeakRSS() == 0 {
		t.Error("no RSS sampled")
	}
}
