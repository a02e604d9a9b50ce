package e2e

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench/turnclient"
)

// TestSIGTERMRedirects runs two ternd processes, A on 127.0.0.1 and B on
// 127.0.0.2, A's config naming B in its top-level alternates. A client of
// A's holds an allocation; A gets SIGTERM. A new client of A's is answered
// 300 Try Alternate and allocates on B (the project's own client follows
// ALTERNATE-SERVER) and relays there, while the first keeps relaying
// through A; when the first deletes its allocation (Refresh 0), A exits at
// once, with status 0. pion/turn's client, which does not follow the
// redirect, gets a failed Allocate.
func TestSIGTERMRedirects(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's drain and ALTERNATE-SERVER")
	}
	b := startTernd(t, func(c *config) {
		c.Listeners[0].Address, c.Relay.Address = "127.0.0.2", "127.0.0.2"
		// No interface carries 127.0.0.2 (lo has 127.0.0.1/8), which the
		// default offload (Auto) would attach to.
		c.Offload = map[string]any{"engine": "None"}
	})
	bAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(b.addr.Port))
	a := startTernd(t, func(c *config) { c.Alternates = []string{bAddr.String()} })
	aAddr := a.addr.AddrPort()
	peer := startEchoPeer(t, "127.0.0.1:0").addr.AddrPort()

	client := func() (*turnclient.Client, *net.UDPConn) {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return turnclient.New(conn, aAddr, turnclient.Credentials{Username: testUser, Password: testPassword}), conn
	}
	held, heldConn := client()
	if _, err := held.Allocate(0); err != nil {
		t.Fatalf("Allocate on A: %v", err)
	}
	if err := held.CreatePermission(peer); err != nil {
		t.Fatal(err)
	}
	if err := echoThrough(heldConn, aAddr, peer, 0, "before SIGTERM"); err != nil {
		t.Fatal(err)
	}

	a.signal(t, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for a.ready() == nil {
		if time.Now().After(deadline) {
			t.Fatal("A still ready 5 s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}

	fresh, freshConn := client()
	relayed, err := fresh.Allocate(0)
	if err != nil {
		t.Fatalf("Allocate at draining A: %v", err)
	}
	if fresh.Server() != bAddr || relayed.Addr() != bAddr.Addr() {
		t.Fatalf("allocated on %v (relayed %v), want the alternate %v", fresh.Server(), relayed, bAddr)
	}
	if err := fresh.CreatePermission(peer); err != nil {
		t.Fatal(err)
	}
	if err := echoThrough(freshConn, bAddr, peer, 0, "via B"); err != nil {
		t.Fatal(err)
	}
	if err := echoThrough(heldConn, aAddr, peer, 0, "still via A"); err != nil {
		t.Fatal(err)
	}
	// pion/turn's client does not follow ALTERNATE-SERVER: the 300 to its
	// first Allocate has no NONCE, and its Allocate fails (as on 508).
	if _, err := newPionClient(t, a, testUser, testPassword).Allocate(); err == nil {
		t.Error("pion/turn's Allocate at draining A succeeded, want it to fail on the 300")
	} else {
		t.Logf("pion/turn's Allocate at draining A: %v", err)
	}
	if v, _ := a.metric(t, `tern_redirects_total{reason="draining"}`); v != 2 {
		t.Fatalf(`A: tern_redirects_total{reason="draining"} = %v, want 2`, v)
	}
	if a.exited() {
		t.Fatal("A exited while it held an allocation")
	}

	if err := held.Refresh(0); err != nil {
		t.Fatal(err)
	}
	exited, err := a.waitExit(stopTimeout)
	if !exited {
		t.Fatalf("A still draining %v after its last allocation was deleted", stopTimeout)
	}
	if err != nil {
		t.Errorf("A's exit: %v, want status 0", err)
	}
	_ = fresh.Refresh(0)
}
