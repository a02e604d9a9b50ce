package dataplane

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"

	"github.com/tern-gw/tern/dataplane/takeover"
)

// Counters carried across a hand-over (ternd --takeover): the old process
// sends the value of every counter series its /metrics writes at the moment
// it stops (counterSeries), and the successor adds them to its own series of
// the same name and labels from then on (addCarried), so that no counter
// goes backwards across an upgrade and rate() sees no reset. Gauges are not
// carried: the successor's are its own state. A series the successor does
// not write (a listener it does not have) is dropped.

// counterSeries returns the counter samples of text, a /metrics exposition
// in Prometheus text format: the series of every family whose TYPE is
// counter, with their values.
func counterSeries(text []byte) []takeover.Counter {
	var out []takeover.Counter
	counters := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if fam, typ, ok := strings.Cut(name, " "); ok && typ == "counter" {
				counters[fam] = true
			}
			continue
		}
		series, v, ok := sample(line)
		if !ok || !counters[family(series)] {
			continue
		}
		out = append(out, takeover.Counter{Series: series, Value: v})
	}
	return out
}

// addCarried writes text, a /metrics exposition, to w with carried[series]
// added to each counter sample's value.
func addCarried(w io.Writer, text []byte, carried map[string]float64) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	counters := map[string]bool{}
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		s := string(line)
		if name, ok := strings.CutPrefix(s, "# TYPE "); ok {
			if fam, typ, ok := strings.Cut(name, " "); ok && typ == "counter" {
				counters[fam] = true
			}
		} else if series, v, ok := sample(s); ok && counters[family(series)] {
			if c, ok := carried[series]; ok {
				s = series + " " + strconv.FormatFloat(v+c, 'f', -1, 64)
			}
		}
		bw.WriteString(s)
		bw.WriteByte('\n')
	}
}

// sample splits a sample line `series value` (no timestamp: /metrics writes
// none).
func sample(line string) (series string, v float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i <= 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	return line[:i], v, err == nil
}

// family is the metric name of a series.
func family(series string) string {
	if i := strings.IndexByte(series, '{'); i >= 0 {
		return series[:i]
	}
	return series
}
