package turn

import (
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

func TestQuotaUserKey(t *testing.T) {
	for _, tc := range []struct{ username, want string }{
		{"1700003600:alice", "alice"},  // the draft's order, as the auth service mints it
		{"1700090000:alice", "alice"},  // another credential of the same user
		{"alice:1700003600", "alice"},  // <user>:<expiry>
		{"1700003600:a:b", "a:b"},      // a user id with a colon
		{"1700003600:", "1700003600:"}, // no user id: the credential counts by itself
		{"1700003600", "1700003600"},   // a bare expiry
		{"user-1", "user-1"},           // a static username
		{"", ""},
		{"99999999999999999999:x", "99999999999999999999:x"}, // no expiry that fits an int64
	} {
		if got := quotaUserKey(tc.username); got != tc.want {
			t.Errorf("quotaUserKey(%q) = %q, want %q", tc.username, got, tc.want)
		}
	}
}

// TestQuotaCountsBaseUser: AllocationsPerUser counts the user id of TURN
// REST usernames, so two credentials minted for alice with different
// expiries share her quota, while bob and anonymous credentials ("<expiry>:")
// each have their own; a freed slot is given back to the user.
func TestQuotaCountsBaseUser(t *testing.T) {
	const secret = "s"
	f := newFixture(t, func(c *Config) {
		c.Auth = EphemeralAuth{Secret: secret}
		c.AllocationsPerUser = 1
	})
	at := func(user string, expiry time.Duration, addr string) *client {
		name := EphemeralUsername(user, t0.Add(expiry))
		return f.clientAt(name, EphemeralPassword(secret, name), addr)
	}
	alice1 := at("alice", time.Hour, "203.0.113.1:1")
	if m := alice1.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("alice's first credential: code %d", code(m))
	}
	alice2 := at("alice", 2*time.Hour, "203.0.113.2:1")
	if m := alice2.do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("alice's second credential: code %d, want 486 (one quota for alice)", code(m))
	}
	for _, c := range []*client{
		at("bob", time.Hour, "203.0.113.3:1"),
		at("", time.Hour, "203.0.113.4:1"),
		at("", 2*time.Hour, "203.0.113.5:1"),
	} {
		if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
			t.Errorf("%s: code %d, want a quota of its own", c.user, code(m))
		}
	}
	if m := alice1.do(stun.MethodRefresh, lifetimeSetter(0)); code(m) != 0 {
		t.Fatalf("delete alice's allocation: code %d", code(m))
	}
	if m := alice2.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("alice's second credential after the first's allocation ended: code %d", code(m))
	}
}
