package report

import (
	"fmt"
	"math"

	"github.com/tern-gw/tern/bench"
)

// Goal is one of the goals, evaluated on one run.
type Goal struct {
	Text   string // the goal as the issue states it
	Tern   string // Tern's figure
	Peer   string // the peer's figure
	Ratio  string // Tern / peer
	Status string // met, missed, or "not measured"
	Note   string
}

const (
	met         = "met"
	missed      = "**missed**"
	notMeasured = "not measured"
)

// goals evaluates the goals (issue 3) on r.
func goals(r *bench.Report) []Goal {
	var gs []Goal
	cmpCPU := func(peer string, bound float64) {
		g := Goal{Text: fmt.Sprintf("server CPU per relayed packet ≤ %.1f× %s's", bound, peer)}
		a, b, n := pooledCPU(r.Throughput, Subject, peer)
		g.Tern, g.Peer = num(a, 2)+" µs", num(b, 2)+" µs"
		g.Ratio = ratio(a, b)
		g.Note = fmt.Sprintf("pooled over %d step×repeat pairs", n)
		g.Status = judge(a, b, func(x, y float64) bool { return x <= bound*y })
		gs = append(gs, g)
	}
	cmpCPU(Forwarder, 1.1)
	cmpCPU(Coturn, 1.0)
	cmpCPU(Pion, 0.7)

	keys, cells := throughput(r.Throughput)
	for _, n := range []int{8, 64} {
		g := Goal{Text: fmt.Sprintf("delivered packets/s at < 1%% loss ≥ coturn's, N=%d clients", n)}
		a, b := maxCleanRate(keys, cells, Subject, n), maxCleanRate(keys, cells, Coturn, n)
		g.Tern, g.Peer, g.Ratio = num(a, 0), num(b, 0), ratio(a, b)
		g.Status = judge(a, b, func(x, y float64) bool { return x >= y })
		g.Note = "highest offered rate delivered with < 1% loss"
		if top := topRate(keys, n); a == top && b == top {
			g.Note += "; both kept up with the highest step offered, so neither ceiling was reached"
		}
		gs = append(gs, g)
	}

	for _, k := range []int{10000, 60000} {
		g := Goal{Text: fmt.Sprintf("resident memory per allocation ≤ 1 KiB at %dk allocations", k/1000), Peer: "–", Ratio: "–"}
		g.Status, g.Tern = notMeasured, "–"
		for _, m := range memory(r.Memory) {
			if m.Target != Subject || m.K != k {
				continue
			}
			g.Tern = num(m.PerAlloc, 0) + " B"
			switch {
			case m.Held < k:
				g.Note = fmt.Sprintf("held %d of %d: %s", m.Held, k, m.Err)
			case m.PerAlloc <= 1024:
				g.Status = met
			default:
				g.Status = missed
			}
			if m.Held == k {
				g.Note = ""
			}
		}
		for _, m := range memory(r.Memory) {
			if m.Target == Coturn && m.K == k {
				g.Peer = num(m.PerAlloc, 0) + " B (coturn)"
			}
		}
		gs = append(gs, g)
	}

	names, lat := latency(r.Latency)
	_ = names
	for _, q := range []struct {
		name string
		get  func(latCell) float64
	}{{"p50", func(c latCell) float64 { return c.P50 }}, {"p99", func(c latCell) float64 { return c.P99 }}} {
		g := Goal{Text: fmt.Sprintf("round-trip %s at %s ≤ coturn's", q.name, latencyRate(r))}
		a, b := math.NaN(), math.NaN()
		if c, ok := lat[Subject]; ok {
			a = q.get(c)
		}
		if c, ok := lat[Coturn]; ok {
			b = q.get(c)
		}
		g.Tern, g.Peer, g.Ratio = num(a, 0)+" µs", num(b, 0)+" µs", ratio(a, b)
		g.Status = judge(a, b, func(x, y float64) bool { return x <= y })
		gs = append(gs, g)
	}

	_, al := allocs(r.Allocs)
	g := Goal{Text: "Allocates per second ≥ 2× coturn's"}
	a, b := math.NaN(), math.NaN()
	if c, ok := al[Subject]; ok {
		a = c.PerSec
	}
	if c, ok := al[Coturn]; ok {
		b = c.PerSec
	}
	g.Tern, g.Peer, g.Ratio = num(a, 0), num(b, 0), ratio(a, b)
	g.Status = judge(a, b, func(x, y float64) bool { return x >= 2*y })
	gs = append(gs, g)
	return gs
}

// metricsCostBound is how much more CPU per relayed packet ternd may spend
// with its metrics on than off and still count as "the same" (issue 12):
// within what one run on a shared machine resolves.
const metricsCostBound = 1.05

// metricsGoal compares ternd with and without its metrics (issue 12) in
// r, a throughput run of the two side by side.
func metricsGoal(r *bench.Report) Goal {
	g := Goal{Text: fmt.Sprintf("relay path with metrics on costs the same as off (CPU per relayed packet ≤ %.2f× ternd-nometrics's)", metricsCostBound)}
	a, b, n := pooledCPU(r.Throughput, Subject, NoMetrics)
	g.Tern, g.Peer = num(a, 2)+" µs", num(b, 2)+" µs"
	g.Ratio = ratio(a, b)
	g.Note = fmt.Sprintf("pooled over %d step×repeat pairs", n)
	g.Status = judge(a, b, func(x, y float64) bool { return x <= metricsCostBound*y })
	return g
}

func judge(a, b float64, ok func(a, b float64) bool) string {
	if math.IsNaN(a) || math.IsNaN(b) {
		return notMeasured
	}
	if ok(a, b) {
		return met
	}
	return missed
}

func latencyRate(r *bench.Report) string {
	if len(r.Latency) == 0 {
		return "500 packets/s"
	}
	return fmt.Sprintf("%d packets/s", r.Latency[0].Rate)
}
