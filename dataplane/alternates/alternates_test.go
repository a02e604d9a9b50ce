package alternates

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestResolve: what the engine is given of the config's
// alternates, and that the dataplane's own addresses are never among them
// (RFC 8489 §10's loop rule on the server's side).
func TestResolve(t *testing.T) {
	base := func() *config.Config {
		return &config.Config{
			Listeners: []config.Listener{
				{Name: "udp", Address: "0.0.0.0", Port: 3478, PublicAddress: "203.0.113.1", PublicPort: 30478},
				{Name: "tls", Address: "10.0.0.1", Port: 443},
			},
			Relay: config.Relay{Address: "10.0.0.1", PublicAddress: "203.0.113.1"},
		}
	}
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		name string
		alts []string
		want []netip.AddrPort
	}{
		{"none", nil, nil},
		{"other replicas kept, in order", []string{"10.0.0.3:3478", "[2001:db8::3]:3478", "10.0.0.2:3478"},
			[]netip.AddrPort{ap("10.0.0.3:3478"), ap("[2001:db8::3]:3478"), ap("10.0.0.2:3478")}},
		{"own public address and port dropped", []string{"203.0.113.1:30478", "10.0.0.2:3478"}, []netip.AddrPort{ap("10.0.0.2:3478")}},
		{"own IP on a wildcard listener's port dropped", []string{"10.0.0.1:3478", "203.0.113.1:3478"}, nil},
		{"own bound listener dropped", []string{"10.0.0.1:443"}, nil},
		{"own IP, port 0 dropped", []string{"10.0.0.1:0", "10.0.0.2:0"}, []netip.AddrPort{ap("10.0.0.2:0")}},
		{"own IP on another port is another server", []string{"10.0.0.1:3479"}, []netip.AddrPort{ap("10.0.0.1:3479")}},
		{"IPv4-mapped is IPv4", []string{"[::ffff:10.0.0.2]:3478"}, []netip.AddrPort{ap("10.0.0.2:3478")}},
		{"name resolved, duplicates once", []string{"localhost:3478", "127.0.0.1:3478"}, localhostAlternates(t)},
		{"unresolvable name left out", []string{"no-such-host.invalid:3478", "10.0.0.2:3478"}, []netip.AddrPort{ap("10.0.0.2:3478")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			cfg.Alternates = tc.alts
			got := Resolve(cfg, localResolver.LookupNetIP, slog.New(slog.DiscardHandler))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// localResolver answers from /etc/hosts and sends any other query to a
// closed port on 127.0.0.1, so a name outside /etc/hosts fails without a
// packet leaving the machine.
var localResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, "127.0.0.1:1")
}}

// localhostAlternates is what the system resolver makes of localhost:3478
// (127.0.0.1, and ::1 where /etc/hosts says so), each once.
func localhostAlternates(t *testing.T) []netip.AddrPort {
	ips, err := localResolver.LookupNetIP(t.Context(), "ip", "localhost")
	if err != nil {
		t.Fatalf("resolving localhost: %v", err)
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		a := netip.AddrPortFrom(ip.Unmap(), 3478)
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
