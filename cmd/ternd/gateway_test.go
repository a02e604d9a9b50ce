package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/operator/render"
)

// TestGatewayFileStunnerManifests: `ternd -f` serves every Gateway of the
// renderer's stunner_* cases (Tern's own equivalents of the manifests
// STUNner publishes), protocol aliases included: each loads, and its
// listeners carry the normalized TURN protocol names.
func TestGatewayFileStunnerManifests(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("..", "..", "operator", "render", "testdata", "stunner_*.in.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no stunner_* cases in operator/render/testdata (%v)", err)
	}
	for _, path := range cases {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		in, _, err := render.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for _, gw := range in.Gateways {
			name := strings.TrimSuffix(filepath.Base(path), ".in.yaml") + "/" + gw.Name
			t.Run(name, func(t *testing.T) {
				f := &gatewayFile{gateway: gw.Namespace + "/" + gw.Name}
				defer f.close()
				cfg, err := f.load(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(cfg.Listeners) != len(gw.Spec.Listeners) {
					t.Fatalf("%d listeners, want the Gateway's %d", len(cfg.Listeners), len(gw.Spec.Listeners))
				}
				for i, l := range cfg.Listeners {
					want, ok := protocol.Normalize(string(gw.Spec.Listeners[i].Protocol))
					if !ok || l.Protocol != want {
						t.Errorf("listener %s: protocol %q, want %q (from %q)", l.Name, l.Protocol, want, gw.Spec.Listeners[i].Protocol)
					}
				}
			})
		}
	}
}
