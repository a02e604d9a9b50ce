package turn

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

// usersAuth is an Authenticator of fixed users and passwords.
type usersAuth map[string]string

func (u usersAuth) Key(username, realm string, _ time.Time) ([]byte, bool) {
	p, ok := u[username]
	if !ok {
		return nil, false
	}
	return LongTermKey(username, realm, p), true
}

// guessers returns n clients at distinct addresses of 198.18.0.0/15, each
// holding a nonce issued to its own address (so its failures count).
func guessers(f *fixture, n int, pass string) []*client {
	var cs []*client
	for i := range n {
		c := f.clientAt("alice", pass, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 4000).String())
		c.learnNonce(f.send(c.ft, raw(f.t, stun.MethodAllocate, transportUDP())))
		cs = append(cs, c)
	}
	return cs
}

// TestUserBudgetBoundsRotatingAddresses: 250 addresses, each with a nonce
// of its own, guess alice's password 13 times each (3,250 guesses) at one
// instant. Per address alone they would get 2,500 answers (burst 10
// each); alice's budget (10 × the per-address burst) answers 100, then
// one guess from each address that has not failed yet (240), and drops
// the rest unchecked. Bob, another user, authenticates from a new address
// meanwhile; alice's client that authenticated before the attack keeps
// refreshing and allocating; a new client of alice's, from an address
// that has not failed, gets in at once.
func TestUserBudgetBoundsRotatingAddresses(t *testing.T) {
	f := newFixture(t, throttled, func(c *Config) { c.Auth = usersAuth{"alice": "a-pass", "bob": "b-pass"} })
	before := f.clientAt("alice", "a-pass", "203.0.113.50:1000")
	if m := before.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("alice before the attack: code %d", code(m))
	}
	answered, dropped := 0, 0
	var r Result
	for _, g := range guessers(f, 250, "guess") {
		for range 13 {
			f.e.HandleClient(testListener{}, g.ft, g.signed(stun.MethodAllocate, transportUDP()), &r)
			switch {
			case r.Kind == Reply:
				answered++
			case r.Drop == DropThrottled:
				dropped++
			}
		}
	}
	if want := 10*10 + 240; answered != want || dropped != 250*13-want {
		t.Fatalf("%d guesses answered, %d dropped; want %d answered, the rest dropped", answered, dropped, want)
	}
	t.Logf("250 addresses x 13 guesses at one username: %d answered, %d dropped", answered, dropped)
	if m := f.clientAt("bob", "b-pass", "203.0.113.60:1000").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("bob during the attack: code %d", code(m))
	}
	if m := before.do(stun.MethodRefresh, lifetimeSetter(600)); code(m) != 0 {
		t.Fatalf("alice's allocation from before the attack, Refresh: code %d", code(m))
	}
	second := f.clientAt("alice", "a-pass", "203.0.113.50:1001")
	second.nonce = before.nonce
	if m := second.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("alice's second Allocate from her trusted address: code %d", code(m))
	}
	if m := f.clientAt("alice", "a-pass", "203.0.113.70:1000").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("new alice client during the attack: code %d", code(m))
	}
	// A guesser's address, once it has failed, stays out while alice's
	// budget is empty, until its own bucket is full again.
	g := guessers(f, 251, "guess")[250] // an address of the attacker's not used yet
	f.e.HandleClient(testListener{}, g.ft, g.signed(stun.MethodAllocate, transportUDP()), &r)
	if r.Kind != Reply {
		t.Fatalf("a fresh guesser's first guess: kind %d drop %v, want answered", r.Kind, r.Drop)
	}
	f.e.HandleClient(testListener{}, g.ft, g.signed(stun.MethodAllocate, transportUDP()), &r)
	if r.Drop != DropThrottled {
		t.Fatalf("the same guesser's second guess: kind %d drop %v, want dropped", r.Kind, r.Drop)
	}
}

// TestTotalBudgetBoundsRotatingUsernames: 250 addresses guess 10 new
// usernames each (2,500 guesses, each the first for its username and
// within its address's burst): the engine-wide budget (100 × the
// per-address burst) answers 1,000, then the first guess of each address
// that has not failed yet (150), and drops the rest. Bob, who
// authenticated before, keeps going, and so does a new client.
func TestTotalBudgetBoundsRotatingUsernames(t *testing.T) {
	f := newFixture(t, throttled, func(c *Config) { c.Auth = usersAuth{"bob": "b-pass"} })
	bob := f.clientAt("bob", "b-pass", "203.0.113.60:1000")
	if m := bob.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("bob before the attack: code %d", code(m))
	}
	answered, dropped := 0, 0
	var r Result
	for i, g := range guessers(f, 250, "guess") {
		for j := range 10 {
			g.user = "user-" + strconv.Itoa(i*10+j)
			f.e.HandleClient(testListener{}, g.ft, g.signed(stun.MethodAllocate, transportUDP()), &r)
			switch {
			case r.Kind == Reply:
				answered++
			case r.Drop == DropThrottled:
				dropped++
			}
		}
	}
	if want := 100*10 + 150; answered != want || dropped != 2500-want {
		t.Fatalf("%d guesses answered, %d dropped; want %d answered, the rest dropped", answered, dropped, want)
	}
	t.Logf("250 addresses x 10 usernames: %d answered, %d dropped", answered, dropped)
	if m := bob.do(stun.MethodRefresh, lifetimeSetter(600)); code(m) != 0 {
		t.Fatalf("bob's allocation from before the attack, Refresh: code %d", code(m))
	}
	if m := f.clientAt("bob", "b-pass", "203.0.113.61:1000").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("new client during the attack: code %d", code(m))
	}
}

// TestFailureBudgetTablesAreBounded: failures for 100,000 usernames leave
// the username table at its fixed size, and keep a drained username's
// bucket (the evicted buckets are the fullest).
func TestFailureBudgetTablesAreBounded(t *testing.T) {
	var th throttle
	const burst, rate = 100, 20
	now := t0.UnixNano()
	alice := userKey("alice")
	for range burst {
		th.fail(alice, now, burst, rate)
	}
	for i := range 100000 {
		th.fail(userKey("user-"+strconv.Itoa(i)), now, burst, rate)
	}
	if th.allow(alice, now, burst, rate) {
		t.Fatal("usernames sprayed by a guesser evicted a drained username's bucket")
	}
	var tr trusted
	k := sourceUserKey(netip.MustParseAddr("203.0.113.1"), "alice")
	tr.add(k, now)
	if !tr.has(k, now+int64(trustedFor)-1) || tr.has(k, now+int64(trustedFor)) {
		t.Error("trusted entry does not last exactly trustedFor")
	}
	if tr.has(sourceUserKey(netip.MustParseAddr("203.0.113.1"), "bob"), now) || tr.has(sourceUserKey(netip.MustParseAddr("203.0.113.2"), "alice"), now) {
		t.Error("trust given to another username or address")
	}
}
