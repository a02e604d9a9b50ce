package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tern-gw/tern/bench"
)

// plotW and plotH keep the committed images small.
const (
	plotW = 6 * vg.Inch
	plotH = 3.5 * vg.Inch
)

// Plots writes the plots of r into dir as PNG files and returns their
// names: per client count and payload size, server CPU per packet and
// delivered rate against offered rate; latency percentiles, allocation
// rate and memory per allocation as bars.
func Plots(r *bench.Report, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	save := func(p *plot.Plot, name string) error {
		if err := p.Save(plotW, plotH, filepath.Join(dir, name)); err != nil {
			return err
		}
		files = append(files, name)
		return nil
	}

	keys, cells := throughput(r.Throughput)
	type group struct {
		clients, size int
		mode          bench.Mode
		echo          bool
	}
	var groups []group
	for _, k := range keys {
		g := group{k.Clients, k.Size, k.Mode, k.Echo}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		suffix := fmt.Sprintf("n%d-%dB-%s", g.clients, g.size, g.mode)
		if g.echo {
			suffix += "-echo"
		}
		for _, m := range []struct {
			name, ylabel string
			get          func(tpCell) float64
		}{
			{"cpu", "server CPU µs per relayed packet", func(c tpCell) float64 { return c.CPU }},
			{"delivered", "delivered packets/s", func(c tpCell) float64 { return c.Delivered }},
		} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s, N=%d clients, %d B payload, %s", m.ylabel, g.clients, g.size, g.mode)
			p.X.Label.Text = "offered packets/s"
			p.Y.Label.Text = m.ylabel
			p.Y.Min = 0
			var args []any
			for _, t := range r.Meta.Targets {
				var xys plotter.XYs
				for _, k := range keys {
					if k.Clients != g.clients || k.Size != g.size || k.Mode != g.mode || k.Echo != g.echo {
						continue
					}
					c, ok := cells[k][t.Name]
					if !ok || c.Err != "" || math.IsNaN(m.get(c)) {
						continue
					}
					xys = append(xys, plotter.XY{X: float64(k.Rate), Y: m.get(c)})
				}
				if len(xys) > 0 {
					args = append(args, t.Name, xys)
				}
			}
			if len(args) == 0 {
				continue
			}
			if err := plotutil.AddLinePoints(p, args...); err != nil {
				return nil, err
			}
			p.Legend.Top = true
			if err := save(p, fmt.Sprintf("throughput-%s-%s.png", m.name, suffix)); err != nil {
				return nil, err
			}
		}
	}

	if names, lat := latency(r.Latency); len(names) > 0 {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("round-trip latency at %s", latencyRate(r))
		p.Y.Label.Text = "µs"
		w := vg.Points(12)
		for i, q := range []struct {
			name string
			get  func(latCell) float64
		}{{"p50", func(c latCell) float64 { return c.P50 }}, {"p90", func(c latCell) float64 { return c.P90 }},
			{"p99", func(c latCell) float64 { return c.P99 }}, {"p99.9", func(c latCell) float64 { return c.P999 }}} {
			vals := make(plotter.Values, len(names))
			for j, n := range names {
				vals[j] = q.get(lat[n])
			}
			b, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return nil, err
			}
			b.Offset = vg.Length(i-2)*w + w/2
			b.Color = plotutil.Color(i)
			b.LineStyle.Width = 0
			p.Add(b)
			p.Legend.Add(q.name, b)
		}
		p.Legend.Top = true
		p.NominalX(names...)
		if err := save(p, "latency.png"); err != nil {
			return nil, err
		}
	}

	if names, al := allocs(r.Allocs); len(names) > 0 {
		vals := make(plotter.Values, len(names))
		for i, n := range names {
			vals[i] = al[n].PerSec
		}
		if err := bars(save, "allocs.png", "authenticated Allocate+Refresh(0) cycles per second", "allocations/s", names, vals); err != nil {
			return nil, err
		}
	}

	if ms := memory(r.Memory); len(ms) > 0 {
		var names []string
		var vals plotter.Values
		for _, m := range ms {
			if math.IsNaN(m.PerAlloc) {
				continue
			}
			names = append(names, fmt.Sprintf("%s %dk", m.Target, m.K/1000))
			vals = append(vals, m.PerAlloc)
		}
		if len(vals) > 0 {
			if err := bars(save, "memory.png", "resident bytes per held allocation", "bytes", names, vals); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

func bars(save func(*plot.Plot, string) error, file, title, ylabel string, names []string, vals plotter.Values) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	b, err := plotter.NewBarChart(vals, vg.Points(24))
	if err != nil {
		return err
	}
	b.Color = plotutil.Color(0)
	b.LineStyle.Width = 0
	p.Add(b)
	p.NominalX(names...)
	return save(p, file)
}
