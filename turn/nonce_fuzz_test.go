package turn

import (
	"encoding/base64"
	"net/netip"
	"testing"
	"time"
)

// fuzzNonceMaker is a nonceMaker with a fixed key, so a committed seed holds a nonce it issued.
func fuzzNonceMaker() *nonceMaker {
	n := &nonceMaker{}
	for i := range n.key {
		n.key[i] = byte(i)
	}
	return n
}

// fuzzNonceNow is the time FuzzNonce checks nonces at.
var fuzzNonceNow = time.Unix(1_800_000_000, 0)

// FuzzNonce checks the NONCE a client sends back (RFC 8489 §9.2), the one part of a request
// the engine parses before it knows the password. A nonce is anything but invalid only if it
// is, byte for byte, one this maker issued to this client: no other client address and no
// other spelling of the same bytes is accepted, and it is valid from its issue time for the lifetime and expired
// after. Seeds: testdata/fuzz/FuzzNonce.
func FuzzNonce(f *testing.F) {
	n := fuzzNonceMaker()
	client := netip.MustParseAddr("192.0.2.1")
	f.Add(n.make(fuzzNonceNow.Add(-10*time.Second), client), client.AsSlice())
	const lifetime = 600 * time.Second
	f.Fuzz(func(t *testing.T, nonce string, ip []byte) {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		switch n.check(nonce, fuzzNonceNow, addr, lifetime) {
		case nonceInvalid:
			return
		case nonceExpired:
			// Issued by the maker, so the same checks hold; only the time differs.
		}
		raw, err := base64.RawURLEncoding.DecodeString(nonce)
		if err != nil || len(raw) != nonceRaw {
			t.Fatalf("valid nonce %q does not decode to %d bytes: %v", nonce, nonceRaw, err)
		}
		issued := nonceIssued(nonceTS(raw), fuzzNonceNow)
		if want := n.make(issued, addr); nonce != want {
			t.Fatalf("nonce %q accepted for %v, but the maker issues %q for that time", nonce, addr, want)
		}
		if st := n.check(nonce, issued, addr, lifetime); st != nonceValid {
			t.Fatalf("nonce %q is %d at its issue time %v", nonce, st, issued)
		}
		if st := n.check(nonce, issued.Add(lifetime), addr, lifetime); st != nonceExpired {
			t.Fatalf("nonce %q is %d a lifetime after its issue time %v, want expired", nonce, st, issued)
		}
		other := addr.As16()
		other[15] ^= 1
		if o := netip.AddrFrom16(other); n.check(nonce, issued, o.Unmap(), lifetime) != nonceInvalid {
			t.Fatalf("nonce %q issued to %v accepted for %v", nonce, addr, o.Unmap())
		}
	})
}
