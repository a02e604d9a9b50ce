package report

import (
	"bytes"
	_ "embed"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/tern-gw/tern/bench"
)

//go:embed template.md
var templateText string

var tmpl = template.Must(template.New("BENCHMARKS.md").Parse(templateText))

// Options are the parts of BENCHMARKS.md that do not come from results.
type Options struct {
	// PlotDir is how the markdown refers to the plot directory.
	PlotDir string
	// Plots are the plot file names (in PlotDir), from Plots.
	Plots []string
	// Commands is the shell text shown under "Reproduce".
	Commands string
	// Profile is the hand-written explanation of missed goals (profiles).
	Profile string
	// Metrics, when set, is a throughput run of ternd beside
	// ternd-nometrics (issue 12: metrics on and off), reported in a section
	// of its own and in the goals.
	Metrics *bench.Report
	// Offload, when set, is the runs in network namespaces (ternbench
	// -netns, issue 15) with ternd-offload, reported in a section of its
	// own and in the goals.
	Offload *bench.Report
	// OffloadCommands is the shell text that reproduces Offload.
	OffloadCommands string
	// OffloadProfile is the hand-written profile behind the offload goals
	// (bench/PROFILE-offload.md).
	OffloadProfile string
	// Cluster is the hand-written section of figures from the real-node
	// cluster's tests (bench/CLUSTER.md), shown as it is.
	Cluster string
	// TLS443, when set, is a flows run of ternd beside ternd-443 over TLS
	// and an https443 run (issue 23: TURN-TLS and HTTPS on one port),
	// reported in a section of their own.
	TLS443 *bench.Report
}

const defaultCommands = "make bench            # or: hack/bench.sh\nhack/bench.sh --quick  # a one-minute smoke\n"

const defaultProfile = "_No profile recorded yet. For each missed goal, record here what `go tool pprof` " +
	"(ternd serves no pprof endpoint: use `perf record -g -p PID` during a step, or a CPU profile " +
	"from a test benchmark) says about where the time goes. This text lives in bench/PROFILE.md._"

// Markdown renders BENCHMARKS.md from the merged results r.
func Markdown(r *bench.Report, o Options) ([]byte, error) {
	d := map[string]any{
		"Quick": r.Meta.Quick, "Start": r.Meta.Start.Format("2006-01-02 15:04 UTC"), "Kernel": r.Meta.Kernel,
		"LastStart": lastStart(r.Meta),
		"CPUs":      r.Meta.CPUs, "GoVersion": r.Meta.GoVersion, "Targets": r.Meta.Targets,
		"Goals": goals(r), "PlotDir": o.PlotDir, "Load": r.Meta.LoadAvg,
	}
	cmds := o.Commands
	if cmds == "" {
		cmds = defaultCommands
	}
	if !strings.HasSuffix(cmds, "\n") {
		cmds += "\n"
	}
	d["Commands"] = cmds
	d["Profile"] = strings.TrimSpace(o.Profile)
	if d["Profile"] == "" {
		d["Profile"] = defaultProfile
	}
	pick := func(prefix string) []string {
		var out []string
		for _, p := range o.Plots {
			if strings.HasPrefix(p, prefix) {
				out = append(out, p)
			}
		}
		return out
	}
	d["ThroughputPlots"], d["LatencyPlots"] = pick("throughput"), pick("latency")
	d["AllocsPlots"], d["MemoryPlots"] = pick("allocs"), pick("memory")

	keys, cells := throughput(r.Throughput)
	type tpRow struct{ Step, Target, Delivered, Loss, CPU, VsCoturn, VsPion, VsForwarder string }
	var tps []tpRow
	for _, k := range keys {
		sub, hasSub := cells[k][Subject]
		for _, t := range targetOrder(r, cells[k]) {
			c := cells[k][t]
			row := tpRow{Step: k.String(), Target: t, Delivered: num(c.Delivered, 0), Loss: num(c.Loss, 2), CPU: num(c.CPU, 2)}
			if c.Err != "" {
				row.Delivered = "error: " + oneLine(c.Err)
			}
			if t == Subject && hasSub {
				row.VsCoturn = ratio(sub.CPU, cellCPU(cells[k], Coturn))
				row.VsPion = ratio(sub.CPU, cellCPU(cells[k], Pion))
				row.VsForwarder = ratio(sub.CPU, cellCPU(cells[k], Forwarder))
			}
			tps = append(tps, row)
		}
	}
	d["Throughput"] = tps

	// Issue 14: WebRTC-shaped load leads the page.
	d["FlowsCPU"] = flowRows(r.Flows, bench.Interleaved, false)
	d["FlowsMachine"] = flowRows(r.Flows, bench.Interleaved, true)
	d["FlowsBurst"] = flowRows(r.Flows, bench.Burst, false)
	d["WebRTC"] = webrtcRows(r.WebRTC)
	d["Goals"] = append(d["Goals"].([]Goal), flowGoals(r)...)
	d["Goals"] = append(d["Goals"].([]Goal), streamGoals(r)...)

	if o.Offload != nil {
		offloadData(d, o.Offload)
		d["OffloadCommands"] = strings.TrimRight(o.OffloadCommands, "\n") + "\n"
		d["OffloadProfile"] = strings.TrimSpace(o.OffloadProfile)
	}

	d["Cluster"] = strings.TrimSpace(o.Cluster)
	if o.TLS443 != nil {
		tls443Data(d, o.TLS443)
	}

	// Metrics on and off (issue 12): ternd beside itself without metrics,
	// from a run of their own.
	if m := o.Metrics; m != nil {
		type moRow struct{ Step, OnCPU, OffCPU, Ratio, OnDelivered, OffDelivered string }
		var mos []moRow
		mkeys, mcells := throughput(m.Throughput)
		for _, k := range mkeys {
			on, okOn := mcells[k][Subject]
			off, okOff := mcells[k][NoMetrics]
			if !okOn || !okOff {
				continue
			}
			mos = append(mos, moRow{Step: k.String(), OnCPU: num(on.CPU, 2), OffCPU: num(off.CPU, 2), Ratio: ratio(on.CPU, off.CPU),
				OnDelivered: num(on.Delivered, 0), OffDelivered: num(off.Delivered, 0)})
		}
		g := metricsGoal(m)
		d["Goals"] = append(d["Goals"].([]Goal), g)
		d["MetricsOnOff"] = mos
		d["MetricsGoal"] = g
		d["MetricsStart"] = m.Meta.Start.Format("2006-01-02 15:04 UTC")
		d["MetricsLoad"] = m.Meta.LoadAvg
		repeats := 0
		for _, r := range m.Throughput {
			repeats = max(repeats, r.Repeat+1)
		}
		d["MetricsRepeats"] = repeats
	}

	names, lat := latency(r.Latency)
	type latRow struct{ Target, P50, P90, P99, P999, Loss, VsCoturn50, VsCoturn99 string }
	var lrs []latRow
	for _, t := range names {
		c := lat[t]
		row := latRow{Target: t, P50: num(c.P50, 0), P90: num(c.P90, 0), P99: num(c.P99, 0), P999: num(c.P999, 0), Loss: num(c.Loss, 2)}
		if cc, ok := lat[Coturn]; ok {
			row.VsCoturn50, row.VsCoturn99 = ratio(c.P50, cc.P50), ratio(c.P99, cc.P99)
		}
		lrs = append(lrs, row)
	}
	d["Latency"] = lrs

	anames, al := allocs(r.Allocs)
	type alRow struct{ Target, PerSec, CPU, Ratio string }
	var ars []alRow
	for _, t := range anames {
		row := alRow{Target: t, PerSec: num(al[t].PerSec, 0), CPU: num(al[t].CPU, 1)}
		if s, ok := al[Subject]; ok {
			row.Ratio = ratio(s.PerSec, al[t].PerSec)
		}
		ars = append(ars, row)
	}
	d["Allocs"] = ars

	type memRow struct {
		K, Held      int
		Target, Note string
		PerAlloc     string
	}
	var mrs []memRow
	for _, m := range memory(r.Memory) {
		row := memRow{K: m.K, Held: m.Held, Target: m.Target, PerAlloc: num(m.PerAlloc, 0)}
		if m.Held < m.K && m.Err != "" {
			row.Note = "held fewer: " + oneLine(m.Err)
		}
		mrs = append(mrs, row)
	}
	d["Memory"] = mrs

	type idleRow struct{ Target, RSS, Anon, File, Threads, Note string }
	var irs []idleRow
	mib := func(b int64) string { return num(float64(b)/(1<<20), 1) }
	for _, m := range r.Idle {
		row := idleRow{Target: m.Target, RSS: mib(m.RSS), Anon: mib(m.Anon), File: mib(m.File), Threads: strconv.Itoa(m.Threads)}
		if m.Err != "" {
			row = idleRow{Target: m.Target, RSS: "–", Anon: "–", File: "–", Threads: "–", Note: oneLine(m.Err)}
		}
		irs = append(irs, row)
	}
	d["Idle"] = irs

	var b bytes.Buffer
	if err := tmpl.Execute(&b, d); err != nil {
		return nil, err
	}
	return collapseBlankLines(b.Bytes()), nil
}

func cellCPU(m map[string]tpCell, t string) float64 {
	if c, ok := m[t]; ok {
		return c.CPU
	}
	return math.NaN()
}

// targetOrder lists the targets present in m in the run's target order.
func targetOrder(r *bench.Report, m map[string]tpCell) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range r.Meta.Targets {
		if _, ok := m[t.Name]; ok && !seen[t.Name] {
			out = append(out, t.Name)
			seen[t.Name] = true
		}
	}
	var rest []string
	for t := range m {
		if !seen[t] {
			rest = append(rest, t)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "/")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// collapseBlankLines keeps the template readable without leaving runs of
// blank lines where optional sections were empty.
func collapseBlankLines(b []byte) []byte {
	for bytes.Contains(b, []byte("\n\n\n")) {
		b = bytes.ReplaceAll(b, []byte("\n\n\n"), []byte("\n\n"))
	}
	return b
}

// lastStart returns when the latest of the merged runs started, "" when
// they all started in the same minute as the first.
func lastStart(m bench.Meta) string {
	if m.LastStart.IsZero() || m.LastStart.Sub(m.Start) < time.Minute {
		return ""
	}
	return m.LastStart.Format("2006-01-02 15:04 UTC")
}
