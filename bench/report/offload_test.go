package report

import (
	"strings"
	"testing"

	"github.com/tern-gw/tern/bench"
)

func olResult(target, topo, pin string, rate int, net, cpu, loss, pps float64, kernel uint64) bench.FlowsResult {
	return bench.FlowsResult{Target: target, Topology: topo, ServerCPUs: pin,
		FlowsStep: bench.FlowsStep{Flows: 64, Rate: rate, Size: 100, Direction: bench.C2P, Pacing: bench.Burst},
		Relayed:   1000, KernelRelayed: kernel, HasKernel: kernel > 0, HasCPU: true, CPUPerPacketUS: cpu,
		HasBaseline: target != bench.Direct.Name, NetMachineUSPerPkt: net, MachineUSPerPkt: net + 5, LossPct: loss, DeliveredPPS: pps}
}

func TestOffloadGoals(t *testing.T) {
	r := &bench.Report{Flows: []bench.FlowsResult{
		olResult(Offloaded, "veth", "", 20000, 1, 0.1, 0, 20000, 1000),
		olResult(Forwarder, "veth", "", 20000, 5, 3, 0, 20000, 0),
		olResult(Subject, "veth", "", 20000, 6, 4, 0, 20000, 0),
		olResult(bench.Direct.Name, "veth", "", 20000, 0, 0, 0, 20000, 0),
		// pinned: ternd-offload clean up to 300k, ternd up to 100k (200k lossy)
		olResult(Offloaded, "veth", "1", 100000, 0, 0, 0, 100000, 1000),
		olResult(Offloaded, "veth", "1", 300000, 0, 0, 0.5, 300000, 1000),
		olResult(Subject, "veth", "1", 100000, 0, 0, 0, 100000, 0),
		olResult(Subject, "veth", "1", 200000, 0, 0, 5, 150000, 0),
		olResult(bench.Direct.Name, "veth", "1", 300000, 0, 0, 0, 310000, 0),
		// not a namespace run: left out
		olResult(Offloaded, "", "", 20000, 100, 100, 0, 20000, 0),
	}}
	keys, cells := offloadCells(offloadResults(r))
	g := offloadGoals(keys, cells)
	if len(g) != 2 {
		t.Fatalf("%d goals, want 2: %+v", len(g), g)
	}
	if g[0].Status != met || g[0].Ratio != "0.20×" {
		t.Errorf("CPU goal: %+v, want met at 0.20×", g[0])
	}
	if g[1].Status != met || g[1].Ratio != "3.00×" || !strings.Contains(g[1].Note, "310000") {
		t.Errorf("pps goal: %+v, want met at 3.00× with the generator's 310000", g[1])
	}
	rows := offloadRows(keys, cells, true)
	if len(rows) != 1 || rows[0].Kernel != "100.0" || rows[0].VsForwarder != "0.20×" || rows[0].Cells[0] != "1.00" {
		t.Errorf("rows: %+v", rows)
	}
	pps := ppsRows(keys, cells)
	if len(pps) != 3 || pps[0].PPS != "300000" || pps[1].PPS != "100000" {
		t.Errorf("pps rows: %+v", pps)
	}
	md, err := Markdown(&bench.Report{}, Options{Offload: r, OffloadCommands: "make bench-offload"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Offload (issue 15)", "make bench-offload\n```", "| veth | 1 | ternd-offload | 300000 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

// TestOffloadStepGSO: a step the clients sent with UDP GSO says so.
func TestOffloadStepGSO(t *testing.T) {
	for _, gso := range []bool{false, true} {
		r := olResult(Offloaded, "veth", "1", 600000, 0, 0, 0, 600000, 1000)
		r.GSO = gso
		keys, _ := offloadResults(&bench.Report{Flows: []bench.FlowsResult{r}})
		want := "c2p, burst, N=64, 100 B, 600000 pps"
		if gso {
			want += ", GSO"
		}
		if got := keys[0].step(); got != want {
			t.Errorf("GSO %v: step %q, want %q", gso, got, want)
		}
	}
}
