package config

import (
	"bytes"
	"encoding/json"
	"testing"
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
