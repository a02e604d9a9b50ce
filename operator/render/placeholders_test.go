package render

import (
	"strings"
	"testing"
)

func TestWithPlaceholders(t *testing.T) {
	in, _, err := Decode(strings.NewReader(`apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: inline-user, namespace: stunner}
spec:
  username: user-1
  authRef: {name: auth}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: ephemeral, namespace: other}
spec:
  authType: ephemeral
  authRef: {name: auth}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: password-ref, namespace: stunner}
spec:
  username: u
  password: {name: creds, key: pw}
---
apiVersion: v1
kind: Secret
metadata: {name: present, namespace: stunner}
data: {tls.crt: eA==, tls.key: eA==}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: stunner}
spec:
  gatewayClassName: c
  listeners:
    - {name: tls, port: 443, protocol: TURN-TLS, tls: {certificateRefs: [{name: cert}]}}
    - {name: tls2, port: 444, protocol: TURN-TLS, tls: {certificateRefs: [{name: present}]}}
    - {name: far, port: 445, protocol: TURN-TLS, tls: {certificateRefs: [{name: x, namespace: elsewhere}]}}
---
apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: r, namespace: stunner}
spec:
  rules: [{backendRefs: [{name: svc}, {name: svc}, {group: stunner.l7mp.io, kind: StaticService, name: static}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	notes := in.WithPlaceholders()
	if len(notes) != 5 {
		t.Errorf("notes %q, want 5 (two authRefs, a password Secret, a certificate, a Service)", notes)
	}
	secrets := map[string]map[string]bool{}
	for _, s := range in.Secrets {
		keys := map[string]bool{}
		for k, v := range s.Data {
			keys[k] = true
			if s.Name != "present" && string(v) != PlaceholderValue {
				t.Errorf("Secret %s key %s = %q", s.Name, k, v)
			}
		}
		secrets[nsName(s.Namespace, s.Name)] = keys
	}
	want := map[string][]string{
		"stunner/auth":    {"password"}, // the username is inline and would be overridden
		"other/auth":      {"secret"},
		"stunner/creds":   {"pw"},
		"stunner/cert":    {"tls.crt", "tls.key"},
		"stunner/present": {"tls.crt", "tls.key"},
	}
	if len(secrets) != len(want) {
		t.Errorf("Secrets %v, want %v", secrets, want)
	}
	for name, keys := range want {
		if len(secrets[name]) != len(keys) {
			t.Errorf("Secret %s keys %v, want %v", name, secrets[name], keys)
		}
		for _, k := range keys {
			if !secrets[name][k] {
				t.Errorf("Secret %s lacks %s", name, k)
			}
		}
	}
	if len(in.Services) != 1 || in.Services[0].Name != "svc" || in.Services[0].Spec.ClusterIP != "None" {
		t.Errorf("Services %+v, want one headless placeholder", in.Services)
	}
}
