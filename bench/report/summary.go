// Package report turns ternbench results into BENCHMARKS.md and plots:
// medians over repeats, ratios of Tern against its peers measured in the
// same run, and the goals marked met, missed or not measured.
package report

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/stats"
)

// Names of the targets the ratios and goals compare. The launcher uses them.
const (
	Subject   = "ternd"
	Coturn    = "coturn"
	Pion      = "pion"
	Forwarder = "forwarder"
	// NoMetrics is ternd with metrics off: no /metrics endpoint and
	// --packet-counters=false.
	NoMetrics = "ternd-nometrics"
)

// tpKey identifies a throughput step independent of the target.
type tpKey struct {
	Clients, Rate, Size int
	Mode                bench.Mode
	Echo                bool
}

func keyOf(r bench.ThroughputResult) tpKey {
	return tpKey{r.Clients, r.Rate, r.Size, r.Mode, r.Echo}
}

func (k tpKey) String() string {
	return bench.ThroughputStep{Clients: k.Clients, Rate: k.Rate, Size: k.Size, Mode: k.Mode, Echo: k.Echo}.String()
}

// tpCell is the median over repeats of one target at one step.
type tpCell struct {
	Delivered, Loss, CPU float64 // packets/s, %, µs per relayed packet (NaN: not measured)
	Err                  string
}

// throughput groups results by step and target, medians over repeats.
func throughput(rs []bench.ThroughputResult) (keys []tpKey, cells map[tpKey]map[string]tpCell) {
	type acc struct {
		d, l, c []float64
		err     string
	}
	accs := map[tpKey]map[string]*acc{}
	for _, r := range rs {
		k := keyOf(r)
		if accs[k] == nil {
			accs[k] = map[string]*acc{}
			keys = append(keys, k)
		}
		a := accs[k][r.Target]
		if a == nil {
			a = &acc{}
			accs[k][r.Target] = a
		}
		if r.Err != "" {
			a.err = r.Err
			continue
		}
		a.d = append(a.d, r.DeliveredPPS)
		a.l = append(a.l, r.LossPct)
		if r.HasCPU {
			a.c = append(a.c, r.CPUPerPacketUS)
		}
	}
	slices.SortFunc(keys, func(a, b tpKey) int {
		if a.Clients != b.Clients {
			return a.Clients - b.Clients
		}
		if a.Size != b.Size {
			return a.Size - b.Size
		}
		return a.Rate - b.Rate
	})
	cells = map[tpKey]map[string]tpCell{}
	for k, m := range accs {
		cells[k] = map[string]tpCell{}
		for t, a := range m {
			c := tpCell{Delivered: stats.Median(a.d), Loss: stats.Median(a.l), CPU: stats.Median(a.c), Err: a.err}
			cells[k][t] = c
		}
	}
	return keys, cells
}

// pooledCPU is server CPU per relayed packet of target, µs, over the
// steps (and repeats) that both target and other completed with a CPU
// reading: total CPU / total relayed, so long steps weigh what they cost.
func pooledCPU(rs []bench.ThroughputResult, target, other string) (float64, float64, int) {
	return pooled(rs, target, other, func(r bench.ThroughputResult) (pooledKey[tpKey], pooledRun, bool) {
		ok := r.Err == "" && r.HasCPU && r.Relayed > 0
		return pooledKey[tpKey]{keyOf(r), r.Repeat}, pooledRun{r.Target, r.ServerCPU, r.Relayed}, ok
	})
}

// pooledKey is one step of one repeat.
type pooledKey[K comparable] struct {
	step   K
	repeat int
}

// pooledRun is what pooled needs of one target's result.
type pooledRun struct {
	target  string
	cpu     time.Duration
	relayed uint64
}

// pooled sums the server CPU and relayed packets of target and of other
// over the steps and repeats in which both have a result that of accepts,
// and returns each one's µs per relayed packet and the number of such
// pairs (NaN, NaN and 0 when there is none).
func pooled[R any, K comparable](rs []R, target, other string, of func(R) (pooledKey[K], pooledRun, bool)) (float64, float64, int) {
	have := map[pooledKey[K]]map[string]pooledRun{}
	for _, r := range rs {
		k, run, ok := of(r)
		if !ok || (run.target != target && run.target != other) {
			continue
		}
		if have[k] == nil {
			have[k] = map[string]pooledRun{}
		}
		have[k][run.target] = run
	}
	var cpu, rel [2]float64
	n := 0
	for _, m := range have {
		a, okA := m[target]
		b, okB := m[other]
		if !okA || !okB {
			continue
		}
		n++
		cpu[0] += float64(a.cpu.Microseconds())
		rel[0] += float64(a.relayed)
		cpu[1] += float64(b.cpu.Microseconds())
		rel[1] += float64(b.relayed)
	}
	if n == 0 {
		return math.NaN(), math.NaN(), 0
	}
	return cpu[0] / rel[0], cpu[1] / rel[1], n
}

// maxCleanRate is the highest offered rate, packets/s, of the steps with N
// clients at which target's median loss stayed under 1%. Offered rather
// than delivered: two servers that both kept up differ in delivered rate
// only by noise.
// topRate is the highest offered rate of the steps with N clients.
func topRate(keys []tpKey, clients int) float64 {
	top := math.NaN()
	for _, k := range keys {
		if r := float64(k.Rate); k.Clients == clients && (math.IsNaN(top) || r > top) {
			top = r
		}
	}
	return top
}

func maxCleanRate(keys []tpKey, cells map[tpKey]map[string]tpCell, target string, clients int) float64 {
	best := math.NaN()
	if !slices.ContainsFunc(keys, func(k tpKey) bool { return k.Clients == clients }) {
		return best
	}
	for _, k := range keys {
		c, ok := cells[k][target]
		if k.Clients != clients || !ok || c.Err != "" || !(c.Loss < 1) {
			continue
		}
		if r := float64(k.Rate); math.IsNaN(best) || r > best {
			best = r
		}
	}
	return best
}

// latency is the median over repeats of each target's percentiles.
type latCell struct{ P50, P90, P99, P999, Loss float64 }

func latency(rs []bench.LatencyResult) (names []string, cells map[string]latCell) {
	acc := map[string][][5]float64{}
	for _, r := range rs {
		if r.Err != "" || r.Received == 0 {
			continue
		}
		if acc[r.Target] == nil {
			names = append(names, r.Target)
		}
		acc[r.Target] = append(acc[r.Target], [5]float64{r.P50US, r.P90US, r.P99US, r.P999US, r.LossPct})
	}
	cells = map[string]latCell{}
	for t, xs := range acc {
		col := func(i int) float64 {
			v := make([]float64, len(xs))
			for j := range xs {
				v[j] = xs[j][i]
			}
			return stats.Median(v)
		}
		cells[t] = latCell{col(0), col(1), col(2), col(3), col(4)}
	}
	return names, cells
}

type allocCell struct{ PerSec, CPU float64 }

func allocs(rs []bench.AllocsResult) (names []string, cells map[string]allocCell) {
	ps, cpu := map[string][]float64{}, map[string][]float64{}
	for _, r := range rs {
		if r.Done == 0 {
			continue
		}
		if ps[r.Target] == nil {
			names = append(names, r.Target)
		}
		ps[r.Target] = append(ps[r.Target], r.PerSec)
		if r.HasCPU {
			cpu[r.Target] = append(cpu[r.Target], r.CPUPerAllocUS)
		}
	}
	cells = map[string]allocCell{}
	for t := range ps {
		cells[t] = allocCell{stats.Median(ps[t]), stats.Median(cpu[t])}
	}
	return names, cells
}

type memCell struct {
	K, Held  int
	PerAlloc float64 // bytes
	Err      string
}

func memory(rs []bench.MemoryResult) []struct {
	Target string
	memCell
} {
	type key struct {
		t string
		k int
	}
	var order []key
	acc := map[key][]bench.MemoryResult{}
	for _, r := range rs {
		k := key{r.Target, r.Allocations}
		if acc[k] == nil {
			order = append(order, k)
		}
		acc[k] = append(acc[k], r)
	}
	slices.SortStableFunc(order, func(a, b key) int { return a.k - b.k })
	var out []struct {
		Target string
		memCell
	}
	for _, k := range order {
		var per []float64
		c := memCell{K: k.k}
		for _, r := range acc[k] {
			c.Held = max(c.Held, r.Held)
			if r.Held > 0 {
				per = append(per, r.PerAllocBytes)
			}
			if r.Err != "" {
				c.Err = r.Err
			}
		}
		c.PerAlloc = stats.Median(per)
		out = append(out, struct {
			Target string
			memCell
		}{k.t, c})
	}
	return out
}

// ratio formats a/b as "0.93×", or "–" when either is missing.
func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// num formats v with the given precision, or "–" for NaN.
func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}
