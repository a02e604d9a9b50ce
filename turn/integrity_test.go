package turn

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

// signedThenAppended builds a request signed by c with attrs, then appends
// after MESSAGE-INTEGRITY the attributes an on-path attacker would add
// without the key, and a FINGERPRINT over the whole (it is unkeyed, so the
// attacker can recompute it).
func (c *client) signedThenAppended(method stun.Method, attrs []stun.Setter, appended ...stun.Setter) []byte {
	s := append([]stun.Setter{stun.TransactionID, stun.NewType(method, stun.ClassRequest)}, attrs...)
	s = append(s, stun.NewUsername(c.user), stun.NewRealm(testRealm), stun.NewNonce(c.nonce),
		stun.NewLongTermIntegrity(c.user, testRealm, c.pass))
	s = append(append(s, appended...), stun.Fingerprint)
	m, err := stun.Build(s...)
	if err != nil {
		c.f.t.Fatal(err)
	}
	return m.Raw
}

// TestAttributesAfterIntegrityAreIgnored: RFC 8489 §14.5, a server ignores
// every attribute after MESSAGE-INTEGRITY except MESSAGE-INTEGRITY-SHA256
// and FINGERPRINT, since none of them is covered by the HMAC.
func TestAttributesAfterIntegrityAreIgnored(t *testing.T) {
	t.Run("LIFETIME=0 appended to a Refresh", func(t *testing.T) {
		f, c, _ := allocated(t)
		m := f.send(c.ft, c.signedThenAppended(stun.MethodRefresh, nil, lifetimeSetter(0)))
		if code(m) != 0 || lifetimeOf(t, m) != 600 {
			t.Fatalf("code %d lifetime %d, want a plain refresh to 600", code(m), lifetimeOf(t, m))
		}
		if f.e.Allocations() != 1 || f.relays.relays[0].closed {
			t.Fatal("an unsigned LIFETIME=0 deleted the allocation")
		}
	})
	t.Run("CHANNEL-NUMBER appended to a ChannelBind", func(t *testing.T) {
		f, c, a := allocated(t)
		m := f.send(c.ft, c.signedThenAppended(stun.MethodChannelBind,
			[]stun.Setter{peerAttr(peerAddr)}, channelNumber(0x4001)))
		if code(m) != 400 {
			t.Fatalf("code %d, want 400 (no signed CHANNEL-NUMBER)", code(m))
		}
		if a.channelByNumber(0x4001, f.e.now()) != nil {
			t.Fatal("an unsigned CHANNEL-NUMBER was bound")
		}
	})
	t.Run("XOR-PEER-ADDRESS appended to a ChannelBind", func(t *testing.T) {
		f, c, a := allocated(t)
		m := f.send(c.ft, c.signedThenAppended(stun.MethodChannelBind,
			[]stun.Setter{channelNumber(0x4001)}, peerAttr(peerAddr)))
		if code(m) != 400 || a.channelByNumber(0x4001, f.e.now()) != nil {
			t.Fatalf("code %d, want 400 and no channel", code(m))
		}
	})
	t.Run("XOR-PEER-ADDRESS appended to a CreatePermission", func(t *testing.T) {
		f, c, a := allocated(t)
		other := netip.MustParseAddrPort("198.51.100.77:1")
		m := f.send(c.ft, c.signedThenAppended(stun.MethodCreatePermission,
			[]stun.Setter{peerAttr(peerAddr)}, peerAttr(other)))
		if code(m) != 0 {
			t.Fatalf("code %d", code(m))
		}
		now := f.e.now()
		if !a.hasPermission(peerAddr.Addr(), now) || a.hasPermission(other.Addr(), now) {
			t.Fatalf("signed peer: %v, appended peer: %v; want only the signed one",
				a.hasPermission(peerAddr.Addr(), now), a.hasPermission(other.Addr(), now))
		}
	})
	t.Run("unknown comprehension-required attribute appended", func(t *testing.T) {
		f, c, _ := allocated(t)
		m := f.send(c.ft, c.signedThenAppended(stun.MethodRefresh, nil, stun.RawAttribute{Type: 0x7777, Value: []byte{1, 2, 3, 4}}))
		if code(m) != 0 {
			t.Fatalf("code %d, want success: an attribute after MESSAGE-INTEGRITY is ignored, not refused", code(m))
		}
	})
	t.Run("REQUESTED-TRANSPORT appended to an Allocate", func(t *testing.T) {
		f := newFixture(t)
		c := f.client("user", "pass")
		c.learnNonce(f.send(c.ft, raw(t, stun.MethodAllocate)))
		m := f.send(c.ft, c.signedThenAppended(stun.MethodAllocate, nil, transportUDP()))
		if code(m) != 400 || f.e.Allocations() != 0 {
			t.Fatalf("code %d, allocations %d; want 400 and none", code(m), f.e.Allocations())
		}
	})
}
