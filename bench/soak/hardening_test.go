package soak_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/peer"
	"github.com/tern-gw/tern/bench/soak"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestSoakHardening is issue 22's hardening soak: against one ternd with its default
// limits (soak.HardenedConfig: TURN-UDP, -TCP, -TLS, -DTLS and a TURN-UDP listener with a
// wide cluster), 40 legitimate pion/turn clients relay a datagram every 50 ms each while
// the attacks of the items 1-6 and 8-10 run one after another, a few seconds each
// (the soak package's attack files say what each does and checks). It fails if any
// legitimate client loses 1% or more of its datagrams (each sends over 500, so that is 5 or
// more), if an attack's victim is locked out or its goal missed (AttackResult.Failures), or
// if ternd's RSS passes soak.MaxRSS, the default Dataplane's 512 MiB memory limit.
// TERN_SOAK_ATTACKS=spoof,rotate (say) runs only those; `ternbench soak -attacks all`
// runs the same for longer and larger.
func TestSoakHardening(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.SkipOrFail(t, "the soak reads /proc: Linux only, this is %s", runtime.GOOS)
	}
	attacks, err := soak.ParseAttacks("all")
	if env := os.Getenv("TERN_SOAK_ATTACKS"); env != "" {
		attacks, err = soak.ParseAttacks(env)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ternd := testenv.Ternd(t)
	cert, key, err := selfsigned.Write(filepath.Join(dir, "cert"), "soak", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	echo, err := peer.Start(netip.MustParseAddrPort("127.0.0.1:0"), true, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	// Ports and a relay address of their own, apart from TestSoakShort's, the bench's and the
	// examples'.
	listen := netip.MustParseAddrPort("127.0.0.1:25578")
	l := &launch.Launcher{Dir: dir, Ternd: ternd}
	defer l.Stop()
	tt, err := l.StartTernd("ternd", soak.HardenedConfig(listen, netip.MustParseAddr("127.0.98.2"), echo.Addr().Addr(), cert, key), listen)
	if err != nil {
		t.Fatal(err)
	}
	cfg := soak.Config{
		Server: listen, TCPServer: listen, PID: tt.PID, MetricsURL: soak.MetricsURL(listen),
		Peer: echo.Addr(), PeerPackets: echo.Packets,
		Creds:    turnclient.Credentials{Username: soak.User, Password: soak.Pass},
		Duration: 30 * time.Second, Allocations: 40, PerIP: 20, Interval: 50 * time.Millisecond,
		ConnsPerIP: 400, SampleEvery: time.Second,
		Attacks: attacks, AttackTime: 3 * time.Second,
		SpoofRate: 200, AdminConns: 1000, HalfFrames: 2000, HalfFrameBody: 60000, DTLSRate: 500,
		BudgetAddrs: 3, BudgetChannels: 16, RotateAddrs: 250, RotateGuesses: 13, ReflectRequests: 200,
	}
	soak.Hardened(&cfg, listen)
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	res, err := soak.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	res.WriteSummary(&sum)
	t.Log("\n" + sum.String())
	for _, f := range res.Failures() {
		t.Error(f)
	}
	if lg := res.Legit; lg.Allocated == cfg.Allocations && lg.MinClientSent < 500 {
		t.Errorf("a legitimate client sent only %d datagrams: too few for a 1%% loss bound per client", lg.MinClientSent)
	}
	if res.PeakRSS() == 0 {
		t.Error("no RSS sampled")
	}
}
