package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
)

// FuzzRender feeds arbitrary manifests through Decode and Render, as `ternd -f` does with a
// user's file and as the operator does with what the API server holds. Neither may panic,
// the same input must render the same result, every object rendered for a Gateway must be
// complete as the controller applies it (named in the Gateway's namespace, labelled, owned),
// and every rendered config must load the way ternd loads it: the operator must never hand
// the dataplane a config it rejects. Seeds: every golden input (testdata/*.in.yaml) and
// testdata/fuzz/FuzzRender.
func FuzzRender(f *testing.F) {
	ins, _ := filepath.Glob(filepath.Join("testdata", "*.in.yaml"))
	for _, in := range ins {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	env := map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "192.168.1.10"}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, _, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		res := Render(in, Options{})
		again := Render(in, Options{})
		b1, err1 := json.Marshal(res)
		b2, err2 := json.Marshal(again)
		if err1 != nil || err2 != nil {
			t.Fatalf("result does not marshal: %v, %v", err1, err2)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatal("the same input rendered twice gives different results")
		}
		gateways := map[string]*gwapiv1.Gateway{}
		for i := range in.Gateways {
			gateways[nsName(in.Gateways[i].Namespace, in.Gateways[i].Name)] = &in.Gateways[i]
		}
		for _, g := range res.Gateways {
			gw := gateways[nsName(g.Namespace, g.Name)]
			if gw == nil {
				t.Fatalf("rendered Gateway %s/%s is not in the input", g.Namespace, g.Name)
			}
			checkObjectsComplete(t, gw, &g)
			if g.ConfigMap == nil {
				if g.Config != nil {
					t.Errorf("Gateway %s/%s: a config but no ConfigMap", g.Namespace, g.Name)
				}
				continue
			}
			if _, err := config.Parse([]byte(g.ConfigMap.Data[ConfigKey]), func(k string) string { return env[k] }); err != nil {
				t.Errorf("Gateway %s/%s: rendered config does not load: %v\n%s", g.Namespace, g.Name, err, g.ConfigMap.Data[ConfigKey])
			}
		}
	})
}
