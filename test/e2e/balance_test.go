package e2e

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestImbalanceRedirects runs two ternd processes as two replicas of one
// Gateway: A on 127.0.0.1 and B on 127.0.0.2, on the same TURN and health
// ports, A's alternates naming B and its limits.allocationImbalancePercent
// 50. With 20 allocations on A and none on B, A is 10 above the mean of
// 10, more than 50% and the floor of 10 above it: it sends a new client's
// first Allocate to B (300 Try Alternate), which the project's client
// follows, and counts it as imbalance; a client that is already
// challenged is served on A. When A's allocations end it takes new
// clients again.
func TestImbalanceRedirects(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's ALTERNATE-SERVER")
	}
	b := startTernd(t, func(c *config) {
		c.Listeners[0].Address, c.Relay.Address = "127.0.0.2", "127.0.0.2"
		c.Admin.HealthAddress = strings.Replace(c.Admin.HealthAddress, "127.0.0.1:", "127.0.0.2:", 1)
		c.Offload = map[string]any{"engine": "None"} // no interface carries 127.0.0.2
	})
	hb, err := url.Parse(b.healthURL)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Hostname() != "127.0.0.2" {
		t.Fatalf("B's health URL %s, want it on 127.0.0.2", b.healthURL)
	}
	bAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(b.addr.Port))
	a := startTernd(t, func(c *config) {
		c.Alternates = []string{bAddr.String()}
		c.Limits.AllocationImbalancePercent = 50
		// B's health port, on A's address: replicas share their ports.
		c.Admin.HealthAddress = "127.0.0.1:" + hb.Port()
	})
	aAddr := a.addr.AddrPort()

	client := func() *turnclient.Client {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return turnclient.New(conn, aAddr, turnclient.Credentials{Username: testUser, Password: testPassword})
	}
	var held []*turnclient.Client
	for range 20 {
		c := client()
		if _, err := c.Allocate(0); err != nil {
			t.Fatal(err)
		}
		if c.Server() != aAddr {
			t.Fatalf("allocation %d on %v before A balanced, want A", len(held), c.Server())
		}
		held = append(held, c)
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		if !strings.Contains(a.out.String(), "above the replicas' mean") {
			return errors.New("A has not started redirecting for balance")
		}
		return nil
	})
	fresh := client()
	if _, err := fresh.Allocate(0); err != nil {
		t.Fatalf("Allocate at A above the mean: %v", err)
	}
	if fresh.Server() != bAddr {
		t.Fatalf("a new client allocated on %v, want B %v", fresh.Server(), bAddr)
	}
	if v, _ := a.metric(t, `tern_redirects_total{reason="imbalance"}`); v != 1 {
		t.Errorf(`A: tern_redirects_total{reason="imbalance"} = %v, want 1`, v)
	}
	// Still above the mean: a client that already holds a nonce (a signed
	// Allocate) is served where it is; the project's client signs its
	// Refresh, so refreshing an allocation on A works too.
	if err := held[0].Refresh(600); err != nil {
		t.Errorf("Refresh on A while it redirects: %v", err)
	}

	for _, c := range held {
		if err := c.Refresh(0); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		if !strings.Contains(a.out.String(), "no longer redirecting new clients for balance") {
			return errors.New("A still redirects for balance")
		}
		return nil
	})
	back := client()
	if _, err := back.Allocate(0); err != nil {
		t.Fatal(err)
	}
	if back.Server() != aAddr {
		t.Errorf("a new client allocated on %v after A's allocations ended, want A", back.Server())
	}
	_ = fresh.Refresh(0)
	_ = back.Refresh(0)
}
