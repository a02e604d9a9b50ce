package allowlist

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// TestProtectedForms: with clusters of 0.0.0.0/0 and ::/0, every cloud
// metadata and platform address is refused, and so is every IPv6 form of a
// protected IPv4 address (IPv4-mapped, IPv4-compatible, IPv4-translated,
// NAT64 with the well-known and the local-use prefix at each length, 6to4,
// Teredo), while the same forms of a public address pass. A cluster that
// names a metadata address opens it; none opens an IPv6 form.
func TestProtectedForms(t *testing.T) {
	clusters := []config.Cluster{
		{Name: "world", Endpoints: []string{"0.0.0.0/0", "::/0"}},
		{Name: "meta", Endpoints: []string{"169.254.169.254", "100.100.100.200", "168.63.129.16", "192.0.0.192", "100.96.0.96", "fd00:ec2::254", "fd00:ec2::253", "fd00:ec2::123"}},
		{Name: "nat64", Endpoints: []string{"64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "::/96", "64:ff9b::a9fe:a9fe/128"}},
		{Name: "loop6", Endpoints: []string{"::1/128"}},
	}
	world := []string{"world"}
	cases := []struct {
		name   string
		routes []string
		peer   string
		want   bool
	}{
		// Metadata and platform addresses outside link-local.
		{"AWS IMDS IPv6", world, "[fd00:ec2::254]:80", false},
		{"AWS DNS IPv6", world, "[fd00:ec2::253]:53", false},
		{"AWS NTP IPv6", world, "[fd00:ec2::123]:123", false},
		{"AWS ULA neighbour", world, "[fd00:ec2::1]:80", true},
		{"Alibaba", world, "100.100.100.200:80", false},
		{"Alibaba neighbour", world, "100.100.100.201:80", true},
		{"Volcengine", world, "100.96.0.96:80", false},
		{"Azure WireServer", world, "168.63.129.16:80", false},
		{"Azure neighbour", world, "168.63.129.17:80", true},
		{"Oracle", world, "192.0.0.192:80", false},
		{"link-local metadata", world, "169.254.169.254:80", false},
		{"OpenStack IPv6 metadata", world, "[fe80::a9fe:a9fe]:80", false},
		{"named Alibaba", []string{"meta"}, "100.100.100.200:80", true},
		{"named Azure", []string{"meta"}, "168.63.129.16:80", true},
		{"named Oracle", []string{"meta"}, "192.0.0.192:80", true},
		{"named Volcengine", []string{"meta"}, "100.96.0.96:80", true},
		{"named AWS IPv6", []string{"meta"}, "[fd00:ec2::254]:80", true},

		// IPv6 forms of 169.254.169.254 (a9fe:a9fe).
		{"mapped", world, "[::ffff:169.254.169.254]:80", false},
		{"compatible", world, "[::a9fe:a9fe]:80", false},
		{"translated", world, "[::ffff:0:a9fe:a9fe]:80", false},
		{"NAT64", world, "[64:ff9b::a9fe:a9fe]:80", false},
		{"local NAT64 /96", world, "[64:ff9b:1::a9fe:a9fe]:80", false},
		{"local NAT64 /64", world, "[64:ff9b:1:0:a9:fea9:fe00:0]:80", false},
		{"local NAT64 /56", world, "[64:ff9b:1:a9:fe:a9fe::]:80", false},
		{"local NAT64 /48", world, "[64:ff9b:1:a9fe:a9:fe00::]:80", false},
		{"6to4", world, "[2002:a9fe:a9fe::1]:80", false},
		{"Teredo", world, "[2001:0:4136:e378:8000:f269:5601:5601]:80", false},
		// ... of loopback, the other metadata addresses and unspecified.
		{"NAT64 loopback", world, "[64:ff9b::7f00:1]:9", false},
		{"6to4 loopback", world, "[2002:7f00:1::1]:9", false},
		{"Teredo loopback", world, "[2001:0:4136:e378:8000:f269:80ff:fffe]:9", false},
		{"NAT64 Alibaba", world, "[64:ff9b::6464:64c8]:80", false},
		{"NAT64 Azure", world, "[64:ff9b::a83f:8110]:80", false},
		{"6to4 Oracle", world, "[2002:c000:c0::]:80", false},
		{"Teredo Azure", world, "[2001:0:4136:e378:8000:f269:57c0:7eef]:80", false},
		{"6to4 unspecified", world, "[2002::1]:80", false},
		// ... which a cluster naming the translation prefix or the
		// IPv4 address does not open.
		{"NAT64 cluster", []string{"nat64"}, "[64:ff9b::a9fe:a9fe]:80", false},
		{"6to4 cluster", []string{"nat64"}, "[2002:a9fe:a9fe::1]:80", false},
		{"IPv4 named, NAT64 form", []string{"meta"}, "[64:ff9b::a9fe:a9fe]:80", false},

		// The same forms of a public address pass.
		{"NAT64 public", world, "[64:ff9b::808:808]:53", true},
		{"local NAT64 /96 public", world, "[64:ff9b:1::808:808]:53", true},
		{"local NAT64 /48 public", world, "[64:ff9b:1:808:8:800::]:53", true},
		{"6to4 public", world, "[2002:808:808::1]:53", true},
		{"Teredo public", world, "[2001:0:4136:e378:8000:f269:f7f7:f7f7]:53", true},
		{"compatible public", world, "[::808:808]:53", true},
		{"NAT64 cluster public", []string{"nat64"}, "[64:ff9b::808:808]:53", true},

		// :: and ::1 are IPv6's own, not IPv4-compatible addresses.
		{"::1 named", []string{"loop6"}, "[::1]:9", true},
		{"::1 wide", world, "[::1]:9", false},
		{"::2 compatible of 0.0.0.2", world, "[::2]:9", false},
	}
	for _, tc := range cases {
		l, err := New(tc.routes, clusters, Self{})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Allowed(netip.MustParseAddrPort(tc.peer)); got != tc.want {
			t.Errorf("%s: routes %v, peer %s: allowed = %v, want %v", tc.name, tc.routes, tc.peer, got, tc.want)
		}
	}
}

// TestEmbedded decodes the IPv4 address each IPv6 form carries (for the
// local-use NAT64 prefix, among the candidates of each prefix length).
func TestEmbedded(t *testing.T) {
	cases := []struct {
		ip   string
		want []string
	}{
		{"64:ff9b::c000:221", []string{"192.0.2.33"}},                    // RFC 6052 §2.4
		{"2002:c000:221::1", []string{"192.0.2.33"}},                     // RFC 3056
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", []string{"192.0.2.45"}}, // RFC 4380 §4's example
		{"::c000:221", []string{"192.0.2.33"}},
		{"::ffff:0:c000:221", []string{"192.0.2.33"}},
		{"64:ff9b:1:c000:2:2100::", []string{"192.0.2.33"}}, // /48
		{"64:ff9b:1:c0:0:221::", []string{"192.0.2.33"}},    // /56
		{"64:ff9b:1:0:c0:2:2100:0", []string{"192.0.2.33"}}, // /64
		{"::", nil},
		{"::1", nil},
		{"2001:db8::1", nil},
		{"fd00:ec2::254", nil},
	}
	for _, tc := range cases {
		out, n := embedded(netip.MustParseAddr(tc.ip))
		var got []string
		for _, a := range out[:n] {
			got = append(got, a.String())
		}
		// The local-use prefix yields one candidate per prefix length;
		// the others, one address.
		ok := slices.Equal(got, tc.want)
		if nat64Local.Contains(netip.MustParseAddr(tc.ip)) {
			ok = slices.Contains(got, tc.want[0])
		}
		if !ok {
			t.Errorf("embedded(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

// TestSelfPorts: the dataplane's own UDP listener ports are refused on its
// own addresses, on loopback and on unspecified whatever the clusters say
// (item 9 of issue 22: a cluster of 127.0.0.0/8 let an allocation relay to
// ternd's listener), while other ports of the same addresses, and the
// whole address for a permission (port 0), stay as the clusters say.
func TestSelfPorts(t *testing.T) {
	clusters := []config.Cluster{
		{Name: "local", Endpoints: []string{"127.0.0.0/8", "::1", "0.0.0.0/32"}},
		{Name: "self", Endpoints: []string{"192.0.2.10/32"}},
		{Name: "world", Endpoints: []string{"0.0.0.0/0"}},
	}
	self := Self{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}, Ports: []uint16{3478, 5349}}
	all := []string{"local", "self", "world"}
	cases := []struct {
		peer string
		want bool
	}{
		{"127.0.0.1:3478", false},
		{"127.0.0.1:5349", false},
		{"127.9.9.9:3478", false},
		{"[::1]:3478", false},
		{"[::ffff:127.0.0.1]:3478", false},
		{"0.0.0.0:3478", false},
		{"192.0.2.10:3478", false},
		{"127.0.0.1:3479", true},
		{"127.0.0.1:0", true}, // a permission: per IP
		{"[::1]:40000", true},
		{"192.0.2.10:3479", true},
		{"192.0.2.10:0", true},
		{"198.51.100.1:3478", true}, // someone else's TURN server
	}
	l, err := New(all, clusters, self)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if got := l.Allowed(netip.MustParseAddrPort(tc.peer)); got != tc.want {
			t.Errorf("peer %s: allowed = %v, want %v", tc.peer, got, tc.want)
		}
	}
}

// TestSelfOf: the UDP and DTLS listeners' ports (bound and public) are the
// dataplane's own ports, TCP and TLS ones are not (relays are UDP); every
// listener and relay address is its own, and a wildcard listener adds the
// host's interface addresses (loopback among them).
func TestSelfOf(t *testing.T) {
	ls := []config.Listener{
		{Name: "udp", Protocol: protocol.TURNUDP, Address: "0.0.0.0", Port: 3478, PublicAddress: "203.0.113.5", PublicPort: 30478},
		{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: 3479},
		{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "10.0.0.1", Port: 5349},
		{Name: "dtls2", Protocol: protocol.TURNDTLS, Address: "10.0.0.1", Port: 5349},
	}
	s := SelfOf(ls, []netip.Addr{netip.MustParseAddr("10.0.0.2")})
	if want := []uint16{3478, 30478, 5349}; !slices.Equal(s.Ports, want) {
		t.Errorf("ports %v, want %v", s.Ports, want)
	}
	for _, a := range []string{"203.0.113.5", "127.0.0.1", "10.0.0.1", "10.0.0.2"} {
		if !slices.Contains(s.Addrs, netip.MustParseAddr(a)) {
			t.Errorf("addresses %v lack %s", s.Addrs, a)
		}
	}
	if slices.Contains(s.Addrs, netip.IPv4Unspecified()) {
		t.Errorf("addresses %v hold the wildcard", s.Addrs)
	}
	// Without a wildcard listener, no interface address is added.
	s = SelfOf(ls[1:3], nil)
	if want := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.1")}; !slices.Equal(s.Addrs, want) {
		t.Errorf("addresses %v, want %v", s.Addrs, want)
	}
}
