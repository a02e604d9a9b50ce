package bench_test

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/forwarder"
	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/pionserver"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// flowTargets starts ternd and coturn (when installed; CI must have it)
// listening on every transport, and an in-process pion/turn server and
// raw forwarder. Ports 27500-27899, relay addresses 127.0.96.10 and up.
func flowTargets(t *testing.T) []bench.Target {
	t.Helper()
	if runtime.GOOS != "linux" {
		testenv.SkipOrFail(t, "the harness reads /proc and batches with recvmmsg: Linux only, this is %s", runtime.GOOS)
	}
	dir := t.TempDir()
	l := &launch.Launcher{Dir: dir, Ternd: testenv.Ternd(t), BasePort: 27500, Threads: 2,
		RelayIP: netip.MustParseAddr("127.0.96.10"), Streams: true}
	t.Cleanup(l.Stop)
	var ts []bench.Target
	tt, err := l.Start("ternd")
	if err != nil {
		t.Fatal(err)
	}
	ts = append(ts, tt)
	if _, err := exec.LookPath("turnserver"); err == nil {
		tc, err := l.Start("coturn")
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tc)
	} else if testenv.InCI() {
		t.Fatal("coturn (turnserver) is not installed; CI must have it (apt-get install -y coturn)")
	} else {
		t.Log("coturn not installed: leaving it out (CI unset)")
	}
	cert, key, err := selfsigned.Write(filepath.Join(dir, "pion-cert"), "pion", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	at := func(p uint16) netip.AddrPort { return netip.AddrPortFrom(lo, p) }
	ps, err := pionserver.Start(pionserver.Config{Listen: at(27800), RelayIP: netip.MustParseAddr("127.0.96.20"),
		MinPort: 40000, MaxPort: 60000, Realm: launch.Realm, Username: launch.User, Password: launch.Pass,
		TCP: at(27800), TLS: at(27805), DTLS: at(27805), Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	// In process: the CPU read is the test's own, enough to show /proc works.
	ts = append(ts, bench.Target{Name: "pion", Kind: bench.KindTURN, Addr: at(27800), TCP: at(27800), TLS: at(27805),
		DTLS: at(27805), PID: os.Getpid(), Creds: turnclient.Credentials{Username: launch.User, Password: launch.Pass}})
	fwd, err := forwarder.Start(forwarder.Config{Listen: netip.AddrPortFrom(lo, 0), RelayIP: netip.MustParseAddr("127.0.96.21")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	return append(ts, bench.Target{Name: "forwarder", Kind: bench.KindRaw, Addr: fwd.Addr(), PID: os.Getpid()})
}

// checkFlows asserts that a result measured something real: packets
// delivered with sane loss, both CPU figures, the baseline subtracted, and
// round trips where the peer echoes.
func checkFlows(t *testing.T, x bench.FlowsResult, rtt bool) {
	t.Helper()
	t.Logf("%-9s %-40s sent %6d delivered %6d relayed %6d loss %5.2f%% server %6.2f µs/pkt machine %6.2f (net %6.2f) rtt p50 %5.0f p99 %6.0f µs",
		x.Target, x.FlowsStep, x.Sent, x.Delivered, x.Relayed, x.LossPct, x.CPUPerPacketUS, x.MachineUSPerPkt, x.NetMachineUSPerPkt, x.RTTP50US, x.RTTP99US)
	if x.Err != "" || x.Sent == 0 || x.Delivered == 0 || x.Relayed < x.Delivered {
		t.Errorf("%s %v: nothing real measured: error %q, sent %d, delivered %d, relayed %d", x.Target, x.FlowsStep, x.Err, x.Sent, x.Delivered, x.Relayed)
		return
	}
	// Loopback on a busy shared machine loses a little; a broken path loses all.
	if x.LossPct > 20 {
		t.Errorf("%s %v: loss %.1f%%", x.Target, x.FlowsStep, x.LossPct)
	}
	if !x.HasMachine || x.MachineCPU < 0 {
		t.Errorf("%s %v: no whole-machine CPU (%v)", x.Target, x.FlowsStep, x.MachineCPU)
	}
	if x.Target != bench.Direct.Name && (!x.HasCPU || !x.HasBaseline) {
		t.Errorf("%s %v: server CPU %v, baseline %v", x.Target, x.FlowsStep, x.HasCPU, x.HasBaseline)
	}
	if rtt && (x.RTTSamples == 0 || x.RTTP50US <= 0 || x.RTTP99US < x.RTTP50US) {
		t.Errorf("%s %v: no round trips: %d samples p50 %.0f p99 %.0f", x.Target, x.FlowsStep, x.RTTSamples, x.RTTP50US, x.RTTP99US)
	}
}

// TestFlowsSmoke runs every direction over every transport, interleaved,
// and a few burst steps, against every target able to serve them.
func TestFlowsSmoke(t *testing.T) {
	r := &bench.Runner{Targets: flowTargets(t)}
	var steps []bench.FlowsStep
	step := func(d bench.Direction, p turnclient.Proto, pc bench.Pacing) bench.FlowsStep {
		return bench.FlowsStep{Flows: 4, Rate: 2000, Size: 100, Direction: d, Pacing: pc, Transport: p, Duration: 300 * time.Millisecond}
	}
	for _, p := range []turnclient.Proto{turnclient.UDP, turnclient.TCP, turnclient.TLS, turnclient.DTLS} {
		for _, d := range []bench.Direction{bench.C2P, bench.P2C, bench.Both} {
			steps = append(steps, step(d, p, bench.Interleaved))
		}
	}
	steps = append(steps, step(bench.C2P, turnclient.UDP, bench.Burst), step(bench.P2C, turnclient.UDP, bench.Burst),
		step(bench.Both, turnclient.TLS, bench.Burst))
	got := map[string]int{}
	for _, x := range r.Flows(context.Background(), steps, true) {
		checkFlows(t, x, x.Direction == bench.Both)
		got[x.Target]++
	}
	// The forwarder serves the UDP steps only; everyone else every step.
	for _, tg := range append(r.Targets, bench.Direct) {
		want := len(steps)
		switch tg.Name {
		case "forwarder":
			want = 5
		case bench.Direct.Name:
			want = 6 // once per step apart from its transport: UDP's 5, and TLS's burst both
		}
		if got[tg.Name] != want {
			t.Errorf("%s: %d results, want %d", tg.Name, got[tg.Name], want)
		}
	}
}

// TestWebRTCSmoke runs the webrtc profile small over UDP and TLS.
func TestWebRTCSmoke(t *testing.T) {
	r := &bench.Runner{Targets: flowTargets(t)}
	steps := []bench.WebRTCStep{
		bench.NewWebRTCStep(50, 0.1, turnclient.UDP, time.Second, 4000),
		bench.NewWebRTCStep(50, 0.1, turnclient.TLS, time.Second, 4000),
	}
	if s := steps[0]; s.NominalPPS != 4*(50*50+5*500) || s.Scale != 4000/s.NominalPPS || s.UpstreamPPS != 1000 {
		t.Fatalf("step %+v: want nominal 20000 relayed/s, scaled to 1000 upstream", s)
	}
	for _, x := range r.WebRTC(context.Background(), steps, true) {
		checkFlows(t, x.FlowsResult, true)
		// Downstream is 3× upstream: the peer sent three for every one it got.
		if x.Err == "" && x.Delivered < 3*x.Sent/4*9/10 {
			t.Errorf("%s: delivered %d of %d sent: downstream missing", x.Target, x.Delivered, x.Sent)
		}
	}
}
