package report

import (
	"math"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench"
)

func TestJudge(t *testing.T) {
	le := func(a, b float64) bool { return a <= b }
	for _, tc := range []struct {
		a, b float64
		want string
	}{
		{1, 2, met},
		{3, 2, missed},
		{math.NaN(), 2, notMeasured},
		{1, math.NaN(), notMeasured},
	} {
		if got := judge(tc.a, tc.b, le); got != tc.want {
			t.Errorf("judge(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

func tp(target string, rate, rep int, delivered, loss float64, cpu time.Duration, relayed uint64) bench.ThroughputResult {
	return bench.ThroughputResult{Target: target, Repeat: rep,
		ThroughputStep: bench.ThroughputStep{Clients: 8, Rate: rate, Size: 100, Mode: bench.ModeChannel},
		DeliveredPPS:   delivered, LossPct: loss, ServerCPU: cpu, Relayed: relayed, HasCPU: true,
		CPUPerPacketUS: float64(cpu.Microseconds()) / float64(relayed)}
}

func TestGoalsFromResults(t *testing.T) {
	r := &bench.Report{
		Throughput: []bench.ThroughputResult{
			// ternd: 5 µs/pkt; coturn: 8 µs/pkt; pion 10; forwarder 4.
			tp(Subject, 20000, 0, 20000, 0, 500*time.Millisecond, 100000),
			tp(Coturn, 20000, 0, 20000, 0, 800*time.Millisecond, 100000),
			tp(Pion, 20000, 0, 20000, 0, time.Second, 100000),
			tp(Forwarder, 20000, 0, 20000, 0, 400*time.Millisecond, 100000),
			// At 100k ternd loses 5%, coturn 0.5%: coturn's clean rate is higher.
			tp(Subject, 100000, 0, 95000, 5, 2*time.Second, 400000),
			tp(Coturn, 100000, 0, 99500, 0.5, 3*time.Second, 400000),
		},
		Allocs: []bench.AllocsResult{
			{Target: Subject, Done: 100, PerSec: 3000},
			{Target: Coturn, Done: 100, PerSec: 1000},
		},
		Memory: []bench.MemoryResult{
			{Target: Subject, MemoryStep: bench.MemoryStep{Allocations: 10000}, Held: 10000, PerAllocBytes: 900},
			{Target: Subject, MemoryStep: bench.MemoryStep{Allocations: 60000}, Held: 19000, PerAllocBytes: 900, Err: "too many open files"},
		},
	}
	want := map[string]string{
		"server CPU per relayed packet ≤ 1.1× forwarder's":          missed,      // 5 vs 4 µs at the one step both ran: 1.25×
		"server CPU per relayed packet ≤ 1.0× coturn's":             met,         // pooled 4.4 vs 7.6 µs
		"server CPU per relayed packet ≤ 0.7× pion's":               met,         // 5/10
		"delivered packets/s at < 1% loss ≥ coturn's, N=8 clients":  missed,      // 20000 vs 99500
		"delivered packets/s at < 1% loss ≥ coturn's, N=64 clients": notMeasured, // no N=64 steps
		"resident memory per allocation ≤ 1 KiB at 10k allocations": met,
		"resident memory per allocation ≤ 1 KiB at 60k allocations": notMeasured,
		"round-trip p50 at 500 packets/s ≤ coturn's":                notMeasured,
		"Allocates per second ≥ 2× coturn's":                        met,
		"round-trip p99 at 500 packets/s ≤ coturn's":                notMeasured,
	}
	for _, g := range goals(r) {
		w, ok := want[g.Text]
		if !ok {
			t.Errorf("unexpected goal %q", g.Text)
			continue
		}
		if g.Status != w {
			t.Errorf("%s: %s (ternd %s, peer %s), want %s", g.Text, g.Status, g.Tern, g.Peer, w)
		}
	}
}

func TestMetricsGoal(t *testing.T) {
	for _, tc := range []struct {
		off  time.Duration // ternd-nometrics' CPU for 100000 packets; ternd's is 500 ms
		want string
	}{
		{490 * time.Millisecond, met},    // on ÷ off 1.02
		{450 * time.Millisecond, missed}, // 1.11
		{0, notMeasured},                 // not run
	} {
		r := &bench.Report{Throughput: []bench.ThroughputResult{tp(Subject, 20000, 0, 20000, 0, 500*time.Millisecond, 100000)}}
		if tc.off > 0 {
			r.Throughput = append(r.Throughput, tp(NoMetrics, 20000, 0, 20000, 0, tc.off, 100000))
		}
		if g := metricsGoal(r); g.Status != tc.want {
			t.Errorf("off %v: %s (%s vs %s), want %s", tc.off, g.Status, g.Tern, g.Peer, tc.want)
		}
	}
}
