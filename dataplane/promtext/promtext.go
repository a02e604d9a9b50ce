// Package promtext writes the dataplane's metrics in the Prometheus text
// format (version 0.0.4): Snapshot is what a scrape folded from the
// per-worker counters, and Write turns it into the families STUNner's
// dashboards and adopters query (docs/metrics.md), each sample through
// VictoriaMetrics/metrics' writers, as admin's Go and process metrics are.
package promtext

import (
	"bytes"
	"io"

	"github.com/VictoriaMetrics/metrics"
)

// nameDir is the labels of STUNner's listener and cluster counters.
func nameDir(name, dir string) string { return label("name", name) + `,direction="` + dir + `"` }

// label renders name="value" with the value escaped as the Prometheus text
// format requires (backslash, double quote, newline).
func label(name, value string) string {
	b := make([]byte, 0, len(name)+len(value)+3)
	b = append(b, name...)
	b = append(b, '=', '"')
	for i := 0; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// writer writes the dataplane's families in the Prometheus text format
// (version 0.0.4) into a buffer, which flush hands to the scrape. Each
// sample goes through VictoriaMetrics/metrics' writers
// (metrics.WriteCounterUint64, metrics.WriteGaugeUint64), as the Go and
// process metrics that admin adds after them do. The HELP and TYPE lines
// are written here instead: the library (v1.35.1) has no way to give a
// family its HELP text (metrics.WriteMetadataIfNeeded writes a bare
// "# HELP name"), and with metrics.ExposeMetadata on, which admin turns
// on for the TYPE lines of the process metrics, its writers put that bare
// pair before every sample, a second HELP of a family that Prometheus'
// parser refuses. The samples are therefore written through samplesOnly.
// A metrics.Set does not fit either: its metadata has no text, and these
// values are folded from per-worker counters at each scrape, not kept.
type writer struct {
	w       io.Writer
	b       bytes.Buffer
	counter bool // the family being written is a counter, else a gauge
}

// Family types of writer.family.
const (
	counter = "counter"
	gauge   = "gauge"
)

// family starts a family: its HELP (help must hold no backslash or
// newline, which the format would need escaped) and TYPE (counter or
// gauge) lines. Its samples follow.
func (p *writer) family(name, typ, help string) {
	p.counter = typ == counter
	p.b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

// sample writes a sample of the current family: labels are label() pairs
// joined by commas, or empty.
func (p *writer) sample(name, labels string, v uint64) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	w := samplesOnly{&p.b}
	if p.counter {
		metrics.WriteCounterUint64(w, name, v)
	} else {
		metrics.WriteGaugeUint64(w, name, v)
	}
}

func (p *writer) flush() { _, _ = p.w.Write(p.b.Bytes()) }

// samplesOnly passes the library's sample lines on and drops its metadata
// lines, which it writes one per Write call (see writer).
type samplesOnly struct{ b *bytes.Buffer }

func (s samplesOnly) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("# ")) {
		return len(p), nil
	}
	return s.b.Write(p)
}
