package render

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		check   func(t *testing.T, in *Input, ignored []string)
		wantErr string
	}{
		{
			name: "boolean annotation becomes text",
			yaml: "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: g\n  annotations:\n    stunner.l7mp.io/enable-mixed-protocol-lb: true\n    port: 8086\nspec:\n  gatewayClassName: c\n  listeners: []\n",
			check: func(t *testing.T, in *Input, _ []string) {
				a := in.Gateways[0].Annotations
				if a["stunner.l7mp.io/enable-mixed-protocol-lb"] != "true" || a["port"] != "8086" {
					t.Fatalf("annotations %v", a)
				}
				if in.Gateways[0].Namespace != "default" {
					t.Fatalf("namespace %q, want default", in.Gateways[0].Namespace)
				}
			},
		},
		{
			name: "STUNner v1alpha1 read as v1",
			yaml: "apiVersion: stunner.l7mp.io/v1alpha1\nkind: GatewayConfig\nmetadata: {name: gc, namespace: stunner}\nspec: {userName: u, password: p, minPort: 30000, maxPort: 32767}\n",
			check: func(t *testing.T, in *Input, ignored []string) {
				if len(in.GatewayConfigs) != 1 || len(ignored) != 0 {
					t.Fatalf("GatewayConfigs %d, ignored %v", len(in.GatewayConfigs), ignored)
				}
				if s := in.GatewayConfigs[0].Spec; deref(s.UserName) != "u" || s.MinPort == nil || *s.MinPort != 30000 {
					t.Fatalf("spec %+v", s)
				}
			},
		},
		{
			name: "stringData folds into data",
			yaml: "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: n}\ndata: {a: YQ==}\nstringData: {b: bee}\n",
			check: func(t *testing.T, in *Input, _ []string) {
				s := in.Secrets[0]
				if string(s.Data["a"]) != "a" || string(s.Data["b"]) != "bee" || s.StringData != nil {
					t.Fatalf("secret %+v", s)
				}
			},
		},
		{
			name: "unknown kinds are ignored, lists are unpacked",
			yaml: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: stunner}\n- apiVersion: keda.sh/v1alpha1\n  kind: ScaledObject\n  metadata: {name: x}\n---\n---\n",
			check: func(t *testing.T, in *Input, ignored []string) {
				if len(in.Namespaces) != 1 || in.Namespaces[0].Namespace != "" {
					t.Fatalf("namespaces %+v", in.Namespaces)
				}
				if len(ignored) != 1 || ignored[0] != "keda.sh/v1alpha1/ScaledObject x" {
					t.Fatalf("ignored %v", ignored)
				}
			},
		},
		{
			name: "both UDPRoute groups",
			yaml: "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: UDPRoute\nmetadata: {name: a}\nspec: {}\n---\napiVersion: stunner.l7mp.io/v1\nkind: UDPRoute\nmetadata: {name: b}\nspec: {}\n",
			check: func(t *testing.T, in *Input, _ []string) {
				if len(in.GatewayUDPRoutes) != 1 || len(in.UDPRoutes) != 1 {
					t.Fatalf("routes %d %d", len(in.GatewayUDPRoutes), len(in.UDPRoutes))
				}
			},
		},
		{
			name:    "unknown field is an error naming the object",
			yaml:    "apiVersion: stunner.l7mp.io/v1\nkind: GatewayConfig\nmetadata: {name: c}\nspec: {realmm: x}\n",
			wantErr: `GatewayConfig "c"`,
		},
		{
			name:    "field names are case-sensitive",
			yaml:    "apiVersion: stunner.l7mp.io/v1\nkind: StaticService\nmetadata: {name: c}\nspec: {Prefixes: [1.2.3.4/32]}\n",
			wantErr: "Prefixes",
		},
		{
			name:    "a known kind needs a name",
			yaml:    "apiVersion: stunner.l7mp.io/v1\nkind: GatewayConfig\nspec: {authType: longterm}\n",
			wantErr: "metadata.name is required",
		},
		{
			name:    "document number in errors",
			yaml:    "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: [\n",
			wantErr: "document 2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, ignored, err := Decode(strings.NewReader(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, in, ignored)
		})
	}
}
