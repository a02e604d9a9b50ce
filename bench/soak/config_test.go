package soak_test

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/tern-gw/tern/bench/launch"
	"github.com/tern-gw/tern/bench/soak"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
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
