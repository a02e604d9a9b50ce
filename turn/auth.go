package turn

import (
	"crypto/hmac"
	"crypto/md5" //nolint:gosec // RFC 8489 §9.2.2 defines the long-term key as MD5.
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 8489 §9.2 MESSAGE-INTEGRITY and the TURN REST API use HMAC-SHA1.
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Authenticator finds the long-term credential key of a user (RFC 8489
// §9.2.2): MD5(username ":" realm ":" password). It is called once per
// authenticated request, never per relayed packet.
type Authenticator interface {
	// Key returns the key for username in realm at time now, or false when
	// the user is unknown or the credential has expired.
	Key(username, realm string, now time.Time) ([]byte, bool)
}

// LongTermKey returns MD5(username ":" realm ":" password), the key of RFC
// 8489 §9.2.2 (16 bytes).
func LongTermKey(username, realm, password string) []byte {
	h := md5.New() //nolint:gosec
	h.Write([]byte(username + ":" + realm + ":" + password))
	return h.Sum(nil)
}

// StaticAuth is a single static username and password (STUNner's "static"
// auth type; alias "plaintext").
type StaticAuth struct {
	Username string
	Password string
}

// Key implements Authenticator.
func (s StaticAuth) Key(username, realm string, _ time.Time) ([]byte, bool) {
	if subtle.ConstantTimeCompare([]byte(username), []byte(s.Username)) != 1 {
		return nil, false
	}
	return LongTermKey(username, realm, s.Password), true
}

// EphemeralAuth is the TURN REST API scheme (STUNner's "ephemeral" auth type;
// aliases "longterm", "timewindowed"): the username carries an expiry in
// Unix seconds, as "<expiry>:<user>", "<user>:<expiry>" or just "<expiry>"
// (ParseEphemeralUsername), and the password is base64(HMAC-SHA1(Secret,
// username)). A username whose expiry has passed is refused, so the request
// gets 401.
type EphemeralAuth struct {
	Secret string
}

// Key implements Authenticator.
func (e EphemeralAuth) Key(username, realm string, now time.Time) ([]byte, bool) {
	expiry, _, ok := ParseEphemeralUsername(username)
	if !ok || expiry < now.Unix() {
		return nil, false
	}
	return LongTermKey(username, realm, EphemeralPassword(e.Secret, username)), true
}

// ParseEphemeralUsername splits a TURN REST API username into its expiry
// (Unix seconds) and user id. Issuers write the two parts in either order:
// "<expiry>:<user>" is the draft's (draft-uberti-behave-turn-rest-00 §2.2),
// what STUNner's auth service and coturn's tools mint; "<user>:<expiry>" is
// what some adopters' own issuers mint, and STUNner's dataplane accepts it
// too. The expiry is the first colon-separated field when that is all ASCII
// digits, else the last field when that is: "123:456" is expiry 123 for user
// "456", and a user id may itself hold colons. A username of digits alone
// is an expiry with an empty user. ok is false when neither field is a
// number of 1-19 digits that fits in an int64; the caller decides whether
// the expiry has passed.
func ParseEphemeralUsername(username string) (expiry int64, user string, ok bool) {
	first, rest, found := strings.Cut(username, ":")
	if n, ok := unixSeconds(first); ok {
		return n, rest, true
	}
	if !found {
		return 0, "", false
	}
	i := strings.LastIndexByte(username, ':')
	if n, ok := unixSeconds(username[i+1:]); ok {
		return n, username[:i], true
	}
	return 0, "", false
}

// unixSeconds parses s when it is 1-19 ASCII digits (no sign, no space)
// that fit in an int64.
func unixSeconds(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// EphemeralPassword returns base64(HMAC-SHA1(secret, username)), the TURN
// REST API password for username.
func EphemeralPassword(secret, username string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// EphemeralUsername returns "<expiry-unix-seconds>:<user>" for a credential
// valid until expiry.
func EphemeralUsername(user string, expiry time.Time) string {
	return strconv.FormatInt(expiry.Unix(), 10) + ":" + user
}

// nonceMaker issues and checks NONCE values (RFC 8489 §9.2). A nonce is
// base64url of the issue time (4 bytes, Unix seconds) followed by an HMAC-
// SHA256 over the issue time and the client IP under a per-process random
// key, truncated to 12 bytes: 22 characters, so it cannot be forged, is
// bound to the client, and expires. It is short because every 401 carries
// one, and a 401 is what a spoofed request is answered with.
type nonceMaker struct {
	key  [32]byte
	macs sync.Pool // keyed hash.Hash values, reused: hmac.New allocates three objects
}

const (
	nonceMACLen = 12
	nonceRaw    = 4 + nonceMACLen
	nonceLen    = (nonceRaw*8 + 5) / 6 // base64 without padding
)

// nonceEncoding is base64url without padding, strict: 22 characters carry 132 bits for the
// nonce's 128, and a lenient decoder ignores the last character's 4 spare bits, which would
// accept 16 spellings of every nonce. Strict accepts only the one the maker issued.
var nonceEncoding = base64.RawURLEncoding.Strict()

func newNonceMaker() *nonceMaker {
	n := &nonceMaker{}
	if _, err := rand.Read(n.key[:]); err != nil {
		panic("turn: no randomness for nonce key: " + err.Error())
	}
	return n
}

func (n *nonceMaker) mac(ts uint32, client netip.Addr) (out [nonceMACLen]byte) {
	m, _ := n.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, n.key[:])
	}
	var b [4 + 16]byte
	binary.BigEndian.PutUint32(b[:4], ts)
	a := client.Unmap().As16()
	copy(b[4:], a[:])
	m.Reset()
	m.Write(b[:])
	var sum [sha256.Size]byte
	copy(out[:], m.Sum(sum[:0]))
	n.macs.Put(m)
	return out
}

func (n *nonceMaker) make(now time.Time, client netip.Addr) string {
	ts := uint32(now.Unix())
	var b [nonceRaw]byte
	binary.BigEndian.PutUint32(b[:4], ts)
	mac := n.mac(ts, client)
	copy(b[4:], mac[:])
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

// check returns the status of nonce for client at now.
func (n *nonceMaker) check(nonce string, now time.Time, client netip.Addr, lifetime time.Duration) nonceStatus {
	var b [nonceRaw]byte
	if len(nonce) != nonceLen {
		return nonceInvalid
	}
	if k, err := nonceEncoding.Decode(b[:], []byte(nonce)); err != nil || k != nonceRaw {
		return nonceInvalid
	}
	ts := binary.BigEndian.Uint32(b[:4])
	if mac := n.mac(ts, client); !hmac.Equal(b[4:], mac[:]) {
		return nonceInvalid
	}
	issued := time.Unix(int64(ts), 0)
	if now.Before(issued.Add(-time.Second)) || now.Sub(issued) >= lifetime {
		return nonceExpired
	}
	return nonceValid
}
