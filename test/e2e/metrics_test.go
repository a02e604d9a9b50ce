package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tern-gw/tern/internal/testenv"
)

// scrapeFamilies reads ternd's /metrics and parses it with Prometheus' own
// text parser (the one Prometheus scrapes with), which refuses a sample
// before its family's TYPE, a family typed twice and malformed lines.
func (s *server) scrapeFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := httpClient.Get(s.metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", res.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("/metrics is not valid Prometheus text: %v", err)
	}
	return fams
}

// series returns the label sets of a family as "k=v,k=v" (sorted by key),
// each with its value.
func series(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		slices.Sort(ls)
		var v float64
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Untyped != nil:
			v = m.Untyped.GetValue()
		}
		out[strings.Join(ls, ",")] = v
	}
	return out
}

// TestLiveScrape scrapes a running ternd with a TURN-UDP and a TURN-TCP
// listener, two clusters, relayed traffic, a failed authentication and a
// malformed packet, and checks every name adopters and STUNner's
// dashboards query (docs/metrics.md): its type, its exact label sets, and
// that the traffic shows where it should.
func TestLiveScrape(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn has no STUNner metrics")
	}
	tcpPort, closeTCP := freePort(t, "tcp4")
	closeTCP()
	s := startTernd(t, func(c *config) {
		c.Listeners = append(c.Listeners, listener{Name: "tcp", Protocol: "TURN-TCP", Address: "127.0.0.1", Port: tcpPort, Routes: []string{"local"}})
		c.Listeners[0].Routes = []string{"local", "two"}
		c.Clusters = append(c.Clusters, cluster{Name: "two", Endpoints: []string{"127.0.0.2/32"}})
	})
	local, two := startEchoPeer(t, "127.0.0.1:0"), startEchoPeer(t, "127.0.0.2:0")
	c := newPionClient(t, s, testUser, testPassword)
	relayConn := c.allocate(t)
	roundTrips(t, relayConn, local.addr, 4)
	roundTrips(t, relayConn, two.addr, 2)

	// A failed authentication (an Allocate answered 401 after a signed try).
	bad := newPionClient(t, s, testUser, "wrong")
	if _, err := bad.Allocate(); err == nil {
		t.Fatal("Allocate with a wrong password succeeded")
	}
	// A malformed datagram.
	garbage, err := net.DialUDP("udp4", nil, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	if _, err := garbage.Write([]byte{0xFF, 0xFF, 0xFF}); err != nil {
		t.Fatal(err)
	}
	// An open TCP connection.
	conn, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(tcpPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	type family struct {
		typ    dto.MetricType
		labels []string // every label set, "k=v,k=v" sorted by key; nil: any
		min    map[string]float64
	}
	nameDir := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, "direction=rx,name="+n, "direction=tx,name="+n)
		}
		return out
	}
	counter, gauge := dto.MetricType_COUNTER, dto.MetricType_GAUGE
	want := map[string]family{
		// The seed's four names.
		"stunner_allocations_active":   {gauge, []string{""}, map[string]float64{"": 1}},
		"stunner_bytes_received_total": {counter, []string{""}, map[string]float64{"": 600}},
		"stunner_bytes_sent_total":     {counter, []string{""}, map[string]float64{"": 600}},
		"stunner_connections_total":    {counter, []string{""}, map[string]float64{"": 1}},
		// STUNner's own.
		"stunner_listener_packets_total": {counter, nameDir("tcp", "udp"), map[string]float64{
			"direction=rx,name=udp": 6, "direction=tx,name=udp": 6}},
		"stunner_listener_bytes_total": {counter, nameDir("tcp", "udp"), map[string]float64{
			"direction=rx,name=udp": 600, "direction=tx,name=udp": 600}},
		"stunner_listener_connections_total": {counter, []string{"name=tcp", "name=udp"}, map[string]float64{"name=tcp": 1}},
		"stunner_listener_connections":       {gauge, []string{"name=tcp", "name=udp"}, map[string]float64{"name=tcp": 1}},
		"stunner_cluster_packets_total": {counter, nameDir("local", "two"), map[string]float64{
			"direction=tx,name=local": 4, "direction=rx,name=local": 4, "direction=tx,name=two": 2, "direction=rx,name=two": 2}},
		"stunner_cluster_bytes_total": {counter, nameDir("local", "two"), map[string]float64{
			"direction=tx,name=local": 400, "direction=rx,name=two": 200}},
		// Tern's.
		"tern_auth_failures_total":     {counter, []string{""}, map[string]float64{"": 1}},
		"tern_allocation_errors_total": {counter, nil, map[string]float64{"code=401": 1}},
		"tern_quota_refusals_total":    {counter, []string{"quota=ip", "quota=total", "quota=user"}, nil},
		"tern_dropped_packets_total":   {counter, nil, map[string]float64{"reason=malformed": 1}},
		// Go runtime and process metrics, as STUNner's monitoring guide lists them.
		"go_goroutines":                 {gauge, nil, nil},
		"go_threads":                    {gauge, nil, nil},
		"go_memstats_alloc_bytes":       {gauge, nil, nil},
		"process_cpu_seconds_total":     {counter, nil, nil},
		"process_open_fds":              {gauge, nil, nil},
		"process_resident_memory_bytes": {gauge, nil, nil},
		"process_virtual_memory_bytes":  {gauge, nil, nil},
	}
	var fams map[string]*dto.MetricFamily
	// Relay workers and the TCP listener count asynchronously to the
	// replies the test has seen; give them a moment.
	testenv.Eventually(t, 5*time.Second, func() error {
		fams = s.scrapeFamilies(t)
		var errs []error
		for name, w := range want {
			f := fams[name]
			if f == nil {
				errs = append(errs, fmt.Errorf("%s: missing", name))
				continue
			}
			if f.GetType() != w.typ {
				errs = append(errs, fmt.Errorf("%s: type %v, want %v", name, f.GetType(), w.typ))
			}
			got := series(f)
			if w.labels != nil {
				keys := make([]string, 0, len(got))
				for k := range got {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				slices.Sort(w.labels)
				if !slices.Equal(keys, w.labels) {
					errs = append(errs, fmt.Errorf("%s: label sets %q, want %q", name, keys, w.labels))
				}
			}
			for k, min := range w.min {
				if v, ok := got[k]; !ok || v < min {
					errs = append(errs, fmt.Errorf("%s{%s} = %v (present %v), want >= %v", name, k, v, ok, min))
				}
			}
		}
		return errors.Join(errs...)
	})
	// Each cluster counts its own peer only.
	if v := series(fams["stunner_cluster_packets_total"])["direction=tx,name=two"]; v != 2 {
		t.Errorf("cluster two tx = %v, want exactly the 2 packets sent to 127.0.0.2", v)
	}

	// Every name the Grafana dashboard queries is in the scrape.
	for _, name := range dashboardMetrics(t) {
		if fams[name] == nil {
			t.Errorf("deploy/monitoring/grafana-dashboard.json queries %s, which /metrics lacks", name)
		}
	}
}

// dashboard is the part of deploy/monitoring/grafana-dashboard.json the tests read.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("grafana-dashboard.json has no panels")
	}
	return d
}

var metricName = regexp.MustCompile(`\b(?:stunner|tern)_[a-z_]+`)

// dashboardMetrics returns the metric names the dashboard's queries use.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, p := range readDashboard(t).Panels {
		for _, q := range p.Targets {
			for _, n := range metricName.FindAllString(q.Expr, -1) {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	return names
}
