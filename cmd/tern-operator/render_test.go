package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	dir := t.TempDir()
	good := `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: c}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: gc, namespace: stunner}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: gc, namespace: stunner}
spec: {username: u, password: p}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: stunner}
spec:
  gatewayClassName: c
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`
	if err := os.WriteFile(filepath.Join(dir, "good.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(good, "spec: {username: u, password: p}", "spec: {username: u}", 1)
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantOut    []string
		wantErrOut []string
	}{
		{name: "file", args: []string{"render", "-f", filepath.Join(dir, "good.yaml")}, wantCode: 0,
			wantOut: []string{"kind: ServiceAccount", "kind: ConfigMap", "kind: Service\n", "kind: Deployment",
				"serviceAccountName: g\n", "automountServiceAccountToken: false", "http://stunner-config-discovery.tern-system.svc:13478", "app.kubernetes.io/managed-by: tern-operator", "controller: true",
				"image: ghcr.io/tern-gw/ternd:dev", "tern.yaml: |"}},
		{name: "directory", args: []string{"render", "-f", dir}, wantCode: 0, wantOut: []string{"kind: Deployment"}},
		{name: "stdin with status", args: []string{"render", "-f", "-", "--status"}, stdin: good, wantCode: 0,
			wantOut: []string{"gatewayClasses:", "type: Programmed"}},
		{name: "problems", args: []string{"render", "-f", "-"}, stdin: bad, wantCode: 1,
			wantErrOut: []string{"error: GatewayConfig.stunner.l7mp.io stunner/gc: spec.password: static auth needs a password"}},
		{name: "no file", args: []string{"render"}, wantCode: 2, wantErrOut: []string{"usage:"}},
		{name: "missing file", args: []string{"render", "-f", filepath.Join(dir, "nope.yaml")}, wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tt.args, strings.NewReader(tt.stdin), &out, &errOut)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut.String())
			}
			for _, s := range tt.wantOut {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range tt.wantErrOut {
				if !strings.Contains(errOut.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut.String())
				}
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		var out, errOut bytes.Buffer
		if code := run([]string{arg}, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d; stderr:\n%s", arg, code, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "tern-operator dev (") {
			t.Errorf("%s printed %q", arg, out.String())
		}
	}
}

// TestRenderReferenceExamples renders STUNner's reference examples as a user
// would, without the Secrets and Services they name: placeholders stand in,
// with a note each, and every Gateway is rendered.
func TestRenderReferenceExamples(t *testing.T) {
	ex := "../../deploy/examples/"
	args := []string{"render",
		"-f", ex + "stunner-reference-udp-gateway.yaml",
		"-f", ex + "stunner-reference-complex-gateway.yaml",
		"-f", ex + "stunner-reference-mixed-protocol-gateway.yaml",
		"-f", ex + "stunner-reference-static-service.yaml"}
	var out, errOut bytes.Buffer
	if code := run(args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut.String())
	}
	for _, s := range []string{
		"note: placeholder Secret stunner/stunner-auth-secret",
		"note: placeholder Secret stunner/tls-secret",
		"note: placeholder Service media-plane/media-server-pool",
	} {
		if !strings.Contains(errOut.String(), s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut.String())
		}
	}
	for _, gw := range []string{"udp-gateway", "complex-gateway", "mixed-protocol-gateway"} {
		if !strings.Contains(out.String(), "kind: Deployment\nmetadata:\n") || !strings.Contains(out.String(), "name: "+gw+"\n") {
			t.Errorf("no objects for Gateway %s", gw)
		}
	}
	// The placeholder credentials are in the rendered Secret (base64 of
	// TERN-PLACEHOLDER), and the config names the file it is mounted as.
	if !strings.Contains(out.String(), "kind: Secret\n") || !strings.Contains(out.String(), "password: VEVSTi1QTEFDRUhPTERFUg==\n") ||
		!strings.Contains(out.String(), "passwordFile: /etc/tern/auth/password\n") || strings.Contains(out.String(), "password: TERN-PLACEHOLDER") {
		t.Errorf("want the placeholder credentials in the Secret and not in the config:\n%s", out.String())
	}

	// Without placeholders the missing Secret is an error, as before.
	out.Reset()
	errOut.Reset()
	if code := run(append(args, "--placeholders=false"), strings.NewReader(""), &out, &errOut); code != 1 {
		t.Fatalf("--placeholders=false: exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "Secret stunner/stunner-auth-secret not found") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, cmd := range []string{"run", "render", "version"} {
			if !strings.Contains(out.String(), "\n  "+cmd+" ") {
				t.Errorf("%v: help does not list %s:\n%s", args, cmd, out.String())
			}
		}
	}
	for _, args := range [][]string{{"render", "-h"}, {"run", "-h"}} {
		var out, errOut bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Errorf("%v: exit %d, want 0", args, code)
		}
	}
}
