package promtext

import (
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestLabelEscaping: label values with quotes, backslashes and newlines
// (listener and cluster names come from users' objects) stay one value,
// written through the library's sample writer, and Prometheus' parser
// reads back exactly the value given.
func TestLabelEscaping(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`plain`, `name="plain"`},
		{`a"b`, `name="a\"b"`},
		{`a\b`, `name="a\\b"`},
		{"a\nb", `name="a\nb"`},
		{`a"b\c` + "\n", `name="a\"b\\c\n"`},
		{`\"`, `name="\\\""`},
		{"", `name=""`},
		{"zoë", `name="zoë"`},
	} {
		if got := label("name", tc.value); got != tc.want {
			t.Errorf("label(%q) = %s, want %s", tc.value, got, tc.want)
		}
		var b bytes.Buffer
		p := &writer{w: &b}
		p.family("tern_test_total", counter, "A test family.")
		p.sample("tern_test_total", label("name", tc.value)+`,direction="rx"`, 7)
		p.flush()
		tp := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := tp.TextToMetricFamilies(&b)
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		f := fams["tern_test_total"]
		if len(f.GetMetric()) != 1 || f.GetMetric()[0].GetCounter().GetValue() != 7 {
			t.Errorf("%q: parsed back as %v", tc.value, f)
			continue
		}
		got := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != 2 || got["name"] != tc.value || got["direction"] != "rx" {
			t.Errorf("%q: labels parsed back as %q", tc.value, got)
		}
	}
}
