package soak_test

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/soak"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/selfsigned"
)

// TestTerndConfig: the soak's config is one that ternd's loader takes, with
// a TURN-UDP and a TURN-TCP listener on the same address and every quota at
// ternd's default.
func TestTerndConfig(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.98.1:23478")
	p := filepath.Join(t.TempDir(), "soak.yaml")
	if err := launch.WriteConfig(p, soak.TerndConfig(listen, netip.MustParseAddr("127.0.98.1"), netip.MustParseAddr("127.0.98.9"))); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Listeners) != 2 || c.Listeners[0].Protocol != protocol.TURNUDP || c.Listeners[1].Protocol != protocol.TURNTCP ||
		c.Listeners[1].Port != 23478 || c.Clusters[0].Endpoints[0] != "127.0.98.9/32" {
		t.Fatalf("config %+v", c)
	}
	if c.Admin.MetricsAddress != "127.0.0.1:23479" || soak.MetricsURL(listen) != "http://127.0.0.1:23479/metrics" ||
		c.Limits.AllocationsPerIP != config.DefaultAllocationsPerIP {
		t.Fatalf("admin %+v, limits %+v", c.Admin, c.Limits)
	}
}

// TestHardenedConfig: the hardening soak's config loads in ternd, with TURN-TLS and
// TURN-DTLS on the port + 5 and the wide TURN-UDP listener on + 6, routed to a cluster
// that names 0.0.0.0/0, ::/0 and 127.0.0.0/8, and ::1 as a second relay address; Hardened
// points a soak at those listeners.
func TestHardenedConfig(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.98.1:23478")
	dir := t.TempDir()
	cert, key, err := selfsigned.Write(filepath.Join(dir, "cert"), "soak", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "soak.yaml")
	if err := launch.WriteConfig(p, soak.HardenedConfig(listen, netip.MustParseAddr("127.0.98.1"), netip.MustParseAddr("127.0.98.9"), cert, key)); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	routes := map[string][]string{}
	for _, l := range c.Listeners {
		ports[string(l.Protocol)+" "+l.Name] = l.Port
		routes[l.Name] = l.Routes
	}
	want := map[string]int{"TURN-UDP udp": 23478, "TURN-TCP tcp": 23478, "TURN-TLS tls": 23483, "TURN-DTLS dtls": 23483, "TURN-UDP wide": 23484}
	if !reflect.DeepEqual(ports, want) {
		t.Errorf("listeners %v, want %v", ports, want)
	}
	var wide []string
	for _, cl := range c.Clusters {
		if cl.Name == "wide" {
			wide = cl.Endpoints
		}
	}
	if !reflect.DeepEqual(routes["wide"], []string{"wide"}) || !reflect.DeepEqual(wide, []string{"0.0.0.0/0", "::/0", "127.0.0.0/8"}) ||
		len(c.Relay.ExtraAddresses) != 1 || c.Relay.ExtraAddresses[0].Address != "::1" {
		t.Errorf("wide listener routes %v, cluster %v, extra relay addresses %v", routes["wide"], wide, c.Relay.ExtraAddresses)
	}
	var cfg soak.Config
	soak.Hardened(&cfg, listen)
	if cfg.WideServer.Port() != 23484 || cfg.DTLSServer.Port() != 23483 || cfg.TLSServer.Port() != 23483 ||
		cfg.HealthAddr.String() != c.Admin.HealthAddress || len(cfg.OwnUDP) != 3 {
		t.Errorf("Hardened: %+v", cfg)
	}
}

func TestParseAttacks(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"", nil, false},
		{"all", soak.AllAttacks, false},
		{"reflect, spoof", []string{"spoof", "reflect"}, false},
		{"spoof,auth", nil, true},
	} {
		got, err := soak.ParseAttacks(c.in)
		if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseAttacks(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}
