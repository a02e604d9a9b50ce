package k8sconfig

import "testing"

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
