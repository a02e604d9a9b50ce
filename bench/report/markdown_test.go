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

// TestLastStart: the header names a range only when merged runs started
// in different minutes.
func TestLastStart(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 0, 55, 0, 0, time.UTC)
	for _, tc := range []struct {
		last time.Time
		want string
	}{
		{time.Time{}, ""},
		{t0.Add(30 * time.Second), ""},
		{t0.Add(6 * time.Hour), "2026-11-24 06:55 UTC"},
	} {
		if got := lastStart(bench.Meta{Start: t0, LastStart: tc.last}); got != tc.want {
			t.Errorf("lastStart(%v) = %q, want %q", tc.last, got, tc.want)
		}
	}
}
