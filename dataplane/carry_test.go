package dataplane

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tern-gw/tern/dataplane/takeover"
)

const carryText = `# HELP stunner_allocations_active allocations
# TYPE stunner_allocations_active gauge
stunner_allocations_active 5
# HELP stunner_listener_packets_total datagrams
# TYPE stunner_listener_packets_total counter
stunner_listener_packets_total{name="udp",direction="rx"} 120
stunner_listener_packets_total{name="udp",direction="tx"} 118
# TYPE tern_auth_failures_total counter
tern_auth_failures_total 3
`

// TestCounterSeries: every counter sample, none of the gauges.
func TestCounterSeries(t *testing.T) {
	want := []takeover.Counter{
		{Series: `stunner_listener_packets_total{name="udp",direction="rx"}`, Value: 120},
		{Series: `stunner_listener_packets_total{name="udp",direction="tx"}`, Value: 118},
		{Series: `tern_auth_failures_total`, Value: 3},
	}
	if diff := cmp.Diff(want, counterSeries([]byte(carryText))); diff != "" {
		t.Errorf("counterSeries (-want +got):\n%s", diff)
	}
}

// TestAddCarried: carried values add to the counters of the same series;
// gauges, other series and the comments are written as they are.
func TestAddCarried(t *testing.T) {
	carried := map[string]float64{
		`stunner_listener_packets_total{name="udp",direction="rx"}`:  1000,
		`tern_auth_failures_total`:                                   2,
		`stunner_allocations_active`:                                 7, // a gauge: never carried
		`stunner_listener_packets_total{name="gone",direction="rx"}`: 9,
	}
	var b bytes.Buffer
	addCarried(&b, []byte(carryText), carried)
	want := `# HELP stunner_allocations_active allocations
# TYPE stunner_allocations_active gauge
stunner_allocations_active 5
# HELP stunner_listener_packets_total datagrams
# TYPE stunner_listener_packets_total counter
stunner_listener_packets_total{name="udp",direction="rx"} 1120
stunner_listener_packets_total{name="udp",direction="tx"} 118
# TYPE tern_auth_failures_total counter
tern_auth_failures_total 5
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("addCarried (-want +got):\n%s", diff)
	}
}
