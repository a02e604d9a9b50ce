package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/relaybind"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/turn"
)

// streamClient stands in for a connection transport where a test asks the
// relay pool for a relay directly.
type streamClient struct{}

func (streamClient) PeerCluster(netip.AddrPort) (uint32, bool)           { return 0, true }
func (streamClient) BatchSocket(int) (fd int, st *stats.Worker, ok bool) { return -1, nil, false }
func (streamClient) WriteToClient([]byte)                                {}
func (streamClient) QueueToClient(int, []byte) bool                      { return false }
func (streamClient) FlushToClient(int)                                   {}

// TestRelayAddressList: with one relay port per address, two addresses
// hold two allocations, one on each, both relaying; a third gets 508.
func TestRelayAddressList(t *testing.T) {
	cfg := testConfig(t, 29940, 29940)
	cfg.Relay.ExtraAddresses = []config.RelayAddress{{Address: "127.0.0.2"}}
	startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		relay, err := pionClient(t, cfg, "user", "pass").Allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		defer relay.Close()
		ra := relay.LocalAddr().(*net.UDPAddr)
		if ra.Port != 29940 {
			t.Errorf("allocation %d: relay port %d, want 29940", i, ra.Port)
		}
		seen[ra.IP.String()] = true
		if !echo(relay, peer.addr(), []byte{byte(i), 7}, 2*time.Second) {
			t.Errorf("allocation %d on %v: no echo through the relay", i, ra)
		}
	}
	if !seen["127.0.0.1"] || !seen["127.0.0.2"] {
		t.Errorf("relayed transport addresses on %v, want one on each of 127.0.0.1 and 127.0.0.2", seen)
	}
	if _, err := pionClient(t, cfg, "user", "pass").Allocate(); err == nil || !strings.Contains(err.Error(), "508") {
		t.Fatalf("allocation beyond both addresses' ports: %v, want 508", err)
	}
}

// TestRelayAddressFamily: an IPv6 relayed transport address needs an IPv6
// relay address; with one, the allocation gets it.
func TestRelayAddressFamily(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []config.RelayAddress
		want  error
	}{
		{"IPv4 only", nil, turn.ErrAddressFamily},
		{"with ::1", []config.RelayAddress{{Address: "::1"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 29930, 29939)
			cfg.Relay.ExtraAddresses = tc.extra
			srv := startWith(t, cfg)
			a := &turn.Allocation{Transport: streamClient{}}
			r, _, err := srv.relays.Allocate(a, turn.RelayRequest{IPv6: true})
			if err != tc.want {
				t.Fatalf("IPv6 relay: %v, want %v", err, tc.want)
			}
			if err == nil {
				defer r.Close()
				if r.Addr().Addr() != netip.IPv6Loopback() {
					t.Errorf("IPv6 relay on %v, want ::1", r.Addr())
				}
			}
		})
	}
}

// TestRelayDefaultFamily: a request that names no family gets IPv4 when
// the pool has an IPv4 relay address and IPv6 when it has only IPv6 ones;
// one that asks for IPv4 by name gets 440 from an IPv6-only pool.
func TestRelayDefaultFamily(t *testing.T) {
	for _, tc := range []struct {
		name  string
		relay string
		extra []config.RelayAddress
		req   turn.RelayRequest
		want  netip.Addr
		err   error
	}{
		{"dual, default", "127.0.0.1", []config.RelayAddress{{Address: "::1"}}, turn.RelayRequest{Default: true}, netip.MustParseAddr("127.0.0.1"), nil},
		{"IPv6 only, default", "::1", nil, turn.RelayRequest{Default: true}, netip.IPv6Loopback(), nil},
		{"IPv6 only, IPv4 asked", "::1", nil, turn.RelayRequest{}, netip.Addr{}, turn.ErrAddressFamily},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 29910, 29919)
			cfg.Relay.Address, cfg.Relay.ExtraAddresses = tc.relay, tc.extra
			srv := startWith(t, cfg)
			r, _, err := srv.relays.Allocate(&turn.Allocation{Transport: streamClient{}}, tc.req)
			if err != tc.err {
				t.Fatalf("relay: %v, want %v", err, tc.err)
			}
			if err == nil {
				defer r.Close()
				if r.Addr().Addr() != tc.want {
					t.Errorf("relay on %v, want %v", r.Addr(), tc.want)
				}
			}
		})
	}
}

// TestRelayAddressAdded: adding a relay address live restarts the
// listeners (a relay change, per the seed's rules) and the new address then
// serves allocations next to the old one.
func TestRelayAddressAdded(t *testing.T) {
	cfg := testConfig(t, 29920, 29920)
	srv := startWith(t, cfg)
	if _, err := pionClient(t, cfg, "user", "pass").Allocate(); err != nil {
		t.Fatal(err)
	}
	next := *cfg
	next.Relay.ExtraAddresses = []config.RelayAddress{{Address: "127.0.0.2"}}
	if err := srv.Reconfigure(&next); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		var relay net.PacketConn
		// The old allocation's socket closes in its worker: allow it a moment.
		testenv.Eventually(t, 2*time.Second, func() (err error) {
			relay, err = pionClient(t, &next, "user", "pass").Allocate()
			if err != nil {
				return fmt.Errorf("allocation %d after adding 127.0.0.2: %w", i, err)
			}
			return nil
		})
		defer relay.Close()
		seen[relay.LocalAddr().(*net.UDPAddr).IP.String()] = true
	}
	if !seen["127.0.0.1"] || !seen["127.0.0.2"] {
		t.Errorf("relayed transport addresses on %v, want both 127.0.0.1 and 127.0.0.2", seen)
	}
}

// TestRelayBindsLocalPublicAddress: a relay publicAddress that is this
// host's own (a node's ExternalIP on its interface, under hostNetwork) is
// where relay sockets bind, so peers' packets to the advertised address
// arrive; 127.0.0.2 stands in for it on loopback. An address that is not
// the host's (1:1 NAT in front) leaves the socket on relay.address.
func TestRelayBindsLocalPublicAddress(t *testing.T) {
	cfg := testConfig(t, 29950, 29959)
	cfg.Relay.PublicAddress = "127.0.0.2"
	srv := startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	relay, err := pionClient(t, cfg, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	if ip := relay.LocalAddr().(*net.UDPAddr).IP.String(); ip != "127.0.0.2" {
		t.Fatalf("XOR-RELAYED-ADDRESS %s, want the public address 127.0.0.2", ip)
	}
	// The echo creates the permission; the peer's answer goes to where the
	// relay's packet came from, which proves nothing about the advertised
	// address. So the peer also sends to the advertised address itself.
	if !echo(relay, peer.addr(), []byte("permission"), 2*time.Second) {
		t.Fatal("no echo")
	}
	advertised := relay.LocalAddr().(*net.UDPAddr)
	if _, err := peer.conn.WriteToUDP([]byte("to the advertised address"), advertised); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	_ = relay.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _, err := relay.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "to the advertised address" {
		t.Fatalf("a peer's packet to the advertised address %v did not arrive (%q, %v): the relay socket is not bound there", advertised, buf[:n], err)
	}

	// Not the host's: advertised, and the socket stays on relay.address.
	next := *cfg
	next.Relay.PublicAddress = "192.0.2.1"
	if got := relaybind.Addresses(next.Relay, srv.log); got.Address != "127.0.0.1" || got.PublicAddress != "192.0.2.1" {
		t.Fatalf("bind %s advertising %s, want 127.0.0.1 advertising 192.0.2.1", got.Address, got.PublicAddress)
	}
	next.Relay.ExtraAddresses = []config.RelayAddress{{Address: "127.0.0.3", PublicAddress: "127.0.0.4"}}
	if got := relaybind.Addresses(next.Relay, srv.log); got.ExtraAddresses[0].Address != "127.0.0.4" || next.Relay.ExtraAddresses[0].Address != "127.0.0.3" {
		t.Fatalf("extra address binds %s (config left %s), want 127.0.0.4 (config unchanged)", got.ExtraAddresses[0].Address, next.Relay.ExtraAddresses[0].Address)
	}
}
