package turn

import (
	"crypto/hmac"
	"crypto/md5"  //nolint:gosec // RFC 8489 §9.2.2 defines the long-term key as MD5.
	"crypto/sha1" //nolint:gosec // RFC 8489 §9.2 MESSAGE-INTEGRITY and the TURN REST API use HMAC-SHA1.
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"
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
