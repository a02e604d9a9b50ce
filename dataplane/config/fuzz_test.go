package config

import (
	"bytes"
	"encoding/json"
	"testing"

	"sigs.k8s.io/yaml"
)

// fuzzEnv is the environment FuzzParse parses in: a pod with an IPv4 pod
// IP and an IPv6 node IP, so both placeholders can expand and both address
// families reach Validate, on node-a, so relay.nodePublicAddresses applies.
func fuzzEnv(k string) string {
	return map[string]string{"POD_IP": "10.244.0.7", "NODE_IP": "2001:db8::7", "NODE_NAME": "node-a"}[k]
}

// FuzzParse checks that Parse never panics, that what it accepts is valid,
// and that an accepted config survives a JSON round trip unchanged (so what
// the operator marshals, ternd parses back the same). The round trip parses
// without an environment: an accepted config has no placeholders left.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimalYAML))
	f.Add([]byte(minimalJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, fuzzEnv)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		b1, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(b1, nil)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", b1, err)
		}
		b2, err := json.Marshal(c2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("round trip changed the config:\n%s\n%s", b1, b2)
		}
	})
}

// FuzzParseJSON holds ParseJSON to Parse's verdict on what the operator's Memo checks with it:
// the JSON of a typed config (json.Marshal), against the YAML made from that JSON as the
// ConfigMap holds it. The input is decoded leniently into a Config first, so every field of
// the type is reachable; both parsers must then accept or refuse alike and, accepting, return
// the same config.
func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(minimalJSON))
	f.Add([]byte(`{"version":"v1","listeners":[{"name":"a","protocol":"TURN-UDP","port":0}]}`))
	f.Add([]byte(`{"version":"v1","auth":{"type":"ephemeral"},"listeners":[{"name":"a","protocol":"TURN-TLS","port":443,"address":"$(POD_IP)"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var typed Config
		if json.Unmarshal(data, &typed) != nil {
			return
		}
		js, err := json.Marshal(&typed)
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			t.Fatalf("JSONToYAML(%s): %v", js, err)
		}
		cy, errY := Parse(y, fuzzEnv)
		cj, errJ := ParseJSON(js, fuzzEnv)
		if (errY == nil) != (errJ == nil) {
			t.Fatalf("verdicts differ on %s:\nParse(YAML): %v\nParseJSON: %v", js, errY, errJ)
		}
		if errY != nil {
			return
		}
		by, _ := json.Marshal(cy)
		bj, _ := json.Marshal(cj)
		if !bytes.Equal(by, bj) {
			t.Fatalf("configs differ on %s:\n%s\n%s", js, by, bj)
		}
	})
}
