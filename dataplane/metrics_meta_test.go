package dataplane

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestMetricsMetadata: the dataplane's families keep their names, TYPE and
// HELP text and the series of an idle server keep their labels exactly
// (testdata/metrics-metadata.golden: what STUNner's dashboards and
// docs/metrics.md name), the metadata once per family, with the library's own
// metadata exposed as admin turns it on; and the whole scrape parses with
// Prometheus' text parser, which refuses a second HELP or TYPE line.
func TestMetricsMetadata(t *testing.T) {
	metrics.ExposeMetadata(true)
	cfg := testConfig(t, 28700, 28719)
	// None: what an idle server reports must not depend on whether this
	// machine can attach the offload programs.
	cfg.Offload = config.Offload{Engine: offloadmode.None}
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "tcp", Protocol: protocol.TURNTCP,
		Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}})
	// A TURN-TLS listener beside HTTPS, for tern_listener_tls_routed_total.
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "tls", Protocol: protocol.TURNTLS,
		Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}, Cert: cert, Key: key,
		Upstream: &config.TLSUpstream{Address: "127.0.0.1:9"}})
	srv := startWith(t, cfg)
	var b bytes.Buffer
	srv.writeMetrics(&b)
	p := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := p.TextToMetricFamilies(bytes.NewReader(b.Bytes())); err != nil {
		t.Fatalf("the dataplane's metrics do not parse: %v\n%s", err, b.String())
	}
	var meta strings.Builder
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, "# ") {
			meta.WriteString(line)
		} else if i := strings.LastIndexByte(line, ' '); i > 0 {
			meta.WriteString(line[:i] + "\n") // values vary; series do not
		}
	}
	golden := filepath.Join("testdata", "metrics-metadata.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(meta.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./dataplane -run TestMetricsMetadata -update)", err)
	}
	if meta.String() != string(want) {
		t.Errorf("HELP, TYPE or series differ from %s (run with -update only for an intended change):\ngot:\n%s", golden, meta.String())
	}
}
