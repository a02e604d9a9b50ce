package turn

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseEphemeralUsername(t *testing.T) {
	for _, tc := range []struct {
		username string
		expiry   int64
		user     string
		ok       bool
	}{
		// The draft's order, as STUNner's auth service and coturn's -W mint it.
		{"1700000000:alice", 1700000000, "alice", true},
		{"1700000000", 1700000000, "", true},
		{"1700000000:", 1700000000, "", true},
		{"1700000000:alice:bob", 1700000000, "alice:bob", true},
		{"0001700000000:alice", 1700000000, "alice", true},
		// The other order.
		{"alice:1700000000", 1700000000, "alice", true},
		{"alice:bob:1700000000", 1700000000, "alice:bob", true},
		{":1700000000", 1700000000, "", true},
		// Both fields numeric: the first is the expiry.
		{"1700000000:1800000000", 1700000000, "1800000000", true},
		// The largest expiry that fits; one more does not.
		{"9223372036854775807:x", 9223372036854775807, "x", true},
		{"9223372036854775808:x", 0, "", false},
		{"x:99999999999999999999", 0, "", false},
		// No number where one belongs.
		{"", 0, "", false},
		{":", 0, "", false},
		{"alice", 0, "", false},
		{"alice:bob", 0, "", false},
		{"alice:1700000000:bob", 0, "", false}, // a number in the middle is not an expiry
		{"+1700000000:alice", 0, "", false},
		{"-1:alice", 0, "", false},
		{"alice:-1", 0, "", false},
		{" 1700000000:alice", 0, "", false},
		{"1700000000 :alice", 0, "", false},
		{"1.7e9:alice", 0, "", false},
		{"١٢٣:alice", 0, "", false}, // Arabic-Indic digits are not ASCII digits
	} {
		expiry, user, ok := ParseEphemeralUsername(tc.username)
		if expiry != tc.expiry || user != tc.user || ok != tc.ok {
			t.Errorf("ParseEphemeralUsername(%q) = %d, %q, %t; want %d, %q, %t",
				tc.username, expiry, user, ok, tc.expiry, tc.user, tc.ok)
		}
	}
}

// TestEphemeralAuthKey checks EphemeralAuth on both username orders: the key is the long-term
// key of the REST password until the expiry second has passed, and none after it.
func TestEphemeralAuthKey(t *testing.T) {
	const secret, realm = "s3cr3t", "stunner.l7mp.io"
	a := EphemeralAuth{Secret: secret}
	expiry := t0.Add(time.Hour)
	exp := strconv.FormatInt(expiry.Unix(), 10)
	for _, username := range []string{exp + ":alice", "alice:" + exp, exp} {
		want := string(LongTermKey(username, realm, EphemeralPassword(secret, username)))
		for _, tc := range []struct {
			now time.Time
			ok  bool
		}{
			{t0, true},
			{expiry, true}, // valid through its expiry second
			{expiry.Add(time.Second), false},
		} {
			key, ok := a.Key(username, realm, tc.now)
			if ok != tc.ok || (ok && string(key) != want) {
				t.Errorf("Key(%q) at expiry%+v: ok %t, want %t (key right: %t)", username, tc.now.Sub(expiry), ok, tc.ok, string(key) == want)
			}
		}
	}
	for _, username := range []string{"alice", "alice:bob", ""} {
		if _, ok := a.Key(username, realm, t0); ok {
			t.Errorf("Key(%q) accepted a username without an expiry", username)
		}
	}
}

// usernameSeeds are the seed corpus of FuzzParseEphemeralUsername: each order, the
// digits-only form, both numeric, a user with colons, an overflowing number and no number.
func usernameSeeds() []string {
	return []string{
		"1700000000:alice",
		"alice:1700000000",
		"1700000000",
		"1700000000:1800000000",
		"1700000000:alice:bob",
		"x:99999999999999999999",
		"alice:bob",
		"",
	}
}

// FuzzParseEphemeralUsername checks ParseEphemeralUsername against its definition on arbitrary
// usernames: it never panics; when the first colon-separated field is a number of 1-19 ASCII
// digits, that is the expiry and the rest the user; else when the last field is, that is the
// expiry and what precedes it the user; else the username is refused.
func FuzzParseEphemeralUsername(f *testing.F) {
	for _, s := range usernameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, username string) {
		expiry, user, ok := ParseEphemeralUsername(username)
		number := func(s string) (int64, bool) {
			if len(s) == 0 || len(s) > 19 || strings.Trim(s, "0123456789") != "" {
				return 0, false
			}
			n, err := strconv.ParseInt(s, 10, 64)
			return n, err == nil
		}
		fields := strings.Split(username, ":")
		var wantExpiry int64
		var wantUser string
		wantOK := true
		if n, isNum := number(fields[0]); isNum {
			wantExpiry, wantUser = n, strings.Join(fields[1:], ":")
		} else if n, isNum := number(fields[len(fields)-1]); isNum && len(fields) > 1 {
			wantExpiry, wantUser = n, strings.Join(fields[:len(fields)-1], ":")
		} else {
			wantOK = false
		}
		if expiry != wantExpiry || user != wantUser || ok != wantOK {
			t.Fatalf("ParseEphemeralUsername(%q) = %d, %q, %t; want %d, %q, %t",
				username, expiry, user, ok, wantExpiry, wantUser, wantOK)
		}
	})
}
