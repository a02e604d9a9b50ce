package render

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestMemoForgets: a Memo holds what the last two Renders used, however many Renders of
// other inputs came before, so its size follows the Gateways, not the changes.
func TestMemoForgets(t *testing.T) {
	load := func(path string) *Input {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		in, _, err := Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	a := load("testdata/alternates_hostnetwork.in.yaml")
	b := load("testdata/alternates_pod_network.in.yaml")
	m := &Memo{}
	size := func() int { return len(m.cur) + len(m.prev) }
	Render(a, Options{Memo: m})
	na := size()
	if na == 0 {
		t.Fatal("the Memo kept nothing")
	}
	Render(b, Options{Memo: m})
	Render(b, Options{Memo: m})
	// a's entries are gone; only b's, in both generations at most.
	if got := size(); got > 2*len(m.cur) || len(m.cur) == 0 {
		t.Errorf("after two renders of another input: cur %d, prev %d entries", len(m.cur), len(m.prev))
	}
	for range 10 {
		Render(b, Options{Memo: m})
	}
	if got := len(m.cur); got != len(m.prev) {
		t.Errorf("steady state: cur %d, prev %d entries, want equal", got, len(m.prev))
	}
}

// BenchmarkMarshalChecked is the cost of a changed config in a render: marshalling it to the
// ConfigMap's YAML and checking it, without a Memo (config.Parse on the YAML) and through a
// Memo that has not seen it (config.ParseJSON on the JSON), and as both were done before
// jsonToYAML and ParseJSON (sigs.k8s.io/yaml's JSONToYAML, config.Parse on the YAML). The config is
// backends_ports's with 20 clusters of 10 endpoints added, one Gateway of `make bench-config`.
func BenchmarkMarshalChecked(b *testing.B) {
	f, err := os.Open("testdata/backends_ports.in.yaml")
	if err != nil {
		b.Fatal(err)
	}
	in, _, err := Decode(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	res := Render(in, Options{})
	if len(res.Gateways) == 0 || res.Gateways[0].Config == nil {
		b.Fatal("backends_ports rendered no config")
	}
	cfg := *res.Gateways[0].Config
	cfg.Clusters = append([]config.Cluster(nil), cfg.Clusters...)
	for i := range 20 {
		c := config.Cluster{Name: fmt.Sprintf("udproute/default/route-%d", i)}
		for j := range 10 {
			c.Endpoints = append(c.Endpoints, fmt.Sprintf("10.%d.%d.%d", i, j, 7))
		}
		cfg.Clusters = append(cfg.Clusters, c)
	}
	if _, err := marshalChecked(&cfg); err != nil {
		b.Fatal(err)
	}
	// before: what marshalChecked did before jsonToYAML and ParseJSON, for the ratio.
	b.Run("before", func(b *testing.B) {
		for b.Loop() {
			js, err := json.Marshal(&cfg)
			if err != nil {
				b.Fatal(err)
			}
			data, err := yaml.JSONToYAML(js)
			if err != nil {
				b.Fatal(err)
			}
			if err := checkRendered(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse-yaml", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalChecked(&cfg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memo-miss", func(b *testing.B) {
		for b.Loop() {
			if _, err := (&Memo{}).marshalChecked(&cfg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
