package turn

import (
	"net/netip"
	"testing"
	"time"
)

// TestNonceLifetime: a nonce is valid from its issue time (and up to a
// second before it, for a worker whose clock read ran ahead) for the
// lifetime, expired after, including across the wrap of its 24-bit issue
// time, and invalid for any other client IP or once altered.
func TestNonceLifetime(t *testing.T) {
	n := newNonceMaker()
	client := netip.MustParseAddr("2001:db8::1")
	const lifetime = 600 * time.Second
	// wrap is a moment 2 s after the issue time's low 24 bits wrap to 0.
	wrap := time.Unix(200<<24+2, 0)
	for _, tc := range []struct {
		name        string
		issued, now time.Time
		ip          netip.Addr
		want        nonceStatus
	}{
		{"at issue", t0, t0, client, nonceValid},
		{"just before expiry", t0, t0.Add(lifetime - time.Millisecond), client, nonceValid},
		{"at expiry", t0, t0.Add(lifetime), client, nonceExpired},
		{"a day later", t0, t0.Add(24 * time.Hour), client, nonceExpired},
		{"issued 1 s ahead", t0.Add(time.Second), t0, client, nonceValid},
		{"issued 2 s ahead", t0.Add(2 * time.Second), t0, client, nonceExpired},
		{"across the wrap", wrap.Add(-5 * time.Second), wrap, client, nonceValid},
		{"across the wrap, expired", wrap.Add(-lifetime), wrap, client, nonceExpired},
		{"other client", t0, t0, netip.MustParseAddr("2001:db8::2"), nonceInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nonce := n.make(tc.issued, client)
			if len(nonce) != nonceLen || nonceLen != 12 {
				t.Fatalf("nonce %q is %d characters, want 12", nonce, len(nonce))
			}
			if got := n.check(nonce, tc.now, tc.ip, lifetime); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
		})
	}
	nonce := []byte(n.make(t0, client))
	for i := range nonce {
		c := append([]byte(nil), nonce...)
		c[i] ^= 1
		if n.check(string(c), t0, client, lifetime) != nonceInvalid {
			t.Errorf("nonce %q with character %d changed to %q accepted", nonce, i, c)
		}
	}
}
