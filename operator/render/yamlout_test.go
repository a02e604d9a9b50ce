package render

import (
	"bytes"
	"encoding/json"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
)

// FuzzJSONToYAML: jsonToYAML writes what sigs.k8s.io/yaml's JSONToYAML writes, for the JSON of
// any typed dataplane config (what the Memo converts) and for any JSON value, wherever
// go-yaml's key order is consistent (keysConsistent); where it is not, JSONToYAML's output
// depends on map iteration and only jsonToYAML's is fixed.
func FuzzJSONToYAML(f *testing.F) {
	f.Add([]byte(`{"version":"v1","listeners":[{"name":"a","protocol":"TURN-UDP","port":3478}],"clusters":[{"name":"c","endpoints":["10.0.0.1","10.0.0.0/24"]}]}`))
	f.Add([]byte(`{"a":1,"b":-9223372036854775808,"c":18446744073709551615,"d":1.5,"e":1e300,"f":"yes","g":null,"h":[true,"0x10",""],"a10":0,"a9":0,"a09":0,"a_":0,"aB":0}`))
	f.Add([]byte(`{"relay":{"nodePublicAddresses":{"node-7":"192.0.2.7","node-18":"192.0.2.18","node-1a":"192.0.2.26"}}}`))
	f.Add([]byte(`"on"`))
	// Finds: a key cycle (go-yaml's order depends on map iteration) and a number past float64.
	f.Add([]byte(`{"a1A":[],"a18":1,"a7":0}`))
	f.Add([]byte(`{"0":0,"0":1000000000e700}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		inputs := [][]byte{}
		var typed config.Config
		if json.Unmarshal(data, &typed) == nil {
			js, err := json.Marshal(&typed)
			if err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, js)
		}
		if json.Valid(data) {
			inputs = append(inputs, data)
		}
		for _, js := range inputs {
			got, errGot := jsonToYAML(js)
			if again, _ := jsonToYAML(js); !bytes.Equal(got, again) {
				t.Fatalf("jsonToYAML(%s) changed between calls:\n%s\n%s", js, got, again)
			}
			want, errWant := yaml.JSONToYAML(js)
			if errWant != nil || !keysConsistent(js) {
				// go-yaml's parser refuses some JSON that encoding/json reads (json.Marshal
				// never writes it); inconsistent keys: above.
				continue
			}
			if errGot != nil {
				t.Fatalf("jsonToYAML(%s): %v; JSONToYAML gave\n%s", js, errGot, want)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("jsonToYAML(%s):\n%s\nJSONToYAML:\n%s", js, got, want)
			}
		}
	})
}

// keysConsistent reports whether yamlKeyLess orders every object's keys in js consistently
// (irreflexive, asymmetric and transitive on them), so that go-yaml's sort has one answer.
// Objects with more than 16 keys count as inconsistent (the check is cubic).
func keysConsistent(js []byte) bool {
	var v any
	if json.Unmarshal(js, &v) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k, e := range t {
				keys = append(keys, k)
				if !walk(e) {
					return false
				}
			}
			if len(keys) > 16 {
				return false
			}
			for _, a := range keys {
				if yamlKeyLess(a, a) {
					return false
				}
				for _, b := range keys {
					if a != b && yamlKeyLess(a, b) == yamlKeyLess(b, a) {
						return false
					}
					for _, c := range keys {
						if yamlKeyLess(a, b) && yamlKeyLess(b, c) && !yamlKeyLess(a, c) {
							return false
						}
					}
				}
			}
		case []any:
			for _, e := range t {
				if !walk(e) {
					return false
				}
			}
		}
		return true
	}
	return walk(v)
}

// TestJSONToYAMLNodeNames: node names whose go-yaml order is a cycle get one order, every time.
func TestJSONToYAMLNodeNames(t *testing.T) {
	js := []byte(`{"nodePublicAddresses":{"node-7":"192.0.2.7","node-18":"192.0.2.18","node-1a":"192.0.2.26"}}`)
	first, err := jsonToYAML(js)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if got, _ := jsonToYAML(js); !bytes.Equal(got, first) {
			t.Fatalf("jsonToYAML changed:\n%s\n%s", first, got)
		}
	}
	// One fixed order (the stable sort's, from byte order); go-yaml gives any of three.
	want := "nodePublicAddresses:\n  node-18: 192.0.2.18\n  node-1a: 192.0.2.26\n  node-7: 192.0.2.7\n"
	if string(first) != want {
		t.Errorf("jsonToYAML:\n%s\nwant:\n%s", first, want)
	}
}
