package launch

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestTerndConfigValid checks the generated config against ternd's own
// loader, so a schema change there fails here rather than mid-benchmark.
// The metrics-off variant serves no /metrics.
func TestTerndConfigValid(t *testing.T) {
	l := &Launcher{}
	l.defaults()
	for _, metrics := range []bool{true, false} {
		p := filepath.Join(t.TempDir(), "ternd.yaml")
		if err := WriteConfig(p, l.terndConfig(l.addr(0), l.relayIP(0), metrics)); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Relay.MinPort != 4000 || cfg.Relay.MaxPort != 65535 || cfg.Listeners[0].Port != 23478 {
			t.Fatalf("config %+v", cfg)
		}
		if got := cfg.Admin.MetricsAddress != ""; got != metrics {
			t.Errorf("metrics %v: metricsAddress %q", metrics, cfg.Admin.MetricsAddress)
		}
	}
}

func TestCoturnArgs(t *testing.T) {
	l := &Launcher{Dir: "/w"}
	l.defaults()
	args := l.coturnArgs(netip.MustParseAddrPort("127.0.0.1:23578"), l.relayIP(1))
	for _, want := range []string{"-n", "--lt-cred-mech", "--allow-loopback-peers", "--no-cli", "--no-tls", "--no-dtls",
		"--relay-ip=127.0.0.3", "--listening-ip=127.0.0.1", "user:pass", "stunner.l7mp.io", "/w/coturn.db"} {
		if !slices.Contains(args, want) {
			t.Errorf("coturn args lack %q: %s", want, strings.Join(args, " "))
		}
	}
	if i := slices.Index(args, "--relay-threads"); i < 0 || args[i+1] != "2" {
		t.Errorf("relay threads not 2: %v", args)
	}
}

// TestStreamsConfig: with Streams, ternd's config has TURN-TCP, TLS and
// DTLS listeners ternd's loader accepts, and coturn serves TLS and DTLS.
func TestStreamsConfig(t *testing.T) {
	l := &Launcher{Dir: t.TempDir(), Streams: true, RelayIP: netip.MustParseAddr("127.0.96.2")}
	l.defaults()
	l.cert, l.key = filepath.Join(l.Dir, "tls.crt"), filepath.Join(l.Dir, "tls.key")
	p := filepath.Join(l.Dir, "ternd.yaml")
	if err := WriteConfig(p, l.terndConfig(l.addr(0), l.relayIP(0), true)); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var protos []string
	for _, ls := range cfg.Listeners {
		protos = append(protos, string(ls.Protocol))
	}
	if !slices.Equal(protos, []string{"TURN-UDP", "TURN-TCP", "TURN-TLS", "TURN-DTLS"}) || cfg.Listeners[2].Port != 23478+TLSPortOffset {
		t.Fatalf("listeners %+v", cfg.Listeners)
	}
	if cfg.Relay.Address != "127.0.96.2" || l.relayIP(2).String() != "127.0.96.4" {
		t.Fatalf("relay %s, third %s", cfg.Relay.Address, l.relayIP(2))
	}
	args := l.coturnArgs(l.addr(1), l.relayIP(1))
	if slices.Contains(args, "--no-tls") || slices.Contains(args, "--no-dtls") || !slices.Contains(args, l.cert) {
		t.Fatalf("coturn args %v", args)
	}
}
