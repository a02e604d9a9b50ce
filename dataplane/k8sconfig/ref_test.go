package k8sconfig

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseRef(t *testing.T) {
	tests := []struct {
		ref, def      string
		wantNS, wantN string
		wantErr       bool
	}{
		{ref: "stunner/udp-gateway", wantNS: "stunner", wantN: "udp-gateway"},
		{ref: "stunner/udp-gateway", def: "other", wantNS: "stunner", wantN: "udp-gateway"},
		{ref: "udp-gateway", def: "stunner", wantNS: "stunner", wantN: "udp-gateway"},
		{ref: "udp-gateway", wantErr: true},
		{ref: "", def: "stunner", wantErr: true},
		{ref: "stunner/", wantErr: true},
		{ref: "/udp-gateway", def: "stunner", wantErr: true},
		{ref: "a/b/c", wantErr: true},
		{ref: "Stunner/udp-gateway", wantErr: true},
		{ref: "stunner/udp gateway", wantErr: true},
		{ref: "udp-gateway", def: "my.namespace", wantErr: true},
		{ref: "stunner/udp-gateway.v2", wantNS: "stunner", wantN: "udp-gateway.v2"},
	}
	for _, tt := range tests {
		ns, n, err := ParseRef(tt.ref, tt.def)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseRef(%q, %q) error = %v, want error %v", tt.ref, tt.def, err, tt.wantErr)
			continue
		}
		if ns != tt.wantNS || n != tt.wantN {
			t.Errorf("ParseRef(%q, %q) = %q, %q; want %q, %q", tt.ref, tt.def, ns, n, tt.wantNS, tt.wantN)
		}
	}
}

// FuzzParseRef: ParseRef never panics, and what it accepts names an object the API server
// could hold, and is the reference it was given. Seeds: testdata/fuzz/FuzzParseRef.
func FuzzParseRef(f *testing.F) {
	f.Add("stunner/udp-gateway", "")
	f.Fuzz(func(t *testing.T, ref, def string) {
		ns, name, err := ParseRef(ref, def)
		if err != nil {
			return
		}
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Fatalf("ParseRef(%q, %q) = %q, %q: not a namespace and a ConfigMap name", ref, def, ns, name)
		}
		if strings.Contains(ref, "/") && ns+"/"+name != ref || !strings.Contains(ref, "/") && (ns != def || name != ref) {
			t.Fatalf("ParseRef(%q, %q) = %q, %q: not what was given", ref, def, ns, name)
		}
	})
}
