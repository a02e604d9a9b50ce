package report

import (
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench"
)

func TestMarkdown(t *testing.T) {
	r := &bench.Report{
		Meta: bench.Meta{Quick: true, Targets: []bench.Target{{Name: Subject}, {Name: Coturn}}},
		Throughput: []bench.ThroughputResult{
			tp(Subject, 20000, 0, 20000, 0, 500*time.Millisecond, 100000),
			tp(Coturn, 20000, 0, 20000, 0, 800*time.Millisecond, 100000),
		},
		Latency: []bench.LatencyResult{
			{Target: Subject, LatencyStep: bench.LatencyStep{Rate: 500}, Received: 10, P50US: 100, P99US: 300},
			{Target: Coturn, LatencyStep: bench.LatencyStep{Rate: 500}, Received: 10, P50US: 90, P99US: 200},
		},
		Idle: []bench.IdleResult{
			{Target: Subject, RSS: 18 << 20, Anon: 3 << 20, File: 15 << 20, Threads: 11},
			{Target: Coturn, Err: "no server PID: RSS cannot be read"},
		},
	}
	b, err := Markdown(r, Options{PlotDir: "bench/results", Plots: []string{"throughput-cpu-x.png", "latency.png"}})
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"Smoke run", "## Goals", "## Throughput", "| N=8 100B channel sink 20000pps | ternd | 20000 | 0.00 | 5.00 | 0.62× |",
		"![throughput-cpu-x.png](bench/results/throughput-cpu-x.png)", "## Round-trip latency",
		"| round-trip p50 at 500 packets/s ≤ coturn's | 100 µs | 90 µs | 1.11× | **missed** |", "No profile recorded yet",
		"## Idle memory", "| ternd | 18.0 | 3.0 | 15.0 | 11 |  |", "| coturn | – | – | – | – | no server PID: RSS cannot be read |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "## Allocation rate") || strings.Contains(md, "\n\n\n") {
		t.Error("empty sections or blank runs left in")
	}
}
