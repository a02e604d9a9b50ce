package turn

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

// TestSpoofedSourceCannotLockOutVictim replays issue 22's attack on the
// engine: packets forged with a victim's source address, carrying wrong
// passwords under nonces that were not issued to the victim (a forged one,
// a malformed one, one issued to the attacker's own address), sent 12 at
// once and then 20 before each of the victim's requests. Before, each took
// a token from the victim's address, and the victim's signed Refresh,
// CreatePermission over TCP and new Allocates were dropped as throttled.
// Now every forged request gets its 438 with a fresh nonce and costs the
// address nothing, and every one of the victim's requests succeeds.
func TestSpoofedSourceCannotLockOutVictim(t *testing.T) {
	f := newFixture(t, throttled)
	victimIP := clientAddr.Addr()
	udp := f.clientAt("user", "pass", clientAddr.String())
	tcp := f.clientAt("user", "pass", netip.AddrPortFrom(victimIP, 50001).String())
	tcp.ft.Proto = ProtoTCP
	for _, c := range []*client{udp, tcp} {
		if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
			t.Fatalf("victim's Allocate before the attack: code %d", code(m))
		}
	}
	// The attacker's own nonce, fetched from its own address.
	attacker := f.clientAt("user", "wrong", "198.18.0.1:4000")
	attacker.learnNonce(f.send(attacker.ft, raw(t, stun.MethodAllocate, transportUDP())))
	nonces := []string{attacker.nonce, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"[:nonceLen], "not-a-nonce", ""}
	var r Result
	forged := 0
	forge := func(n int) {
		for range n {
			nonce := nonces[forged%len(nonces)]
			forged++
			for _, ft := range []FiveTuple{udp.ft, tcp.ft} {
				spoof := &client{f: f, ft: ft, user: "user", pass: "wrong", nonce: nonce}
				f.e.HandleClient(testListener{}, ft, spoof.signed(stun.MethodRefresh, lifetimeSetter(600)), &r)
				if r.Kind != Reply {
					t.Fatalf("forged request %d: kind %d drop %v, want a 438 answer", forged, r.Kind, r.Drop)
				}
			}
		}
	}
	forge(12)
	for i := range 7 {
		forge(20)
		if m := udp.do(stun.MethodRefresh, lifetimeSetter(600)); code(m) != 0 {
			t.Fatalf("round %d: victim's Refresh: code %d", i, code(m))
		}
		forge(20)
		if m := tcp.do(stun.MethodCreatePermission, peerAttr(peerAddr)); code(m) != 0 {
			t.Fatalf("round %d: victim's TCP CreatePermission: code %d", i, code(m))
		}
		forge(20)
		fresh := f.clientAt("user", "pass", netip.AddrPortFrom(victimIP, uint16(51000+i)).String())
		fresh.nonce = udp.nonce // a nonce is per address, so the victim's others' do
		if m := fresh.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
			t.Fatalf("round %d: new Allocate from the victim's address: code %d", i, code(m))
		}
	}
	if n := f.e.Refused(RefusedThrottled); n != 0 {
		t.Errorf("%d requests throttled", n)
	}
	t.Logf("%d forged requests (%d per 5-tuple) aimed at the victim; 21 of its signed requests succeeded", 2*forged, forged)

	// The attacker's own wrong-password flood, under the nonce it holds,
	// is still throttled at its own address.
	dropped := 0
	for range 50 {
		f.e.HandleClient(testListener{}, attacker.ft, attacker.signed(stun.MethodAllocate, transportUDP()), &r)
		if r.Kind == Drop && r.Drop == DropThrottled {
			dropped++
		}
	}
	if dropped != 40 {
		t.Errorf("attacker's own flood: %d of 50 dropped, want 40 (burst 10)", dropped)
	}
}
