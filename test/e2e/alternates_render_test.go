package e2e

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tern-gw/tern/dataplane/alternates"
	dpconfig "github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/operator/render"
)

// TestRenderedAlternatesLeaveSelfOut: the one alternates list tern-operator renders for a
// hostNetwork Gateway (golden case alternates_hostnetwork: ready replicas on node-a, with
// ExternalIP 203.0.113.11, node-b, with none, and node-c, with 203.0.113.13; node-d's
// draining replica not listed) is, in the ternd of each node (its config loaded with the
// NODE_IP and NODE_NAME the pod gets), exactly the other ready replicas: each replica
// recognises its own entry and never redirects to itself (RFC 8489 §10).
func TestRenderedAlternatesLeaveSelfOut(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "operator", "render", "testdata", "alternates_hostnetwork.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := render.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	res := render.Render(in, render.Options{})
	if len(res.Gateways) != 1 || res.Gateways[0].ConfigMap == nil {
		t.Fatalf("want one rendered Gateway with a ConfigMap, got %+v", res.Gateways)
	}
	cm := []byte(res.Gateways[0].ConfigMap.Data[render.ConfigKey])
	noLookup := func(context.Context, string, string) ([]netip.Addr, error) {
		return nil, errors.New("no names expected")
	}
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		node, nodeIP string
		want         []netip.AddrPort
	}{
		{"node-a", "10.0.0.11", []netip.AddrPort{ap("10.0.0.12:0"), ap("203.0.113.13:0")}},
		{"node-b", "10.0.0.12", []netip.AddrPort{ap("203.0.113.11:0"), ap("203.0.113.13:0")}},
		{"node-c", "10.0.0.13", []netip.AddrPort{ap("10.0.0.12:0"), ap("203.0.113.11:0")}},
		// The draining replica, not in the list, may send its clients to any of the three.
		{"node-d", "10.0.0.14", []netip.AddrPort{ap("10.0.0.12:0"), ap("203.0.113.11:0"), ap("203.0.113.13:0")}},
	} {
		t.Run(tc.node, func(t *testing.T) {
			env := map[string]string{"POD_IP": tc.nodeIP, "NODE_IP": tc.nodeIP, "NODE_NAME": tc.node}
			cfg, err := dpconfig.Parse(cm, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			got := alternates.Resolve(cfg, noLookup, slog.New(slog.DiscardHandler))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ternd on %s redirects to %v, want %v (config alternates %q)", tc.node, got, tc.want, cfg.Alternates)
			}
		})
	}
}
