package e2e

import (
	"testing"
	"time"

	"github.com/pion/stun/v3"
)

// TestSTUNMode runs ternd with stunMode and no credentials (STUNner's
// GatewayConfig stunMode makes them optional): a plain STUN client's
// Binding gets the client's address back, pion/turn's Allocate fails at
// once, and every TURN request, with or without credentials, gets 403.
func TestSTUNMode(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn's STUN-only mode is not configured by these tests")
	}
	s := startTernd(t, func(c *config) {
		c.STUNMode = true
		c.Auth = auth{Type: "static", Realm: testRealm}
	})
	if err := stunBinding(s.addr, 2*time.Second); err != nil {
		t.Fatalf("STUN Binding: %v", err)
	}
	c := newPionClient(t, s, testUser, testPassword)
	mapped, err := c.SendBindingRequest()
	if err != nil {
		t.Fatalf("pion STUN Binding: %v", err)
	}
	if mapped.String() != c.conn.LocalAddr().String() {
		t.Errorf("XOR-MAPPED-ADDRESS %v, want the client's %v", mapped, c.conn.LocalAddr())
	}
	if relay, err := c.Allocate(); err == nil {
		relay.Close()
		t.Fatal("pion Allocate succeeded in STUN mode")
	}
	echo := startEchoPeer(t, "127.0.0.1:0")
	for _, tc := range []struct {
		method stun.Method
		attrs  []stun.Setter
	}{
		{stun.MethodAllocate, []stun.Setter{requestedTransportUDP}},
		{stun.MethodRefresh, []stun.Setter{lifetimeAttr(600)}},
		{stun.MethodCreatePermission, []stun.Setter{peerAddress(echo.addr)}},
		{stun.MethodChannelBind, []stun.Setter{channelNumberAttr(0x4000), peerAddress(echo.addr)}},
	} {
		if m := c.transact(t, tc.method, tc.attrs...); errorCode(m) != 403 {
			t.Errorf("%v in STUN mode: error %d, want 403", tc.method, errorCode(m))
		}
	}
	if n, _ := echo.received(); n != 0 {
		t.Errorf("the peer received %d packets from a STUN-only server", n)
	}
}

// channelNumberAttr is CHANNEL-NUMBER n (RFC 8656 §18.1).
func channelNumberAttr(n uint16) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{byte(n >> 8), byte(n), 0, 0}}
}
