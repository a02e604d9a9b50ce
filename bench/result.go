package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Report is what one ternbench run produced: the setup it ran on and the
// results of whichever tests it ran. Reports of several runs merge.
type Report struct {
	Meta       Meta               `json:"meta"`
	Flows      []FlowsResult      `json:"flows,omitempty"`
	WebRTC     []WebRTCResult     `json:"webrtc,omitempty"`
	Throughput []ThroughputResult `json:"throughput,omitempty"`
	Latency    []LatencyResult    `json:"latency,omitempty"`
	Allocs     []AllocsResult     `json:"allocs,omitempty"`
	Memory     []MemoryResult     `json:"memory,omitempty"`
	Idle       []IdleResult       `json:"idle,omitempty"`
	HTTPS443   []HTTPS443Result   `json:"https443,omitempty"`
}

// Meta describes the run.
type Meta struct {
	Start     time.Time `json:"start"`
	Command   []string  `json:"commands"`
	Kernel    string    `json:"kernel"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	// LoadAvg is the machine's 1-, 5- and 15-minute load averages when the
	// run started (/proc/loadavg): on a shared machine, how busy it was.
	LoadAvg string   `json:"load_avg,omitempty"`
	Targets []Target `json:"targets"`
	// Quick marks a smoke run whose figures are not comparable.
	Quick bool `json:"quick,omitempty"`
	// LastStart, in reports merged by ReadReports, is the latest Start of
	// the runs merged (Start is the earliest); zero in a single run's.
	LastStart time.Time `json:"last_start,omitzero"`
}

// NewMeta describes this machine and command line.
func NewMeta(targets []Target, quick bool) Meta {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	var load string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return Meta{
		LoadAvg:   load,
		Start:     time.Now().UTC().Truncate(time.Second),
		Command:   []string{strings.Join(append([]string{"ternbench"}, os.Args[1:]...), " ")},
		Kernel:    strings.TrimSpace(string(kernel)),
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Targets:   targets,
		Quick:     quick,
	}
}

// WriteJSON writes r to path, indented.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadReports reads and merges JSON reports: results are concatenated,
// commands collected, targets united by name, Start (with its LoadAvg)
// is the earliest and LastStart the latest.
func ReadReports(paths ...string) (*Report, error) {
	var out Report
	seen := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if out.Meta.Start.IsZero() || (!r.Meta.Start.IsZero() && r.Meta.Start.Before(out.Meta.Start)) {
			out.Meta.Start, out.Meta.LoadAvg = r.Meta.Start, r.Meta.LoadAvg
		}
		if r.Meta.Start.After(out.Meta.LastStart) {
			out.Meta.LastStart = r.Meta.Start
		}
		out.Meta.Kernel, out.Meta.CPUs, out.Meta.GoVersion = r.Meta.Kernel, r.Meta.CPUs, r.Meta.GoVersion
		out.Meta.Quick = out.Meta.Quick || r.Meta.Quick
		out.Meta.Command = append(out.Meta.Command, r.Meta.Command...)
		for _, t := range r.Meta.Targets {
			if !seen[t.Name] {
				seen[t.Name] = true
				out.Meta.Targets = append(out.Meta.Targets, t)
			}
		}
		out.Flows = append(out.Flows, r.Flows...)
		out.WebRTC = append(out.WebRTC, r.WebRTC...)
		out.Throughput = append(out.Throughput, r.Throughput...)
		out.Latency = append(out.Latency, r.Latency...)
		out.Allocs = append(out.Allocs, r.Allocs...)
		out.Memory = append(out.Memory, r.Memory...)
		out.Idle = append(out.Idle, r.Idle...)
		out.HTTPS443 = append(out.HTTPS443, r.HTTPS443...)
	}
	return &out, nil
}
