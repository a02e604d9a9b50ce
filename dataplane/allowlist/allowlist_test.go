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
		{Name: "mapped", Endpoints: []string{"::ffff:10.9.0.0/120", "::ffff:10.8.0.1"}},
	}
	own := Self{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}
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
		// IPv4-mapped peers are IPv4 peers, and IPv4-mapped endpoints
		// IPv4 endpoints.
		{[]string{"local"}, "[::ffff:127.0.0.1]:9", true},
		{[]string{"world"}, "[::ffff:127.0.0.1]:9", false},
		{[]string{"media"}, "[::ffff:10.0.0.7]:10005", true},
		{[]string{"mapped"}, "10.9.0.200:1", true},
		{[]string{"mapped"}, "10.9.1.1:1", false},
		{[]string{"mapped"}, "10.8.0.1:1", true},
		{[]string{"mapped"}, "[::ffff:10.8.0.1]:1", true},
		{[]string{"world"}, "[2001:db8::ffff:a08:1]:1", true},
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
	if _, err := New([]string{"nope"}, clusters, Self{}); err == nil {
		t.Error("unknown route accepted")
	}
}

// TestCluster: a peer is filed under the first route whose cluster admits
// it, by the number ClusterIDs gave that cluster's name, and a name keeps
// its number when the allowlist is rebuilt without it and with it again.
func TestCluster(t *testing.T) {
	clusters := []config.Cluster{
		{Name: "media", Endpoints: []string{"10.0.0.0/24"}, MinPort: 10000, MaxPort: 10010},
		{Name: "world", Endpoints: []string{"0.0.0.0/0"}},
		{Name: "local", Endpoints: []string{"127.0.0.1"}},
	}
	var ids ClusterIDs
	l, err := Build([]string{"media", "world", "local"}, clusters, Self{}, nil, &ids)
	if err != nil {
		t.Fatal(err)
	}
	media, world, local := ids.ID("media"), ids.ID("world"), ids.ID("local")
	if media == 0 || world == 0 || local == 0 || media == world || world == local || media == local {
		t.Fatalf("numbers media=%d world=%d local=%d: want distinct and non-zero", media, world, local)
	}
	cases := []struct {
		peer string
		want uint32
		ok   bool
	}{
		{"10.0.0.7:10005", media, true},
		{"10.0.0.7:0", media, true},
		{"10.0.0.7:9", world, true}, // outside media's ports, inside world's prefix
		{"8.8.8.8:53", world, true},
		{"127.0.0.1:9", local, true}, // loopback: only the cluster that names it
		{"[2001:db8::1]:9", 0, false},
	}
	for _, tc := range cases {
		got, ok := l.Cluster(netip.MustParseAddrPort(tc.peer))
		if got != tc.want || ok != tc.ok {
			t.Errorf("Cluster(%s) = %d, %v; want %d, %v", tc.peer, got, ok, tc.want, tc.ok)
		}
	}
	if _, err := Build([]string{"world"}, clusters[1:2], Self{}, nil, &ids); err != nil {
		t.Fatal(err)
	}
	again, err := Build([]string{"local", "media"}, clusters, Self{}, nil, &ids)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Cluster(netip.MustParseAddrPort("10.0.0.7:10001")); got != media {
		t.Errorf("media after a rebuild: %d, want %d", got, media)
	}
	if l, _ := New([]string{"media"}, clusters, Self{}); l != nil {
		if got, ok := l.Cluster(netip.MustParseAddrPort("10.0.0.7:10001")); got != 0 || !ok {
			t.Errorf("New numbers clusters: %d, %v; want 0, true", got, ok)
		}
	}
}
