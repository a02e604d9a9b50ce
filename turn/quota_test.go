package turn

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

func evenPortR() stun.Setter { return stun.RawAttribute{Type: stun.AttrEvenPort, Value: []byte{0x80}} }

func tokenAttr(tok []byte) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrReservationToken, Value: tok}
}

// clientAt is a client of f at addr (a 5-tuple of its own).
func (f *fixture) clientAt(user, pass, addr string) *client {
	c := f.client(user, pass)
	c.ft.Client = netip.MustParseAddrPort(addr)
	return c
}

// TestReservationsCountTowardQuota: a port reserved by EVEN-PORT holds a
// quota slot of its client until claimed or expired, so reservations do
// not get around AllocationsPerIP.
func TestReservationsCountTowardQuota(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllocationsPerIP = 2 })
	m := f.clientAt("user", "pass", "203.0.113.7:1").do(stun.MethodAllocate, transportUDP(), evenPortR())
	if code(m) != 0 {
		t.Fatalf("allocate with EVEN-PORT: %d", code(m))
	}
	tok, _ := m.Get(stun.AttrReservationToken)
	if m := f.clientAt("user", "pass", "203.0.113.7:2").do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("allocation + reservation + one more: code %d, want 486", code(m))
	}
	// Claiming the token turns the reservation's slot into the allocation's.
	if m := f.clientAt("user", "pass", "203.0.113.7:3").do(stun.MethodAllocate, transportUDP(), tokenAttr(tok)); code(m) != 0 {
		t.Fatalf("claim: code %d", code(m))
	}
	if m := f.clientAt("user", "pass", "203.0.113.7:4").do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("two allocations + one more: code %d, want 486", code(m))
	}

	// A reservation nobody claims gives its slot back when it expires.
	g := newFixture(t, func(c *Config) { c.AllocationsPerIP = 2 })
	if m := g.clientAt("user", "pass", "203.0.113.7:1").do(stun.MethodAllocate, transportUDP(), evenPortR()); code(m) != 0 {
		t.Fatalf("allocate with EVEN-PORT: %d", code(m))
	}
	late := g.clientAt("user", "pass", "203.0.113.7:2")
	if m := late.do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("over the quota: code %d", code(m))
	}
	g.clock.Advance(ReservationLifetime + time.Second)
	g.e.Sweep()
	if m := late.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("after the reservation expired: code %d", code(m))
	}

	// A pair that does not fit is refused whole: one slot left, two asked.
	h := newFixture(t, func(c *Config) { c.AllocationsPerIP = 1 })
	if m := h.clientAt("user", "pass", "203.0.113.7:1").do(stun.MethodAllocate, transportUDP(), evenPortR()); code(m) != 486 {
		t.Fatalf("EVEN-PORT pair over a quota of 1: code %d, want 486", code(m))
	}
	if m := h.clientAt("user", "pass", "203.0.113.7:1").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("the refused pair left its slots taken: code %d", code(m))
	}
}

// TestReservationBoundToClient: only the client address and USERNAME that
// reserved a port may claim it; to anyone else the token is unknown (508)
// and the reservation stays for its owner.
func TestReservationBoundToClient(t *testing.T) {
	secret := "s"
	f := newFixture(t, func(c *Config) { c.Auth = EphemeralAuth{Secret: secret} })
	alice := EphemeralUsername("alice", t0.Add(time.Hour))
	bob := EphemeralUsername("bob", t0.Add(time.Hour))
	m := f.clientAt(alice, EphemeralPassword(secret, alice), "203.0.113.7:1").do(stun.MethodAllocate, transportUDP(), evenPortR())
	if code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	tok, _ := m.Get(stun.AttrReservationToken)
	for _, thief := range []*client{
		f.clientAt(alice, EphemeralPassword(secret, alice), "198.18.0.1:1"), // another address
		f.clientAt(bob, EphemeralPassword(secret, bob), "203.0.113.7:2"),    // another user
	} {
		if m := thief.do(stun.MethodAllocate, transportUDP(), tokenAttr(tok)); code(m) != 508 {
			t.Fatalf("claim by %s at %v: code %d, want 508", thief.user, thief.ft.Client, code(m))
		}
	}
	if m := f.clientAt(alice, EphemeralPassword(secret, alice), "203.0.113.7:3").do(stun.MethodAllocate, transportUDP(), tokenAttr(tok)); code(m) != 0 {
		t.Fatalf("claim by the owner after the attempts: code %d", code(m))
	}
	if got := f.relays.reqs[len(f.relays.reqs)-1]; got.Username != alice || got.Client.Client.Addr() != netip.MustParseAddr("203.0.113.7") {
		t.Errorf("relay request of the claim: user %q client %v", got.Username, got.Client.Client)
	}
}

// TestQuotaCountsIPv6By64: the per-IP quota counts an IPv6 client by its
// /64, so walking the addresses of one /64 does not multiply it.
func TestQuotaCountsIPv6By64(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllocationsPerIP = 1 })
	if m := f.clientAt("user", "pass", "[2001:db8:5:6::1]:1").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("first: %d", code(m))
	}
	if m := f.clientAt("user", "pass", "[2001:db8:5:6::2]:1").do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("same /64: code %d, want 486", code(m))
	}
	if m := f.clientAt("user", "pass", "[2001:db8:5:7::1]:1").do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("another /64: code %d", code(m))
	}
	if f.e.Refused(RefusedQuotaIP) != 1 {
		t.Errorf("quota_ip refusals %d, want 1", f.e.Refused(RefusedQuotaIP))
	}
}

// recordLog is a slog handler that keeps the records at or above a level.
type recordLog struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (h *recordLog) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// TestRefusalsLogInAggregate: 10,000 refused CreatePermissions and
// ChannelBinds over 10 s write one line per kind at INFO, with the count,
// not one per request.
func TestRefusalsLogInAggregate(t *testing.T) {
	h := &recordLog{level: slog.LevelInfo}
	f := newFixture(t, func(c *Config) { c.Logger = slog.New(h) })
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	perm := c.signed(stun.MethodCreatePermission, peerAttr(deniedPeer))
	bind := c.signed(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(deniedPeer))
	before := len(h.recs)
	f.e.Sweep() // starts the interval
	var r Result
	for i := range 10000 {
		pkt := perm
		if i%2 == 1 {
			pkt = bind
		}
		f.e.HandleClient(testListener{}, clientTuple, pkt, &r)
		if i%1000 == 999 {
			f.clock.Advance(time.Second)
			f.e.Sweep()
		}
	}
	lines := h.recs[before:]
	if len(lines) != 2 {
		t.Fatalf("%d lines at INFO for 10,000 refusals, want 2 (one per kind)", len(lines))
	}
	for _, rec := range lines {
		var count int64
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "count" {
				count = int64(a.Value.Uint64())
			}
			return true
		})
		if count != 5000 {
			t.Errorf("%q: count %d, want 5000", rec.Message, count)
		}
	}
	if f.e.Refused(RefusedPermission) != 5000 || f.e.Refused(RefusedChannel) != 5000 {
		t.Errorf("counters: %d permission, %d channel refusals", f.e.Refused(RefusedPermission), f.e.Refused(RefusedChannel))
	}
}

func TestDistinctEstimate(t *testing.T) {
	e := &Engine{}
	for i := range 1000 {
		ft := FiveTuple{Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 1)}
		for range 3 {
			e.refused(RefusedAuth, ft)
		}
	}
	zero := 0
	for i := range e.refusals.clients[RefusedAuth] {
		w := e.refusals.clients[RefusedAuth][i].Load()
		for b := range 64 {
			if w&(1<<b) == 0 {
				zero++
			}
		}
	}
	if got := distinct(zero, 3000); got < 900 || got > 1100 {
		t.Errorf("estimated %d distinct clients, want about 1000", got)
	}
}

// TestQuotaAddr: the key of per-IP quotas and throttles is the IPv4
// address (an IPv4-mapped IPv6 address counts as its IPv4 address, so a
// dual-stack socket's mapped sources share their IPv4 bucket), or the
// IPv6 /64.
func TestQuotaAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:5:6::1", "2001:db8:5:6::"},
		{"2001:db8:5:6:ffff:ffff:ffff:ffff", "2001:db8:5:6::"},
		{"::1", "::"},
	} {
		if got := quotaAddr(netip.MustParseAddr(tc.in)); got != netip.MustParseAddr(tc.want) {
			t.Errorf("quotaAddr(%s) = %v, want %s", tc.in, got, tc.want)
		}
	}
}
