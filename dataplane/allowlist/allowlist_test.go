package allowlist

import (
	"net/netip"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

func TestPolicy(t *testing.T) {
	clusters := []config.Cluster{
		{Name: "local", Endpoints: []string{"127.0.0.1/32"}},
		{Name: "world", Endpoints: []string{"0.0.0.0/0", "::/0"}},
		{Name: "media", Endpoints: []string{"10.0.0.0/24", "10.0.1.5"}, MinPort: 10000, MaxPort: 10010},
		{Name: "meta", Endpoints: []string{"169.254.169.254"}},
		{Name: "self", Endpoints: []string{"192.0.2.10/32"}},
	}
	own := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	cases := []struct {
		routes []string
		peer   string
		want   bool
	}{
		{[]string{"local"}, "127.0.0.1:9", true},
		{[]string{"local"}, "127.0.0.2:9", false},
		{[]string{"local"}, "10.0.0.1:9", false},
		{nil, "10.0.0.1:9", false}, // deny by default
		{[]string{"world"}, "8.8.8.8:53", true},
		{[]string{"world"}, "[2001:db8::1]:53", true},
		{[]string{"world"}, "127.0.0.1:9", false},
		{[]string{"world"}, "169.254.169.254:80", false},
		{[]string{"world"}, "[::1]:9", false},
		{[]string{"world"}, "[fe80::1]:9", false},
		{[]string{"world"}, "192.0.2.10:3478", false}, // the dataplane's own address
		{[]string{"self"}, "192.0.2.10:3478", true},
		{[]string{"meta"}, "169.254.169.254:80", true},
		{[]string{"media"}, "10.0.0.7:10005", true},
		{[]string{"media"}, "10.0.0.7:10011", false},
		{[]string{"media"}, "10.0.0.7:0", true}, // any port of the IP, for permissions
		{[]string{"media"}, "10.0.1.5:10000", true},
		{[]string{"media"}, "10.0.1.6:10000", false},
		{[]string{"local", "media"}, "127.0.0.1:1", true},
	}
	for _, tc := range cases {
		p, err := New(tc.routes, clusters, own)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Allowed(netip.MustParseAddrPort(tc.peer)); got != tc.want {
			t.Errorf("routes %v, peer %s: allowed = %v, want %v", tc.routes, tc.peer, got, tc.want)
		}
	}
	if _, err := New([]string{"nope"}, clusters, nil); err == nil {
		t.Error("unknown route accepted")
	}
}
