package turn

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"net/netip"
	"sync"
	"time"
)

// nonceMaker issues and checks NONCE values (RFC 8489 §9.2). A nonce is
// stateless: base64url of the issue time (the low 24 bits of its Unix
// seconds, 3 bytes) followed by an HMAC-SHA256 over the issue time and the
// client IP under a per-engine random key, truncated to 6 bytes (48 bits):
// 9 bytes, 12 characters. So it cannot be forged, is bound to the client
// IP (not the port: a NAT that moves a client to another port keeps its
// nonce valid), and expires.
//
// It is this short because every 401 carries one and a 401 is what a
// spoofed request is answered with (reflection): with the default realm
// the 401 to pion/turn's 36-byte first Allocate (REQUESTED-TRANSPORT and
// FINGERPRINT) is 72 bytes, 2× (docs/security.md). 48 bits still cannot be
// guessed: the key never leaves the process, so the only oracle is the
// engine itself, one request per guess, 2^47 of them on average (about
// 10^14 packets) for one nonce, which buys only the right to spend one
// address's failure budget until it expires. No RFC 8489 §9.2 "obMatJos2"
// nonce cookie is used: that prefix announces security features (password
// algorithms, username anonymity) Tern does not implement.
type nonceMaker struct {
	key  [32]byte
	macs sync.Pool // keyed hash.Hash values, reused: hmac.New allocates three objects
}

const (
	nonceTSLen  = 3 // bytes of issue time: Unix seconds modulo 2^24 (about 194 days)
	nonceMACLen = 6
	nonceRaw    = nonceTSLen + nonceMACLen
	nonceLen    = nonceRaw * 4 / 3 // base64 of a multiple of 3 bytes: no padding, no spare bits

	nonceTSMask = 1<<(8*nonceTSLen) - 1
	// maxNonceLifetime bounds the lifetime check reads: the issue time
	// wraps every 2^24 s, and a nonce is placed within 2^23 s of now.
	maxNonceLifetime = (1 << (8*nonceTSLen - 1)) * time.Second
)

// nonceEncoding is base64url without padding, strict: with 9 bytes there are no spare bits
// to accept other spellings of one nonce, and strict keeps it so should the length change.
var nonceEncoding = base64.RawURLEncoding.Strict()

func newNonceMaker() *nonceMaker {
	n := &nonceMaker{}
	if _, err := rand.Read(n.key[:]); err != nil {
		panic("turn: no randomness for nonce key: " + err.Error())
	}
	return n
}

// mac returns the truncated HMAC of the 24-bit issue time ts and client.
func (n *nonceMaker) mac(ts uint32, client netip.Addr) (out [nonceMACLen]byte) {
	m, _ := n.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, n.key[:])
	}
	var b [nonceTSLen + 16]byte
	putNonceTS(b[:], ts)
	a := client.Unmap().As16()
	copy(b[nonceTSLen:], a[:])
	m.Reset()
	m.Write(b[:])
	var sum [sha256.Size]byte
	copy(out[:], m.Sum(sum[:0]))
	n.macs.Put(m)
	return out
}

func putNonceTS(b []byte, ts uint32) { b[0], b[1], b[2] = byte(ts>>16), byte(ts>>8), byte(ts) }

func nonceTS(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// nonceIssued returns the Unix second nearest to now (within 2^23 s either
// way) whose low 24 bits are ts: when the nonce carrying ts was issued.
func nonceIssued(ts uint32, now time.Time) time.Time {
	n := now.Unix()
	d := int64((ts - uint32(n)) & nonceTSMask) // seconds ahead of now, modulo 2^24
	if d >= 1<<(8*nonceTSLen-1) {
		d -= 1 << (8 * nonceTSLen)
	}
	return time.Unix(n+d, 0)
}

// make returns a nonce for client issued at now.
func (n *nonceMaker) make(now time.Time, client netip.Addr) string {
	ts := uint32(now.Unix()) & nonceTSMask
	var b [nonceRaw]byte
	putNonceTS(b[:], ts)
	mac := n.mac(ts, client)
	copy(b[nonceTSLen:], mac[:])
	return nonceEncoding.EncodeToString(b[:])
}

// nonceStatus is what check found a NONCE to be.
type nonceStatus uint8

const (
	// nonceValid: issued by this maker to this client within the lifetime.
	nonceValid nonceStatus = iota
	// nonceExpired: issued by this maker to this client, but longer ago than the lifetime
	// (or, after the clock went back, later than now). Every client sends one of these once
	// per lifetime, and its 438 is how it learns the next (RFC 8489 §9.2.4).
	nonceExpired
	// nonceInvalid: not a nonce this maker issued to this client: forged, malformed, or
	// issued to another address.
	nonceInvalid
)

// check returns the status of nonce for client at now. lifetime is capped
// at maxNonceLifetime (about 97 days).
func (n *nonceMaker) check(nonce string, now time.Time, client netip.Addr, lifetime time.Duration) nonceStatus {
	var b [nonceRaw]byte
	if len(nonce) != nonceLen {
		return nonceInvalid
	}
	if k, err := nonceEncoding.Decode(b[:], []byte(nonce)); err != nil || k != nonceRaw {
		return nonceInvalid
	}
	ts := nonceTS(b[:])
	if mac := n.mac(ts, client); !hmac.Equal(b[nonceTSLen:], mac[:]) {
		return nonceInvalid
	}
	issued := nonceIssued(ts, now)
	if now.Before(issued.Add(-time.Second)) || now.Sub(issued) >= min(lifetime, maxNonceLifetime) {
		return nonceExpired
	}
	return nonceValid
}
