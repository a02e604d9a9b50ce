package dataplane

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// families scrapes /metrics and parses it with Prometheus' own text parser,
// which refuses a sample before its family's TYPE line, a second TYPE line
// for a family, and malformed samples.
func families(t *testing.T, cfg *config.Config) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + cfg.Admin.MetricsAddress + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value returns the sample of family name whose labels are exactly labels
// ("k=v,k=v", sorted by key), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name, labels string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if labelKey(m) != labels {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// labelKey is m's labels as "k=v,k=v", sorted by key.
func labelKey(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(ls)
	return strings.Join(ls, ",")
}

// counterSnapshot is every counter sample of a scrape, by family and labels.
func counterSnapshot(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if f.GetType() != dto.MetricType_COUNTER || !(strings.HasPrefix(name, "stunner_") || strings.HasPrefix(name, "tern_")) {
			continue
		}
		for _, m := range f.GetMetric() {
			out[name+"{"+labelKey(m)+"}"] = m.Counter.GetValue()
		}
	}
	return out
}

// TestMetricsFamilies: every family has its type, STUNner's listener and
// cluster counters carry name and direction, and relayed traffic is counted
// under the listener and under the cluster its peer belongs to.
func TestMetricsFamilies(t *testing.T) {
	cfg := testConfig(t, 28600, 28699)
	cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: "two", Endpoints: []string{"127.0.0.2/32"}})
	cfg.Listeners[0].Routes = []string{"local", "two"}
	startWith(t, cfg)
	local, two := startEchoPeer(t, "127.0.0.1"), startEchoPeer(t, "127.0.0.2")
	relay, err := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	const toLocal, toTwo = 5, 3
	for i := range toLocal {
		if !echo(relay, local.addr(), []byte(fmt.Sprint("local ", i)), 2*time.Second) {
			t.Fatal("no echo from 127.0.0.1")
		}
	}
	for i := range toTwo {
		if !echo(relay, two.addr(), []byte(fmt.Sprint("two ", i)), 2*time.Second) {
			t.Fatal("no echo from 127.0.0.2")
		}
	}
	types := map[string]dto.MetricType{
		"stunner_allocations_active":         dto.MetricType_GAUGE,
		"stunner_listener_packets_total":     dto.MetricType_COUNTER,
		"stunner_listener_bytes_total":       dto.MetricType_COUNTER,
		"stunner_listener_connections":       dto.MetricType_GAUGE,
		"stunner_listener_connections_total": dto.MetricType_COUNTER,
		"stunner_cluster_packets_total":      dto.MetricType_COUNTER,
		"stunner_cluster_bytes_total":        dto.MetricType_COUNTER,
		"stunner_bytes_received_total":       dto.MetricType_COUNTER,
		"stunner_bytes_sent_total":           dto.MetricType_COUNTER,
		"stunner_connections_total":          dto.MetricType_COUNTER,
		"tern_auth_failures_total":           dto.MetricType_COUNTER,
		"tern_allocation_errors_total":       dto.MetricType_COUNTER,
		"tern_quota_refusals_total":          dto.MetricType_COUNTER,
		"tern_dropped_packets_total":         dto.MetricType_COUNTER,
		"go_goroutines":                      dto.MetricType_GAUGE,
		"process_cpu_seconds_total":          dto.MetricType_COUNTER,
		"process_open_fds":                   dto.MetricType_GAUGE,
	}
	// The echoes above were counted before they came back, except the
	// last relay worker batch, which may be a moment behind.
	testenv.Eventually(t, 2*time.Second, func() error {
		fams := families(t, cfg)
		for name, typ := range types {
			if f := fams[name]; f == nil || f.GetType() != typ {
				return fmt.Errorf("family %s: %v, want type %v", name, f.GetType(), typ)
			}
		}
		want := []struct {
			name, labels string
			min          float64
		}{
			{"stunner_allocations_active", "", 1},
			{"stunner_listener_packets_total", "direction=rx,name=udp", toLocal + toTwo},
			{"stunner_listener_packets_total", "direction=tx,name=udp", toLocal + toTwo},
			{"stunner_listener_bytes_total", "direction=rx,name=udp", 1},
			{"stunner_listener_connections", "name=udp", 2}, // two SO_REUSEPORT sockets
			{"stunner_listener_connections_total", "name=udp", 2},
			{"stunner_connections_total", "", 2},
			{"stunner_cluster_packets_total", "direction=tx,name=local", toLocal},
			{"stunner_cluster_packets_total", "direction=rx,name=local", toLocal},
			{"stunner_cluster_packets_total", "direction=tx,name=two", toTwo},
			{"stunner_cluster_packets_total", "direction=rx,name=two", toTwo},
			{"stunner_cluster_bytes_total", "direction=tx,name=local", toLocal * 7},
			{"stunner_cluster_bytes_total", "direction=rx,name=two", toTwo * 5},
			{"tern_allocation_errors_total", "code=401", 0},
			{"tern_quota_refusals_total", "quota=user", 0},
			{"tern_dropped_packets_total", "reason=malformed", 0},
		}
		for _, w := range want {
			v, ok := value(fams, w.name, w.labels)
			if !ok || v < w.min {
				return fmt.Errorf("%s{%s} = %v (present %v), want >= %v", w.name, w.labels, v, ok, w.min)
			}
		}
		// Per cluster, exactly what went to each peer: nothing of "two"
		// under "local".
		if v, _ := value(fams, "stunner_cluster_packets_total", "direction=tx,name=local"); v != toLocal {
			return fmt.Errorf("local tx %v, want %d", v, toLocal)
		}
		if v, _ := value(fams, "stunner_cluster_packets_total", "direction=rx,name=two"); v != toTwo {
			return fmt.Errorf("two rx %v, want %d", v, toTwo)
		}
		return nil
	})
}

// TestCountersSurviveReload: across a listener restart, a listener removed
// and added back, and a cluster dropped and restored, no counter goes
// backwards, and traffic after the change adds to what came before.
func TestCountersSurviveReload(t *testing.T) {
	cfg := testConfig(t, 28700, 28799)
	srv := startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	relayOnce := func(step string, c *config.Config) {
		t.Helper()
		relay, err := dialClient(t, c.Listeners[0], c.Auth.Realm, "user", "pass").Allocate()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		defer relay.Close()
		for i := range 3 {
			if !echo(relay, peer.addr(), []byte(fmt.Sprint(step, i)), 2*time.Second) {
				t.Fatalf("%s: no echo", step)
			}
		}
	}
	relayOnce("start", cfg)
	last := counterSnapshot(families(t, cfg))
	check := func(step string) {
		t.Helper()
		now := counterSnapshot(families(t, cfg))
		for k, v := range last {
			if w, ok := now[k]; ok && w < v {
				t.Errorf("%s: %s went from %v to %v", step, k, v, w)
			}
		}
		for _, k := range []string{"stunner_bytes_received_total{}", "stunner_bytes_sent_total{}", "stunner_connections_total{}"} {
			if _, ok := now[k]; !ok {
				t.Errorf("%s: %s missing", step, k)
			}
		}
		last = now
	}
	apply := func(step string, next *config.Config) {
		t.Helper()
		if err := srv.Reconfigure(next); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		cfg = next
		check(step)
	}

	// Restart the listener on another port.
	next := cloneConfig(cfg)
	next.Listeners[0].Port = freePort(t, "udp")
	beforeRestart := last[`stunner_listener_packets_total{direction=rx,name=udp}`]
	apply("restart the listener", next)
	relayOnce("after the restart", cfg)
	check("traffic after the restart")
	if v := last[`stunner_listener_packets_total{direction=rx,name=udp}`]; v <= beforeRestart {
		t.Errorf("listener rx after the restart %v, want more than %v", v, beforeRestart)
	}

	// Add a TCP listener, remove the UDP one, then bring it back.
	next = cloneConfig(cfg)
	udp := next.Listeners[0]
	tcp := config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}}
	next.Listeners = []config.Listener{tcp}
	apply("replace udp by tcp", next)
	if _, ok := last[`stunner_listener_packets_total{direction=rx,name=udp}`]; ok {
		t.Error("a removed listener's series is still exported")
	}
	relayOnce("over tcp", cfg)
	check("traffic over tcp")
	next = cloneConfig(cfg)
	next.Listeners = []config.Listener{udp, tcp}
	apply("udp back", next)
	if v := last[`stunner_listener_packets_total{direction=rx,name=udp}`]; v <= beforeRestart {
		t.Errorf("udp back: rx %v, want its earlier counts (> %v) carried on", v, beforeRestart)
	}

	// Drop the cluster's name from the config and restore it.
	localTx := last[`stunner_cluster_packets_total{direction=tx,name=local}`]
	if localTx < 9 {
		t.Errorf("cluster local tx %v after three relays of 3, want >= 9", localTx)
	}
	next = cloneConfig(cfg)
	next.Clusters = append(next.Clusters, config.Cluster{Name: "other", Endpoints: []string{"127.0.0.1/32"}})
	for i := range next.Listeners {
		next.Listeners[i].Routes = []string{"other"}
	}
	next.Clusters = next.Clusters[1:]
	apply("rename the cluster", next)
	next = cloneConfig(cfg)
	next.Clusters = []config.Cluster{{Name: "local", Endpoints: []string{"127.0.0.1/32"}}}
	for i := range next.Listeners {
		next.Listeners[i].Routes = []string{"local"}
	}
	apply("restore the cluster", next)
	if v := last[`stunner_cluster_packets_total{direction=tx,name=local}`]; v < localTx {
		t.Errorf("cluster local tx %v after coming back, want >= %v", v, localTx)
	}
}

// TestNoCounters: with NoCounters the relay path counts nothing, and the
// series are still there (at 0) for dashboards and alerts.
func TestNoCounters(t *testing.T) {
	cfg := testConfig(t, 28800, 28899)
	startOpts(t, cfg, Options{UDPThreads: 1, RelayThreads: 1, NoCounters: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	peer := startEchoPeer(t, "127.0.0.1")
	relay, err := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if !echo(relay, peer.addr(), []byte("x"), 2*time.Second) {
		t.Fatal("no echo")
	}
	fams := families(t, cfg)
	for _, s := range []struct{ name, labels string }{
		{"stunner_listener_packets_total", "direction=rx,name=udp"},
		{"stunner_cluster_packets_total", "direction=tx,name=local"},
		{"stunner_bytes_received_total", ""},
	} {
		if v, ok := value(fams, s.name, s.labels); !ok || v != 0 {
			t.Errorf("%s{%s} = %v (present %v), want 0", s.name, s.labels, v, ok)
		}
	}
	if v, _ := value(fams, "stunner_allocations_active", ""); v != 1 {
		t.Errorf("stunner_allocations_active = %v, want 1", v)
	}
}
