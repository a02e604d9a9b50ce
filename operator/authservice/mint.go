package authservice

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the TURN REST API defines the password as HMAC-SHA1.
	"encoding/base64"
	"strconv"
	"time"
)

// Mint returns a TURN REST API credential (draft-uberti-behave-turn-rest-00
// §2.2) for user, valid until expiry: the username "<expiry>:<user>", with
// expiry in Unix seconds (truncated), and the password
// base64(HMAC-SHA1(secret, username)), standard encoding with padding. The
// username ends in ":" when user is empty, as STUNner's auth service writes
// it. ternd (turn.EphemeralAuth) accepts it until the expiry second has
// passed.
func Mint(secret, user string, expiry time.Time) (username, password string) {
	username = strconv.FormatInt(expiry.Unix(), 10) + ":" + user
	return username, Password(secret, username)
}

// Password returns base64(HMAC-SHA1(secret, username)), the TURN REST API
// password of username, whichever order its expiry and user are in.
func Password(secret, username string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
