package dataplane

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

// channelBind sends a signed ChannelBind of ch to peer over c (which has
// authenticated already) and returns the error code, 0 on success.
func channelBind(c *rawClient, ch uint16, peer netip.AddrPort) int {
	c.t.Helper()
	m := stun.MustBuild(stun.TransactionID, stun.NewType(stun.MethodChannelBind, stun.ClassRequest),
		stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{byte(ch >> 8), byte(ch), 0, 0}},
		xorPeer{stun.XORMappedAddress{IP: peer.Addr().AsSlice(), Port: int(peer.Port())}},
		stun.NewUsername(c.user), stun.NewRealm(c.realm), stun.NewNonce(c.nonce),
		stun.NewLongTermIntegrity(c.user, c.realm, c.pass), stun.Fingerprint)
	if _, err := c.conn.Write(m.Raw); err != nil {
		c.t.Fatal(err)
	}
	resp := &stun.Message{Raw: append([]byte(nil), c.read()...)}
	if err := resp.Decode(); err != nil {
		c.t.Fatal(err)
	}
	if resp.Type.Class == stun.ClassSuccessResponse {
		return 0
	}
	var code stun.ErrorCodeAttribute
	_ = code.GetFrom(resp)
	return int(code.Code)
}

// TestRelayToOwnListenerRefused is issue 22's item 9: under a cluster of
// 127.0.0.0/8, which opens loopback, an allocation may still not relay to
// ternd's own UDP listener. A ChannelBind to the listener's port on
// 127.0.0.1, on another loopback address and on ::ffff:127.0.0.1 gets 403,
// while a permission for 127.0.0.1 (per IP) and a channel to a peer on
// another loopback port are granted and relay.
func TestRelayToOwnListenerRefused(t *testing.T) {
	cfg := testConfig(t, 27100, 27109)
	cfg.Clusters[0].Endpoints = []string{"127.0.0.0/8"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	startWith(t, cfg)
	lc := cfg.Listeners[0]
	peer := startEchoPeer(t, "127.0.0.1")
	c := dialRaw(t, lc, "user", "pass")
	c.allocate(0x4001, peer.addr().AddrPort())

	if code := permit(c, netip.MustParseAddr("127.0.0.1")); code != 0 {
		t.Errorf("permission for 127.0.0.1: error %d", code)
	}
	port := uint16(lc.Port)
	for i, own := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port),
		netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), port),
	} {
		if code := channelBind(c, 0x4100+uint16(i), own); code != int(stun.CodeForbidden) {
			t.Errorf("ChannelBind to ternd's own listener %v: %d, want 403", own, code)
		}
	}
	payload := []byte("relayed to a loopback peer")
	if _, err := c.conn.Write(channelData(0x4001, payload, false)); err != nil {
		t.Fatal(err)
	}
	if m := c.read(); string(m[4:4+len(payload)]) != string(payload) {
		t.Errorf("echo through the loopback peer: % x", m)
	}
}
