package iface

import (
	"net"
	"net/netip"
	"testing"
)

// TestCarries: an interface carries an address it has (IPv4-mapped
// IPv6 counts as IPv4), and for an unspecified address any address of
// that family but a link-local one.
func TestCarries(t *testing.T) {
	ipnet := func(s string) net.Addr {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		ip, _, _ := net.ParseCIDR(s)
		n.IP = ip
		return n
	}
	mp := netip.MustParseAddr
	for _, tc := range []struct {
		name  string
		addrs []net.Addr
		want  []netip.Addr
		ok    bool
	}{
		{"own IPv4", []net.Addr{ipnet("10.0.0.1/24")}, []netip.Addr{mp("10.0.0.1")}, true},
		{"other IPv4", []net.Addr{ipnet("10.0.0.1/24")}, []netip.Addr{mp("10.0.0.2")}, false},
		{"mapped IPv4", []net.Addr{ipnet("10.0.0.1/24")}, []netip.Addr{mp("::ffff:10.0.0.1")}, true},
		{"own IPv6", []net.Addr{ipnet("fd00::1/64")}, []netip.Addr{mp("fd00::1")}, true},
		{"IPv4 wildcard", []net.Addr{ipnet("10.0.0.1/24")}, []netip.Addr{mp("0.0.0.0")}, true},
		{"IPv4 wildcard, IPv6 only", []net.Addr{ipnet("fd00::1/64")}, []netip.Addr{mp("0.0.0.0")}, false},
		{"IPv6 wildcard, link-local only", []net.Addr{ipnet("fe80::1/64")}, []netip.Addr{mp("::")}, false},
		{"IPv6 wildcard", []net.Addr{ipnet("fe80::1/64"), ipnet("fd00::1/64")}, []netip.Addr{mp("::")}, true},
		{"nothing wanted", []net.Addr{ipnet("10.0.0.1/24")}, nil, false},
	} {
		if got := carries(tc.addrs, tc.want); got != tc.ok {
			t.Errorf("%s: carries = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
