package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tern-gw/tern/bench"
)

// Offloaded is the target with the eBPF ChannelData fast path (issue 15).
const Offloaded = "ternd-offload"

// offloadTargets are the columns of the offload tables, in order.
var offloadTargets = []string{Offloaded, Subject, Forwarder, Coturn, Pion}

// olKey is one offload measurement step: where it ran and what it sent.
type olKey struct {
	Topology, Pin, Load string
	Dir                 bench.Direction
	Pacing              bench.Pacing
	WebRTC              bool
}

// olCell is one target's medians over repeats at a step.
type olCell struct {
	CPU, Net, Loss, PPS, Kernel float64
	Err                         string
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// offloadResults is every flows and webrtc result of r that ran in a
// namespace topology, with its step key.
func offloadResults(r *bench.Report) ([]olKey, []bench.FlowsResult) {
	var ks []olKey
	var rs []bench.FlowsResult
	for _, f := range r.Flows {
		if f.Topology == "" {
			continue
		}
		load := fmt.Sprintf("N=%d, %d B, %d pps", f.Flows, f.Size, f.Rate)
		if f.GSO {
			load += ", GSO"
		}
		ks = append(ks, olKey{Topology: f.Topology, Pin: f.ServerCPUs, Dir: f.Direction, Pacing: f.Pacing, Load: load})
		rs = append(rs, f)
	}
	for _, w := range r.WebRTC {
		if w.Topology == "" {
			continue
		}
		ks = append(ks, olKey{Topology: w.Topology, Pin: w.ServerCPUs, WebRTC: true,
			Load: fmt.Sprintf("webrtc K=%d, %.0f relayed pps offered", w.WebRTC.Allocations, w.WebRTC.UpstreamPPS*(1+bench.DownFactor))})
		rs = append(rs, w.FlowsResult)
	}
	return ks, rs
}

// offloadCells groups results by step and target into medians.
func offloadCells(ks []olKey, rs []bench.FlowsResult) ([]olKey, map[olKey]map[string]olCell) {
	type acc struct {
		cpu, net, loss, pps, kern []float64
		err                       string
	}
	accs := map[olKey]map[string]*acc{}
	var order []olKey
	for i, r := range rs {
		k := ks[i]
		if accs[k] == nil {
			accs[k] = map[string]*acc{}
			order = append(order, k)
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
		a.pps = append(a.pps, r.DeliveredPPS)
		if r.HasCPU {
			a.cpu = append(a.cpu, r.CPUPerPacketUS)
		}
		if r.HasBaseline {
			a.net = append(a.net, r.NetMachineUSPerPkt)
		} else if r.Target == bench.Direct.Name {
			a.net = append(a.net, r.MachineUSPerPkt)
		}
		if r.HasKernel && r.Relayed > 0 {
			a.kern = append(a.kern, 100*float64(r.KernelRelayed)/float64(r.Relayed))
		}
	}
	cells := map[olKey]map[string]olCell{}
	for k, m := range accs {
		cells[k] = map[string]olCell{}
		for t, a := range m {
			cells[k][t] = olCell{CPU: median(a.cpu), Net: median(a.net), Loss: median(a.loss), PPS: median(a.pps),
				Kernel: median(a.kern), Err: a.err}
		}
	}
	return order, cells
}

// olRow is one row of the offload CPU tables: a step, and per target in
// offloadTargets order one figure.
type olRow struct {
	Topology, Step, Baseline string
	Cells                    []string
	VsForwarder, VsTernd     string
	Kernel, Loss             string
}

func (k olKey) step() string {
	if k.WebRTC {
		return k.Load
	}
	return fmt.Sprintf("%s, %s, %s", k.Dir, k.Pacing, k.Load)
}

// offloadRows is the CPU table: net whole-machine µs per relayed packet
// (machine true) or the server process's (false), for unpinned steps.
func offloadRows(keys []olKey, cells map[olKey]map[string]olCell, machine bool) []olRow {
	var out []olRow
	for _, k := range keys {
		if k.Pin != "" {
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
		row := olRow{Topology: k.Topology, Step: k.step(), Baseline: num(m[bench.Direct.Name].Net, 2)}
		if _, ok := m[bench.Direct.Name]; !ok {
			row.Baseline = "–"
		}
		var loss []string
		for _, t := range offloadTargets {
			c, ok := m[t]
			switch {
			case !ok:
				row.Cells = append(row.Cells, "–")
			case c.Err != "":
				row.Cells = append(row.Cells, "error: "+oneLine(c.Err))
			default:
				row.Cells = append(row.Cells, num(fig(t), 2))
			}
			if ok && c.Err == "" {
				loss = append(loss, num(c.Loss, 2))
			} else {
				loss = append(loss, "–")
			}
		}
		row.Loss = strings.Join(loss, " · ")
		row.VsForwarder = posRatio(fig(Offloaded), fig(Forwarder))
		row.VsTernd = posRatio(fig(Offloaded), fig(Subject))
		row.Kernel = num(m[Offloaded].Kernel, 1)
		out = append(out, row)
	}
	return out
}

// ppsRow is a pinned run's ceiling: per target the highest median
// delivered packets/s at a step whose median loss stayed under 1%.
type ppsRow struct {
	Topology, Pin, Target, Step, PPS, Loss, Kernel string
}

// maxClean is target's best clean step among the pinned keys of topology
// and pin: its delivered pps, the step and its loss.
func maxClean(keys []olKey, cells map[olKey]map[string]olCell, topology, pin, target string) (float64, olKey, olCell) {
	best, bk, bc := math.NaN(), olKey{}, olCell{}
	for _, k := range keys {
		if k.Topology != topology || k.Pin != pin {
			continue
		}
		c, ok := cells[k][target]
		if !ok || c.Err != "" || math.IsNaN(c.Loss) || c.Loss >= 1 {
			continue
		}
		if math.IsNaN(best) || c.PPS > best {
			best, bk, bc = c.PPS, k, c
		}
	}
	return best, bk, bc
}

func pinned(keys []olKey) [][2]string {
	var out [][2]string
	for _, k := range keys {
		p := [2]string{k.Topology, k.Pin}
		if k.Pin != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func ppsRows(keys []olKey, cells map[olKey]map[string]olCell) []ppsRow {
	var out []ppsRow
	for _, p := range pinned(keys) {
		for _, t := range []string{Offloaded, Subject, bench.Direct.Name} {
			v, k, c := maxClean(keys, cells, p[0], p[1], t)
			row := ppsRow{Topology: p[0], Pin: p[1], Target: t, PPS: num(v, 0), Step: "none under 1% loss", Loss: "–", Kernel: "–"}
			if !math.IsNaN(v) {
				row.Step, row.Loss, row.Kernel = k.step(), num(c.Loss, 2), num(c.Kernel, 1)
			}
			out = append(out, row)
		}
	}
	return out
}

// offloadGoals are issue 15's goals: net whole-machine CPU per relayed
// packet of ternd-offload ≤ 0.25× the forwarder's (pooled: the sums of
// the per-step medians over every unpinned step both completed), and its
// clean delivered packets/s ≥ 3× ternd's with the servers on one core.
func offloadGoals(keys []olKey, cells map[olKey]map[string]olCell) []Goal {
	var out []Goal
	var so, sf, po, pf float64
	n := 0
	for _, k := range keys {
		if k.Pin != "" {
			continue
		}
		o, f := cells[k][Offloaded], cells[k][Forwarder]
		if o.Err != "" || f.Err != "" || math.IsNaN(o.Net) || math.IsNaN(f.Net) {
			continue
		}
		so, sf, n = so+o.Net, sf+f.Net, n+1
		if !math.IsNaN(o.CPU) && !math.IsNaN(f.CPU) {
			po, pf = po+o.CPU, pf+f.CPU
		}
	}
	g := Goal{Text: "offload: net whole-machine CPU per relayed ChannelData packet ≤ 0.25× the raw forwarder's (issue 15)", Status: notMeasured}
	if n > 0 {
		g.Tern, g.Peer = fmt.Sprintf("%.2f µs", so/float64(n)), fmt.Sprintf("%.2f µs", sf/float64(n))
		g.Ratio = posRatio(so, sf)
		g.Status = judge(so, sf, func(a, b float64) bool { return b > 0 && a <= 0.25*b })
		if sf <= 0 {
			g.Status = notMeasured
		}
		g.Note = fmt.Sprintf("mean over %d steps (flows and webrtc, loopback and veth), per-step medians; peer = forwarder; "+
			"server-process CPU alone (no softirq): %s", n, posRatio(po, pf))
	}
	out = append(out, g)
	for _, p := range pinned(keys) {
		o, _, _ := maxClean(keys, cells, p[0], p[1], Offloaded)
		t, _, _ := maxClean(keys, cells, p[0], p[1], Subject)
		d, _, _ := maxClean(keys, cells, p[0], p[1], bench.Direct.Name)
		g := Goal{Text: fmt.Sprintf("offload: delivered packets/s at < 1%% loss ≥ 3× the socket path's, servers on CPU %s (%s)", p[1], p[0]),
			Tern: num(o, 0), Peer: num(t, 0), Ratio: ratio(o, t), Status: judge(o, t, func(a, b float64) bool { return a >= 3*b })}
		g.Note = fmt.Sprintf("peer = ternd; the generator alone (direct) delivered %s pps", num(d, 0))
		if !math.IsNaN(d) && !math.IsNaN(o) && o >= 0.9*d {
			g.Note += ": ternd-offload reached the generator's ceiling, so its own is higher than shown"
		}
		out = append(out, g)
	}
	return out
}

// offloadData fills the template's offload section from o (the
// namespace runs' results).
func offloadData(d map[string]any, o *bench.Report) {
	keys, cells := offloadCells(offloadResults(o))
	if len(keys) == 0 {
		return
	}
	d["OffloadMachine"] = offloadRows(keys, cells, true)
	d["OffloadServer"] = offloadRows(keys, cells, false)
	d["OffloadPPS"] = ppsRows(keys, cells)
	g := offloadGoals(keys, cells)
	d["OffloadGoals"] = g
	d["Goals"] = append(d["Goals"].([]Goal), g...)
	d["OffloadStart"] = o.Meta.Start.Format("2006-01-02 15:04 UTC")
	d["OffloadLoad"] = o.Meta.LoadAvg
	var desc string
	for _, t := range o.Meta.Targets {
		if t.Name == Offloaded {
			desc = t.Description
		}
	}
	d["OffloadTarget"] = desc
}
