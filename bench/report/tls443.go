package report

import (
	"fmt"
	"slices"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/stats"
)

// Shared443 is the target whose TURN-TLS port is shared with HTTPS.
const Shared443 = "ternd-443"

// t443Row is one TURN-TLS step of ternd beside ternd-443: server CPU per
// relayed packet, loss and round-trip p99, medians over repeats.
type t443Row struct {
	Step, Ternd, Shared, Ratio, LossTernd, LossShared, RTTTernd, RTTShared string
}

// h443Row is one HTTPS path: medians over repeats.
type h443Row struct {
	Path, Conns, P50, P99, PerSec, CPUConn, MBps, CPUMB string
}

// tls443Data fills the "TURN-TLS and HTTPS on one port" section from a
// flows run of ternd beside ternd-443 over TLS and an https443 run.
func tls443Data(d map[string]any, r *bench.Report) {
	keys, cells := flowCells(r.Flows)
	var trs []t443Row
	for _, k := range keys {
		a, okA := cells[k][Subject]
		b, okB := cells[k][Shared443]
		if !okA || !okB {
			continue
		}
		trs = append(trs, t443Row{
			Step:  fmt.Sprintf("%s %s %s N=%d %dB %dpps", k.Direction, k.Transport, k.Pacing, k.Flows, k.Size, k.Rate),
			Ternd: num(a.CPU, 2), Shared: num(b.CPU, 2), Ratio: ratio(b.CPU, a.CPU),
			LossTernd: num(a.Loss, 2), LossShared: num(b.Loss, 2), RTTTernd: num(a.RTT99, 0), RTTShared: num(b.RTT99, 0),
		})
	}
	type acc struct{ conns, p50, p99, ps, cpuc, mbps, cpumb []float64 }
	accs := map[string]*acc{}
	var paths []string
	for _, x := range r.HTTPS443 {
		a := accs[x.Path]
		if a == nil {
			a = &acc{}
			accs[x.Path] = a
			paths = append(paths, x.Path)
		}
		a.conns = append(a.conns, float64(x.Conns-x.Errors))
		a.p50 = append(a.p50, x.ConnP50)
		a.p99 = append(a.p99, x.ConnP99)
		a.ps = append(a.ps, x.ConnsPerSec)
		a.mbps = append(a.mbps, x.DownloadMBps)
		if x.Path != "direct" {
			a.cpuc = append(a.cpuc, x.ServerCPUPerConn)
			a.cpumb = append(a.cpumb, x.ServerCPUPerMB)
		}
	}
	// direct first: it is what the others are read against.
	slices.SortStableFunc(paths, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == "direct":
			return -1
		case b == "direct":
			return 1
		}
		return 0
	})
	var hrs []h443Row
	for _, p := range paths {
		a := accs[p]
		row := h443Row{Path: p, Conns: num(stats.Median(a.conns), 0), P50: num(stats.Median(a.p50), 0),
			P99: num(stats.Median(a.p99), 0), PerSec: num(stats.Median(a.ps), 0), MBps: num(stats.Median(a.mbps), 0),
			CPUConn: "–", CPUMB: "–"}
		if len(a.cpuc) > 0 {
			row.CPUConn, row.CPUMB = num(stats.Median(a.cpuc), 0), num(stats.Median(a.cpumb), 2)
		}
		hrs = append(hrs, row)
	}
	hr, fr := 0, 0
	for _, x := range r.HTTPS443 {
		hr = max(hr, x.Repeat+1)
	}
	for _, x := range r.Flows {
		fr = max(fr, x.Repeat+1)
	}
	d["TLS443TURN"] = trs
	d["TLS443HTTPS"] = hrs
	d["TLS443Start"] = r.Meta.Start.Format("2006-01-02 15:04 UTC")
	d["TLS443Load"] = r.Meta.LoadAvg
	d["TLS443FlowRepeats"], d["TLS443HTTPSRepeats"] = fr, hr
}
