package turn

import (
	"net/netip"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

func throttled(c *Config) { c.AuthFailureBurst, c.AuthFailureRate = 10, 2 }

// TestWrongPasswordFloodIsThrottled: 10,000 wrong-password Allocates from
// one address over 10 s get at most burst + rate x 10 s answers, the rest
// are dropped and counted, and a client at another address authenticates
// and allocates meanwhile.
func TestWrongPasswordFloodIsThrottled(t *testing.T) {
	f := newFixture(t, throttled)
	mallory := f.clientAt("user", "wrong", "198.18.0.1:4000")
	mallory.learnNonce(f.send(mallory.ft, raw(t, stun.MethodAllocate, transportUDP())))
	guess := mallory.signed(stun.MethodAllocate, transportUDP())
	answered, dropped := 0, 0
	var r Result
	for i := range 10000 {
		f.e.HandleClient(testListener{}, mallory.ft, guess, &r)
		switch {
		case r.Kind == Reply:
			answered++
		case r.Drop == DropThrottled:
			dropped++
		}
		if i == 5000 {
			// Another client, mid-flood, is served as usual.
			if m := f.clientAt("user", "pass", "203.0.113.7:1").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
				t.Fatalf("another address during the flood: code %d", code(m))
			}
		}
		f.clock.Advance(time.Millisecond)
	}
	if max := 10 + 2*10; answered > max || answered+dropped != 10000 {
		t.Fatalf("%d answered, %d dropped; want at most %d answered, the rest dropped", answered, dropped, max)
	}
	if f.e.Refused(RefusedThrottled) != uint64(dropped) || f.e.Refused(RefusedAuth) != uint64(answered) {
		t.Errorf("counters: throttled %d auth %d; want %d and %d", f.e.Refused(RefusedThrottled), f.e.Refused(RefusedAuth), dropped, answered)
	}
	// While throttled, even the right password from that address is not
	// checked (a right guess must look like a wrong one)...
	f.e.HandleClient(testListener{}, mallory.ft, guess, &r) // takes the token that came due, if any
	right := f.clientAt("user", "pass", "198.18.0.1:4001")
	right.nonce = mallory.nonce
	f.e.HandleClient(testListener{}, right.ft, right.signed(stun.MethodAllocate, transportUDP()), &r)
	if r.Kind != Drop || r.Drop != DropThrottled {
		t.Fatalf("right password from a throttled address: kind %d drop %v, want dropped", r.Kind, r.Drop)
	}
	// ...but a first, unsigned request still gets its 401 challenge.
	if m := f.send(right.ft, raw(t, stun.MethodAllocate, transportUDP())); code(m) != 401 {
		t.Fatalf("unsigned request from a throttled address: code %d, want 401", code(m))
	}
	// The bucket refills: after a second, two more requests are checked.
	f.clock.Advance(time.Second)
	if m := right.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("right password after the refill: code %d", code(m))
	}
}

// TestThrottleSurvivesSpoofedSources: failures from 100,000 one-off
// sources neither grow the table nor evict the drained bucket of the
// source that failed the most.
func TestThrottleSurvivesSpoofedSources(t *testing.T) {
	var th throttle
	const burst, rate = 10, 2
	now := t0.UnixNano()
	mallory := keyOfAddr(netip.MustParseAddr("198.18.0.1"), 0)
	for range burst {
		th.fail(mallory, now, burst, rate)
	}
	if th.allow(mallory, now, burst, rate) {
		t.Fatal("a drained source is allowed")
	}
	for i := range 100000 {
		th.fail(keyOfAddr(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 0), now, burst, rate)
	}
	if th.allow(mallory, now, burst, rate) {
		t.Fatal("one-off sources evicted the drained bucket")
	}
	if th.allow(mallory, now+int64(400*time.Millisecond), burst, rate) || !th.allow(mallory, now+int64(500*time.Millisecond), burst, rate) {
		t.Fatal("the bucket does not refill at rate")
	}
}

// TestExpiredNoncesDoNotThrottle: 100 clients behind one address (half the per-address
// quota) whose nonces expire together each get 438 with a fresh nonce, and then succeed;
// none is dropped. A nonce this engine issued to the address is no sign of guessing, and
// before, the eleventh expired nonce emptied the address's bucket, so the NAT's clients'
// refreshes were dropped until it refilled at 2/s.
func TestExpiredNoncesDoNotThrottle(t *testing.T) {
	f := newFixture(t, throttled, func(c *Config) { c.NonceLifetime = 30 * time.Second })
	var clients []*client
	for i := range 100 {
		c := f.clientAt("user", "pass", netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), uint16(40000+i)).String())
		if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
			t.Fatalf("client %d: Allocate: code %d", i, code(m))
		}
		clients = append(clients, c)
	}
	f.clock.Advance(31 * time.Second)
	for i, c := range clients {
		m := f.send(c.ft, c.signed(stun.MethodRefresh, lifetimeSetter(600)))
		if code(m) != 438 {
			t.Fatalf("client %d, expired nonce: code %d, want 438", i, code(m))
		}
		c.learnNonce(m)
		if m := f.send(c.ft, c.signed(stun.MethodRefresh, lifetimeSetter(600))); code(m) != 0 {
			t.Fatalf("client %d, fresh nonce: code %d", i, code(m))
		}
	}
	if n := f.e.Refused(RefusedThrottled); n != 0 {
		t.Errorf("%d requests throttled", n)
	}
	// A forged nonce costs nothing either (TestSpoofedSourceCannotLockOutVictim):
	// the eleventh is answered 438 like the first.
	forger := f.clientAt("user", "pass", "198.51.100.2:1")
	forger.nonce = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"[:nonceLen]
	for i := range 11 {
		if m := f.send(forger.ft, forger.signed(stun.MethodAllocate, transportUDP())); code(m) != 438 {
			t.Fatalf("forged nonce %d: code %d, want 438", i, code(m))
		}
	}
}
