package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderStunnerManifests: `tern-operator render` takes each of the
// renderer's stunner_* golden inputs, Tern's own equivalents of the
// manifests STUNner publishes in deploy/manifests and docs/examples, with
// exit code 0, no error on stderr, and a Deployment (or DaemonSet) and
// ConfigMap for every Gateway.
func TestRenderStunnerManifests(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("..", "..", "operator", "render", "testdata", "stunner_*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no stunner_* cases in operator/render/testdata")
	}
	for _, path := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".in.yaml"), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run([]string{"render", "-f", path}, strings.NewReader(""), &out, &errOut); code != 0 {
				t.Fatalf("exit code %d, stderr:\n%s", code, errOut.String())
			}
			if strings.Contains(errOut.String(), "error:") {
				t.Errorf("stderr reports an error:\n%s", errOut.String())
			}
			in, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			gateways := strings.Count(string(in), "\nkind: Gateway\n")
			configMaps := strings.Count(out.String(), "\nkind: ConfigMap\n")
			workloads := strings.Count(out.String(), "\nkind: Deployment\n") + strings.Count(out.String(), "\nkind: DaemonSet\n")
			if gateways == 0 || configMaps != gateways || workloads != gateways {
				t.Errorf("%d Gateways, %d ConfigMaps, %d Deployments or DaemonSets: want one of each per Gateway", gateways, configMaps, workloads)
			}
		})
	}
}
