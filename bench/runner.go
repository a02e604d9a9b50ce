package bench

import (
	"context"
	"io"

	"github.com/schollz/progressbar/v3"
)

// Runner measures steps against targets, interleaved: for each step and
// each repeat, every target is measured once, in an order that rotates with
// the repeat, so slow drift of the shared machine (other tenants, thermal
// state) lands on all targets alike rather than on whichever ran last.
type Runner struct {
	Targets []Target
	// Repeats per step and target; default 1.
	Repeats int
	// Progress, when non-nil, receives a progress bar (typically stderr).
	Progress io.Writer
}

// each calls measure for every (step, repeat, target) in interleaved
// order and collects the results.
func each[S stringer, R any](ctx context.Context, r *Runner, what string, steps []S, measure func(Target, S, int) R) []R {
	reps := max(r.Repeats, 1)
	var bar *progressbar.ProgressBar
	if r.Progress != nil {
		bar = progressbar.NewOptions(len(steps)*reps*len(r.Targets),
			progressbar.OptionSetWriter(r.Progress),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish())
		defer bar.Finish()
	}
	var out []R
	for _, s := range steps {
		for rep := 0; rep < reps; rep++ {
			for j := range r.Targets {
				if ctx.Err() != nil {
					return out
				}
				t := r.Targets[(j+rep)%len(r.Targets)]
				if bar != nil {
					bar.Describe(what + " " + s.String() + " " + t.Name)
				}
				out = append(out, measure(t, s, rep))
				if bar != nil {
					_ = bar.Add(1)
				}
			}
		}
	}
	return out
}

// stringer is fmt.Stringer: every step describes itself on the progress bar.
type stringer interface{ String() string }

// Throughput measures every step against every target.
func (r *Runner) Throughput(ctx context.Context, steps []ThroughputStep, peers Peers) []ThroughputResult {
	return each(ctx, r, "throughput", steps, func(t Target, s ThroughputStep, rep int) ThroughputResult {
		res := MeasureThroughput(ctx, t, s, peers)
		res.Repeat = rep
		return res
	})
}

// Latency measures every step against every target.
func (r *Runner) Latency(ctx context.Context, steps []LatencyStep, peers Peers) []LatencyResult {
	return each(ctx, r, "latency", steps, func(t Target, s LatencyStep, rep int) LatencyResult {
		res := MeasureLatency(ctx, t, s, peers)
		res.Repeat = rep
		return res
	})
}

// Allocs measures every step against every TURN target (the raw forwarder
// has no allocations and is skipped).
func (r *Runner) Allocs(ctx context.Context, steps []AllocsStep) []AllocsResult {
	rr := *r
	rr.Targets = turnOnly(r.Targets)
	return each(ctx, &rr, "allocs", steps, func(t Target, s AllocsStep, rep int) AllocsResult {
		res := MeasureAllocs(ctx, t, s)
		res.Repeat = rep
		return res
	})
}

// Memory measures every step against every TURN target.
func (r *Runner) Memory(ctx context.Context, steps []MemoryStep) []MemoryResult {
	rr := *r
	rr.Targets = turnOnly(r.Targets)
	return each(ctx, &rr, "memory", steps, func(t Target, s MemoryStep, rep int) MemoryResult {
		res := MeasureMemory(ctx, t, s)
		res.Repeat = rep
		return res
	})
}

func turnOnly(ts []Target) []Target {
	var out []Target
	for _, t := range ts {
		if t.Kind == KindTURN {
			out = append(out, t)
		}
	}
	return out
}
