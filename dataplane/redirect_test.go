package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/dataplane/config"
)

// redirectConfig is a loopback dataplane whose TURN-UDP listener and relay
// sockets are on ip, with relay ports [min, max], a route to 127.0.0.1 and
// the given alternates and maxAllocations.
func redirectConfig(t *testing.T, ip string, min, max, maxAllocs int, alternates ...string) *config.Config {
	t.Helper()
	alts := "[]"
	if len(alternates) > 0 {
		alts = `["` + strings.Join(alternates, `", "`) + `"]`
	}
	doc := fmt.Sprintf(`
version: v1
admin: {name: test, metricsAddress: "127.0.0.1:%d", healthAddress: "127.0.0.1:%d"}
auth: {type: static, realm: stunner.l7mp.io, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: %s, port: %d, routes: [local]}
clusters:
  - {name: local, endpoints: ["127.0.0.1/32"]}
relay: {address: %s, minPort: %d, maxPort: %d}
limits: {maxAllocations: %d}
alternates: %s
offload: {engine: None}
`, freePort(t, "tcp"), freePort(t, "tcp"), ip, freePort(t, "udp"), ip, min, max, maxAllocs, alts)
	cfg, err := config.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loopClient is a TURN client on 127.0.0.1 for the listener of cfg.
func loopClient(t *testing.T, cfg *config.Config) (*turnclient.Client, *net.UDPConn) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := turnclient.New(conn, netip.MustParseAddrPort(addrOf(cfg.Listeners[0])), turnclient.Credentials{Username: "user", Password: "pass"})
	c.Timeout, c.Retries = 200*time.Millisecond, 4
	return c, conn
}

// TestRedirectToAlternate runs two dataplanes, A on 127.0.0.1 and B on
// 127.0.0.2, A listing B as its alternate. A client of A's allocates and
// relays; then A refuses new allocations, draining or at
// limits.maxAllocations, and a new client of A's, redirected by a 300 Try
// Alternate, allocates on B and relays there, while the first keeps
// relaying through A until it deletes its allocation.
func TestRedirectToAlternate(t *testing.T) {
	peer := startEchoPeer(t, "127.0.0.1")
	peerAddr := netip.MustParseAddrPort(peer.conn.LocalAddr().String())
	for _, tc := range []struct {
		name      string
		maxAllocs int
		drain     bool
		reason    string
	}{
		{"draining", 0, true, "draining"},
		{"at maxAllocations", 1, false, "capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgB := redirectConfig(t, "127.0.0.2", 43100, 43199, 0)
			startWith(t, cfgB)
			b := netip.MustParseAddrPort(addrOf(cfgB.Listeners[0]))
			cfgA := redirectConfig(t, "127.0.0.1", 43000, 43099, tc.maxAllocs, b.String())
			srvA := startWith(t, cfgA)
			a := netip.MustParseAddrPort(addrOf(cfgA.Listeners[0]))

			first, firstConn := loopClient(t, cfgA)
			if _, err := first.Allocate(0); err != nil {
				t.Fatalf("Allocate on A: %v", err)
			}
			if err := first.CreatePermission(peerAddr); err != nil {
				t.Fatal(err)
			}
			if err := relayVia(firstConn, a, peerAddr, "before"); err != nil {
				t.Fatal(err)
			}
			if tc.drain {
				srvA.Drain()
				if srvA.Ready() {
					t.Fatal("A is ready while draining")
				}
			}

			second, secondConn := loopClient(t, cfgA)
			relayed, err := second.Allocate(0)
			if err != nil {
				t.Fatalf("Allocate redirected from A: %v", err)
			}
			if second.Server() != b {
				t.Fatalf("allocated on %v, want the alternate %v", second.Server(), b)
			}
			if relayed.Addr() != b.Addr() || relayed.Port() < 43100 || relayed.Port() > 43199 {
				t.Fatalf("relayed address %v is not B's", relayed)
			}
			if err := second.CreatePermission(peerAddr); err != nil {
				t.Fatal(err)
			}
			if err := relayVia(secondConn, b, peerAddr, "via B"); err != nil {
				t.Fatal(err)
			}

			// A keeps serving the allocation it has.
			if err := first.Refresh(600); err != nil {
				t.Fatalf("Refresh on A: %v", err)
			}
			if err := relayVia(firstConn, a, peerAddr, "still via A"); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf(`tern_redirects_total{reason=%q} 1`, tc.reason)
			if m := scrape(t, cfgA); !strings.Contains(m, want) {
				t.Fatalf("A's metrics lack %s", want)
			}
			if err := first.Refresh(0); err != nil {
				t.Fatal(err)
			}
			if n := srvA.Engine().Allocations(); n != 0 {
				t.Fatalf("A has %d allocations after the last was deleted", n)
			}
		})
	}
}

// TestRedirectLoopRefused: two draining dataplanes that name each other.
// The client goes from A to B, and B's 300 back to A is refused by the
// client (RFC 8489 §10: not to a server it has tried); neither server
// names itself.
func TestRedirectLoopRefused(t *testing.T) {
	cfgA := redirectConfig(t, "127.0.0.1", 43200, 43209, 0)
	cfgB := redirectConfig(t, "127.0.0.2", 43210, 43219, 0)
	a := netip.MustParseAddrPort(addrOf(cfgA.Listeners[0]))
	b := netip.MustParseAddrPort(addrOf(cfgB.Listeners[0]))
	// Each lists both: the list a Gateway's replicas share.
	cfgA.Alternates = []string{a.String(), b.String()}
	cfgB.Alternates = []string{a.String(), b.String()}
	srvA, srvB := startWith(t, cfgA), startWith(t, cfgB)
	srvA.Drain()
	srvB.Drain()
	c, _ := loopClient(t, cfgA)
	_, err := c.Allocate(0)
	var er *turnclient.ErrorResponse
	if !errors.As(err, &er) || er.Code != stun.CodeTryAlternate || er.Alternate != a {
		t.Fatalf("Allocate: %v; want the 300 back to A refused", err)
	}
	if c.Server() != b {
		t.Fatalf("the client ended at %v, want B %v", c.Server(), b)
	}
	for name, srv := range map[string]*Server{"A": srvA, "B": srvB} {
		if n := srv.Engine().Redirects(0) + srv.Engine().Redirects(1); n != 1 {
			t.Errorf("%s redirected %d times, want 1", name, n)
		}
	}
}
