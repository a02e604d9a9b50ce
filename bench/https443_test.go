package bench_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/selfsigned"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestShared443 runs what `ternbench https443` and `ternbench flows -launch
// ternd,ternd-443 -transport tls` measure, small: a real ternd whose TURN-TLS
// port is shared with an HTTP/2 upstream splices HTTPS to it (every response
// over HTTP/2, so the ALPN went through untouched) and serves TURN-TLS on the
// same port, both directions. Ports 27900-28099, relay 127.0.96.30.
func TestShared443(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.SkipOrFail(t, "the harness reads /proc: Linux only, this is %s", runtime.GOOS)
	}
	dir := t.TempDir()
	cert, key, err := selfsigned.Write(filepath.Join(dir, "upstream"), bench.HTTPSName, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	up, err := bench.StartHTTPSUpstream(netip.MustParseAddrPort("127.0.0.1:0"), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	l := &launch.Launcher{Dir: dir, Ternd: testenv.Ternd(t), BasePort: 27300, Threads: 2,
		RelayIP: netip.MustParseAddr("127.0.96.24"), Streams: true, TLSUpstream: up.Addr().String()}
	t.Cleanup(l.Stop)
	// ternd-443 is the seventh server (Names, then Extra): BasePort + 600.
	tg, err := l.Start("ternd-443")
	if err != nil {
		t.Fatal(err)
	}
	load := bench.HTTPSLoad{Conns: 10, Download: 8 << 20}
	for _, p := range []struct {
		name string
		addr netip.AddrPort
		pid  int
	}{{"direct", up.Addr(), 0}, {tg.Name, tg.TLS, tg.PID}} {
		res, err := bench.MeasureHTTPS(context.Background(), p.name, p.addr, p.pid, load)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d connections, %d failed, p50 %.0f µs, p99 %.0f µs, %.0f/s; %d bytes at %.0f MB/s; server %.0f µs/conn, %.2f ms/MB",
			res.Path, res.Conns, res.Errors, res.ConnP50, res.ConnP99, res.ConnsPerSec, res.DownloadBytes, res.DownloadMBps,
			res.ServerCPUPerConn, res.ServerCPUPerMB)
		if res.Errors != 0 || res.ConnP50 <= 0 || res.ConnP99 < res.ConnP50 || res.DownloadMBps <= 0 {
			t.Errorf("%s: %+v", p.name, res)
		}
	}
	r := &bench.Runner{Targets: []bench.Target{tg}}
	var steps []bench.FlowsStep
	for _, d := range []bench.Direction{bench.C2P, bench.P2C, bench.Both} {
		steps = append(steps, bench.FlowsStep{Flows: 4, Rate: 2000, Size: 100, Direction: d, Pacing: bench.Interleaved,
			Transport: turnclient.TLS, Duration: 300 * time.Millisecond})
	}
	n := 0
	for _, x := range r.Flows(context.Background(), steps, true) {
		checkFlows(t, x, x.Direction == bench.Both)
		if x.Target == tg.Name {
			n++
		}
	}
	if n != len(steps) {
		t.Errorf("%d results, want %d", n, len(steps))
	}
}
