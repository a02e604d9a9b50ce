package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/stats"
	"github.com/tern-gw/tern/bench/turnclient"
)

// flKey identifies a flows (or webrtc) step apart from its target.
type flKey struct {
	Pacing    bench.Pacing
	Direction bench.Direction
	Transport turnclient.Proto
	Flows     int
	Rate      int
	Size      int
}

func flKeyOf(r bench.FlowsResult) flKey {
	return flKey{r.Pacing, r.Direction, r.Transport, r.Flows, r.Rate, r.Size}
}

// flCell is one target at one step: medians over repeats.
type flCell struct {
	CPU, Net, Loss, RTT50, RTT99, Delivered float64 // NaN: not measured
	Busy                                    float64 // the machine's busy %, median
	Err                                     string
}

var directionOrder = []bench.Direction{bench.C2P, bench.P2C, bench.Both, "webrtc"}
var transportOrder = []turnclient.Proto{turnclient.UDP, turnclient.TCP, turnclient.TLS, turnclient.DTLS}

// flowCells groups results by step and target, medians over repeats, keys
// ordered by direction, transport, flows, rate and size.
func flowCells(rs []bench.FlowsResult) ([]flKey, map[flKey]map[string]flCell) {
	type acc struct {
		cpu, net, loss, r50, r99, del, busy []float64
		err                                 string
	}
	accs := map[flKey]map[string]*acc{}
	var keys []flKey
	for _, r := range rs {
		k := flKeyOf(r)
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
		a.loss = append(a.loss, r.LossPct)
		a.del = append(a.del, r.DeliveredPPS)
		a.busy = append(a.busy, r.MachineBusyPct)
		if r.HasCPU {
			a.cpu = append(a.cpu, r.CPUPerPacketUS)
		}
		if r.HasBaseline {
			a.net = append(a.net, r.NetMachineUSPerPkt)
		}
		if r.RTTSamples > 0 {
			a.r50 = append(a.r50, r.RTTP50US)
			a.r99 = append(a.r99, r.RTTP99US)
		}
	}
	slices.SortFunc(keys, func(a, b flKey) int {
		if c := slices.Index(directionOrder, a.Direction) - slices.Index(directionOrder, b.Direction); c != 0 {
			return c
		}
		if c := slices.Index(transportOrder, a.Transport) - slices.Index(transportOrder, b.Transport); c != 0 {
			return c
		}
		if a.Flows != b.Flows {
			return a.Flows - b.Flows
		}
		if a.Rate != b.Rate {
			return a.Rate - b.Rate
		}
		return a.Size - b.Size
	})
	cells := map[flKey]map[string]flCell{}
	for k, m := range accs {
		cells[k] = map[string]flCell{}
		for t, a := range m {
			cells[k][t] = flCell{CPU: stats.Median(a.cpu), Net: stats.Median(a.net), Loss: stats.Median(a.loss),
				RTT50: stats.Median(a.r50), RTT99: stats.Median(a.r99), Delivered: stats.Median(a.del),
				Busy: stats.Median(a.busy), Err: a.err}
		}
	}
	return keys, cells
}

// flRow is one line of a flows table: a step, and per server its figure.
type flRow struct {
	Direction, Transport, Load               string
	Ternd, Coturn, Pion, Forwarder, Baseline string
	VsCoturn, VsPion, Loss, RTT              string
}

// flowRows renders the steps of one pacing; machine picks the whole-machine
// figure (net of the baseline) instead of the servers' own CPU.
func flowRows(rs []bench.FlowsResult, pacing bench.Pacing, machine bool) []flRow {
	keys, cells := flowCells(rs)
	bases := baselines(rs)
	var out []flRow
	for _, k := range keys {
		if k.Pacing != pacing {
			continue
		}
		m := cells[k]
		fig := func(t string) float64 {
			c, ok := m[t]
			if !ok || c.Err != "" {
				return math.NaN()
			}
			if machine {
				return c.Net
			}
			return c.CPU
		}
		cell := func(t string) string {
			if c, ok := m[t]; ok && c.Err != "" {
				return "error: " + oneLine(c.Err)
			}
			c, ok := m[t]
			if !ok {
				return "–"
			}
			if machine && c.Busy >= saturated {
				return num(fig(t), 2) + " †"
			}
			return num(fig(t), 2)
		}
		row := flRow{Direction: string(k.Direction), Transport: strings.ToUpper(string(k.Transport)),
			Load:  fmt.Sprintf("%d flows, %d pps, %d B", k.Flows, k.Rate, k.Size),
			Ternd: cell(Subject), Coturn: cell(Coturn), Pion: cell(Pion), Forwarder: cell(Forwarder),
			VsCoturn: posRatio(fig(Subject), fig(Coturn)), VsPion: posRatio(fig(Subject), fig(Pion))}
		bk := k
		bk.Transport = ""
		row.Baseline = "–"
		if b, ok := bases[bk]; ok {
			row.Baseline = num(b, 2)
		}
		var loss, rtt []string
		for _, t := range []string{Subject, Coturn, Pion} {
			c, ok := m[t]
			if !ok || c.Err != "" {
				continue
			}
			loss = append(loss, num(c.Loss, 2))
			if !math.IsNaN(c.RTT50) {
				rtt = append(rtt, num(c.RTT50, 0)+"/"+num(c.RTT99, 0))
			}
		}
		row.Loss, row.RTT = strings.Join(loss, " · "), strings.Join(rtt, " · ")
		out = append(out, row)
	}
	return out
}

// saturated is the machine's busy % from which its whole-machine figures
// are marked: they measure the machine's capacity, not the server.
const saturated = 90

// baselines is the direct target's whole-machine µs per relayed packet,
// medians per step apart from its transport (the baseline is UDP always).
func baselines(rs []bench.FlowsResult) map[flKey]float64 {
	acc := map[flKey][]float64{}
	for _, r := range rs {
		if r.Target == bench.Direct.Name && r.Err == "" && r.HasMachine {
			k := flKeyOf(r)
			k.Transport = ""
			acc[k] = append(acc[k], r.MachineUSPerPkt)
		}
	}
	out := map[flKey]float64{}
	for k, v := range acc {
		out[k] = stats.Median(v)
	}
	return out
}

// wrRow is one line of the webrtc table.
type wrRow struct {
	K, Transport, Offered, Target                  string
	CPU, Net, Loss, RTT50, RTT99, VsCoturn, VsPion string
}

func webrtcRows(rs []bench.WebRTCResult) []wrRow {
	fr := make([]bench.FlowsResult, len(rs))
	offered := map[flKey]bench.WebRTCStep{}
	for i, r := range rs {
		fr[i] = r.FlowsResult
		offered[flKeyOf(r.FlowsResult)] = r.WebRTC
	}
	keys, cells := flowCells(fr)
	var out []wrRow
	for _, k := range keys {
		m, st := cells[k], offered[k]
		names := []string{Subject, Coturn, Pion, Forwarder, bench.Direct.Name}
		for _, t := range names {
			c, ok := m[t]
			if !ok {
				continue
			}
			row := wrRow{K: fmt.Sprint(st.Allocations), Transport: strings.ToUpper(string(k.Transport)), Target: t,
				Offered: fmt.Sprintf("%.0f relayed pps (×%.3g of %.0f)", st.UpstreamPPS*(1+bench.DownFactor), st.Scale, st.NominalPPS),
				CPU:     num(c.CPU, 2), Net: num(c.Net, 2), Loss: num(c.Loss, 3), RTT50: num(c.RTT50, 0), RTT99: num(c.RTT99, 0)}
			if t == bench.Direct.Name {
				row.CPU, row.Net = "–", "(baseline)"
			}
			if c.Err != "" {
				row.CPU = "error: " + oneLine(c.Err)
			}
			if t == Subject {
				cs := func(o string) float64 {
					if x, ok := m[o]; ok && x.Err == "" {
						return x.CPU
					}
					return math.NaN()
				}
				row.VsCoturn, row.VsPion = ratio(c.CPU, cs(Coturn)), ratio(c.CPU, cs(Pion))
			}
			out = append(out, row)
		}
	}
	return out
}

// pooledFlows is server CPU per relayed packet of target and other, µs,
// pooled over the results match keeps where both completed with a CPU
// reading in the same repeat.
func pooledFlows(rs []bench.FlowsResult, target, other string, match func(bench.FlowsResult) bool) (float64, float64, int) {
	return pooled(rs, target, other, func(r bench.FlowsResult) (pooledKey[flKey], pooledRun, bool) {
		ok := r.Err == "" && r.HasCPU && r.Relayed > 0 && match(r)
		return pooledKey[flKey]{flKeyOf(r), r.Repeat}, pooledRun{r.Target, r.ServerCPU, r.Relayed}, ok
	})
}

// flowGoals evaluates issue 14's goals on the flows and webrtc results
// present (a combination not measured is left out).
func flowGoals(r *bench.Report) []Goal {
	var gs []Goal
	for _, p := range transportOrder {
		bound := 0.6
		if p == turnclient.DTLS {
			bound = 0.7
		}
		for _, d := range directionOrder[:3] {
			a, b, n := pooledFlows(r.Flows, Subject, Coturn, func(x bench.FlowsResult) bool {
				return x.Pacing == bench.Interleaved && x.Direction == d && x.Transport == p
			})
			if n == 0 {
				continue
			}
			g := Goal{Text: fmt.Sprintf("server CPU per relayed packet ≤ %.1f× coturn's, %s, %s, interleaved", bound, d, strings.ToUpper(string(p))),
				Tern: num(a, 2) + " µs", Peer: num(b, 2) + " µs", Ratio: ratio(a, b),
				Status: judge(a, b, func(x, y float64) bool { return x <= bound*y }),
				Note:   fmt.Sprintf("pooled over %d step×repeat pairs", n)}
			gs = append(gs, g)
		}
	}
	fr := make([]bench.FlowsResult, 0, len(r.WebRTC))
	for _, w := range r.WebRTC {
		if w.WebRTC.Allocations == 1000 && w.Transport == turnclient.UDP {
			fr = append(fr, w.FlowsResult)
		}
	}
	if len(fr) == 0 {
		return gs
	}
	a, b, n := pooledFlows(fr, Subject, Coturn, func(bench.FlowsResult) bool { return true })
	gs = append(gs, Goal{Text: "webrtc profile, 1,000 allocations: server CPU per packet ≤ 0.6× coturn's",
		Tern: num(a, 2) + " µs", Peer: num(b, 2) + " µs", Ratio: ratio(a, b),
		Status: judge(a, b, func(x, y float64) bool { return x <= 0.6*y }), Note: fmt.Sprintf("pooled over %d repeats", n)})
	_, cells := flowCells(fr)
	for _, m := range cells {
		t, c := m[Subject], m[Coturn]
		lossOK := func(x, _ float64) bool { return x < 0.1 }
		gs = append(gs, Goal{Text: "webrtc profile, 1,000 allocations: loss < 0.1%", Tern: num(t.Loss, 3) + " %",
			Peer: num(c.Loss, 3) + " %", Ratio: "–", Status: judge(t.Loss, 0, lossOK), Note: "median over repeats"})
		gs = append(gs, Goal{Text: "webrtc profile, 1,000 allocations: round-trip p99 ≤ coturn's", Tern: num(t.RTT99, 0) + " µs",
			Peer: num(c.RTT99, 0) + " µs", Ratio: ratio(t.RTT99, c.RTT99),
			Status: judge(t.RTT99, c.RTT99, func(x, y float64) bool { return x <= y }), Note: "median over repeats"})
	}
	return gs
}

// streamGoals evaluates issue 23's goals on the flows results present:
// every TCP, TLS and DTLS interleaved row at most 0.8x coturn's server CPU
// per relayed packet, with 0% loss and a round-trip p99 (rows with an
// echo) no worse than coturn's, and the burst TLS rows at most 1.0x.
func streamGoals(r *bench.Report) []Goal {
	var gs []Goal
	keys, cells := flowCells(r.Flows)
	for _, pc := range []bench.Pacing{bench.Interleaved, bench.Burst} {
		bound := 0.8
		if pc == bench.Burst {
			bound = 1.0
		}
		for _, p := range transportOrder {
			if p == turnclient.UDP || (pc == bench.Burst && p != turnclient.TLS) {
				continue
			}
			for _, d := range directionOrder[:3] {
				a, b, n := pooledFlows(r.Flows, Subject, Coturn, func(x bench.FlowsResult) bool {
					return x.Pacing == pc && x.Direction == d && x.Transport == p
				})
				if n == 0 {
					continue
				}
				where := fmt.Sprintf("%s, %s, %s", d, strings.ToUpper(string(p)), pc)
				gs = append(gs, Goal{Text: fmt.Sprintf("issue 23: server CPU per relayed packet ≤ %.1f× coturn's, %s", bound, where),
					Tern: num(a, 2) + " µs", Peer: num(b, 2) + " µs", Ratio: ratio(a, b),
					Status: judge(a, b, func(x, y float64) bool { return x <= bound*y }),
					Note:   fmt.Sprintf("pooled over %d step×repeat pairs", n)})
				for _, k := range keys {
					if k.Pacing != pc || k.Direction != d || k.Transport != p {
						continue
					}
					t, c := cells[k][Subject], cells[k][Coturn]
					gs = append(gs, Goal{Text: "issue 23: loss 0%, " + where, Tern: num(t.Loss, 2) + " %",
						Peer: num(c.Loss, 2) + " %", Ratio: "–",
						Status: judge(t.Loss, 0, func(x, _ float64) bool { return x == 0 }), Note: "median over repeats"})
					if !math.IsNaN(t.RTT99) && !math.IsNaN(c.RTT99) {
						gs = append(gs, Goal{Text: "issue 23: round-trip p99 ≤ coturn's, " + where, Tern: num(t.RTT99, 0) + " µs",
							Peer: num(c.RTT99, 0) + " µs", Ratio: ratio(t.RTT99, c.RTT99),
							Status: judge(t.RTT99, c.RTT99, func(x, y float64) bool { return x <= y }), Note: "median over repeats"})
					}
				}
			}
		}
	}
	return gs
}

// posRatio is ratio for figures that may come out at or below zero (a
// whole-machine figure minus its baseline, on a noisy machine): no ratio
// of those means anything, so it is "–".
func posRatio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return ratio(a, b)
}
