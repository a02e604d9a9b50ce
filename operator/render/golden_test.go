package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current output")

// goldenOutput is what a golden file holds: the result, and the documents
// Decode ignored.
type goldenOutput struct {
	Ignored []string `json:"ignored,omitempty"`
	Result  *Result  `json:"result"`
}

// TestGolden renders every testdata/<case>.in.yaml and compares the result
// with testdata/<case>.out.yaml. Run with -update to accept new output.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) == 0 {
		t.Fatal("no golden cases in testdata")
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			got := renderFile(t, in, Options{})
			// Rendering twice must give the same bytes, and so must rendering with a Memo,
			// both when it is empty and when it holds every config.
			if again := renderFile(t, in, Options{}); !bytes.Equal(got, again) {
				t.Fatal("output is not deterministic")
			}
			memo := &Memo{}
			for i := range 2 {
				if m := renderFile(t, in, Options{Memo: memo}); !bytes.Equal(got, m) {
					t.Fatalf("render %d with a Memo differs:\n%s", i+1, lineDiff(string(got), string(m)))
				}
			}
			out := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run go test ./operator/render -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the rendered output; run go test ./operator/render -update and review the diff\n%s", out, lineDiff(string(want), string(got)))
			}
		})
	}
}

func renderFile(t *testing.T, path string, opts Options) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, ignored, err := Decode(f)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	res := Render(in, opts)
	gateways := map[string]*gwapiv1.Gateway{}
	for i := range in.Gateways {
		gateways[nsName(in.Gateways[i].Namespace, in.Gateways[i].Name)] = &in.Gateways[i]
	}
	for _, g := range res.Gateways {
		// Every object is complete as the controller applies it.
		checkObjectsComplete(t, gateways[nsName(g.Namespace, g.Name)], &g)
		// Every rendered config must load the way ternd loads it.
		if g.ConfigMap == nil {
			continue
		}
		env := map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "192.168.1.10"}
		if _, err := config.Parse([]byte(g.ConfigMap.Data[ConfigKey]), func(k string) string { return env[k] }); err != nil {
			t.Errorf("Gateway %s/%s: rendered config does not load: %v", g.Namespace, g.Name, err)
		}
	}
	data, err := yaml.Marshal(goldenOutput{Ignored: ignored, Result: res})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// lineDiff shows the first differing lines of two texts, enough to see
// what changed without a diff tool.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl == gl {
			continue
		}
		b.WriteString("line " + strconv.Itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl + "\n")
		if shown++; shown == 10 {
			b.WriteString("...\n")
			break
		}
	}
	return b.String()
}
