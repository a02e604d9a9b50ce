package turn

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

func TestBinding(t *testing.T) {
	f := newFixture(t)
	m := f.send(clientTuple, raw(t, stun.MethodBinding, stun.Fingerprint))
	if code(m) != 0 {
		t.Fatalf("binding: code %d", code(m))
	}
	if got := xorGet(t, m, stun.AttrXORMappedAddress); got != clientAddr {
		t.Errorf("XOR-MAPPED-ADDRESS = %v, want %v", got, clientAddr)
	}
	if err := stun.Fingerprint.Check(m); err != nil {
		t.Errorf("reply to a fingerprinted request lacks a valid FINGERPRINT: %v", err)
	}
}

func TestAllocateChallengeAndSuccess(t *testing.T) {
	f := newFixture(t)
	m := f.send(clientTuple, raw(t, stun.MethodAllocate, transportUDP()))
	if code(m) != 401 {
		t.Fatalf("unauthenticated Allocate: code %d, want 401", code(m))
	}
	var realm stun.Realm
	if realm.GetFrom(m) != nil || string(realm) != testRealm {
		t.Errorf("401 REALM = %q, want %q", realm, testRealm)
	}
	if m.Contains(stun.AttrMessageIntegrity) {
		t.Error("401 must not carry MESSAGE-INTEGRITY")
	}
	c := f.client("user", "pass")
	c.learnNonce(m)
	m = c.do(stun.MethodAllocate, transportUDP(), stun.RawAttribute{Type: stun.AttrDontFragment})
	if code(m) != 0 {
		t.Fatalf("Allocate: code %d", code(m))
	}
	if err := stun.NewLongTermIntegrity("user", testRealm, "pass").Check(m); err != nil {
		t.Errorf("success response integrity: %v", err)
	}
	if got := xorGet(t, m, stun.AttrXORRelayedAddress); got != f.relays.relays[0].addr {
		t.Errorf("XOR-RELAYED-ADDRESS = %v, want %v", got, f.relays.relays[0].addr)
	}
	if got := xorGet(t, m, stun.AttrXORMappedAddress); got != clientAddr {
		t.Errorf("XOR-MAPPED-ADDRESS = %v", got)
	}
	if lt := lifetimeOf(t, m); lt != 600 {
		t.Errorf("LIFETIME = %d, want 600", lt)
	}
	if !f.relays.reqs[0].DontFragment {
		t.Error("DONT-FRAGMENT not passed to the relay allocator")
	}
	if f.e.Allocations() != 1 {
		t.Errorf("Allocations() = %d", f.e.Allocations())
	}
}

func TestAllocateErrors(t *testing.T) {
	tcp := stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{6, 0, 0, 0}}
	cases := []struct {
		name  string
		attrs []stun.Setter
		fail  error
		want  int
	}{
		{"no REQUESTED-TRANSPORT", nil, nil, 400},
		{"TCP transport", []stun.Setter{tcp}, nil, 442},
		{"unknown comprehension-required attribute", []stun.Setter{transportUDP(), stun.RawAttribute{Type: 0x7777, Value: []byte{1, 2, 3, 4}}}, nil, 420},
		{"token with EVEN-PORT", []stun.Setter{transportUDP(),
			stun.RawAttribute{Type: stun.AttrReservationToken, Value: make([]byte, 8)},
			stun.RawAttribute{Type: stun.AttrEvenPort, Value: []byte{0}}}, nil, 400},
		{"unknown token", []stun.Setter{transportUDP(),
			stun.RawAttribute{Type: stun.AttrReservationToken, Value: []byte{1, 2, 3, 4, 5, 6, 7, 8}}}, nil, 508},
		{"relay ports exhausted", []stun.Setter{transportUDP()}, ErrNoCapacity, 508},
		{"relay fails otherwise", []stun.Setter{transportUDP()}, errBoom, 508},
		{"IPv6 relay not available", []stun.Setter{transportUDP(),
			stun.RawAttribute{Type: stun.AttrRequestedAddressFamily, Value: []byte{2, 0, 0, 0}}}, ErrAddressFamily, 440},
		{"DF unsupported", []stun.Setter{transportUDP(), stun.RawAttribute{Type: stun.AttrDontFragment}}, ErrDontFragment, 420},
		{"bad family", []stun.Setter{transportUDP(),
			stun.RawAttribute{Type: stun.AttrRequestedAddressFamily, Value: []byte{9, 0, 0, 0}}}, nil, 440},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.relays.fail = tc.fail
			m := f.client("user", "pass").do(stun.MethodAllocate, tc.attrs...)
			if code(m) != tc.want {
				t.Fatalf("code %d, want %d", code(m), tc.want)
			}
			if f.e.Allocations() != 0 {
				t.Error("a failed Allocate left an allocation")
			}
			if tc.want == 420 {
				v, err := m.Get(stun.AttrUnknownAttributes)
				want := uint16(0x7777)
				if tc.fail == ErrDontFragment {
					want = uint16(stun.AttrDontFragment)
				}
				if err != nil || binary.BigEndian.Uint16(v) != want {
					t.Errorf("UNKNOWN-ATTRIBUTES = %x", v)
				}
			}
		})
	}
}

func TestAllocateRetransmitAndMismatch(t *testing.T) {
	f := newFixture(t)
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP()) // learn nonce, allocate
	// Retransmission of the very same request gets the same response.
	c2 := &client{f: f, ft: FiveTuple{Client: netip.MustParseAddrPort("203.0.113.8:1"), Server: serverAddr, Proto: ProtoUDP}, user: "user", pass: "pass", nonce: ""}
	c2.learnNonce(f.send(c2.ft, raw(t, stun.MethodAllocate, transportUDP())))
	req := c2.signed(stun.MethodAllocate, transportUDP())
	first := f.send(c2.ft, req)
	again := f.send(c2.ft, req)
	if code(first) != 0 || !bytes.Equal(first.Raw, again.Raw) {
		t.Fatalf("retransmitted Allocate: code %d, same bytes %v", code(again), bytes.Equal(first.Raw, again.Raw))
	}
	if len(f.relays.relays) != 2 {
		t.Errorf("retransmission opened another relay: %d relays", len(f.relays.relays))
	}
	// A new Allocate on a 5-tuple that has one is a mismatch.
	if m := c2.do(stun.MethodAllocate, transportUDP()); code(m) != 437 {
		t.Errorf("second Allocate: code %d, want 437", code(m))
	}
}

func TestAuthFailures(t *testing.T) {
	t.Run("wrong password", func(t *testing.T) {
		f := newFixture(t)
		m := f.client("user", "wrong").do(stun.MethodAllocate, transportUDP())
		if code(m) != 401 || f.e.Allocations() != 0 || len(f.relays.reqs) != 0 {
			t.Fatalf("code %d, allocations %d, relay requests %d", code(m), f.e.Allocations(), len(f.relays.reqs))
		}
	})
	t.Run("unknown user", func(t *testing.T) {
		f := newFixture(t)
		if m := f.client("mallory", "pass").do(stun.MethodAllocate, transportUDP()); code(m) != 401 {
			t.Fatalf("code %d", code(m))
		}
	})
	t.Run("missing USERNAME", func(t *testing.T) {
		f := newFixture(t)
		pkt := raw(t, stun.MethodAllocate, transportUDP(), stun.NewRealm(testRealm), stun.NewNonce("x"),
			stun.NewShortTermIntegrity("pass"))
		if m := f.send(clientTuple, pkt); code(m) != 400 {
			t.Fatalf("code %d, want 400", code(m))
		}
	})
	t.Run("forged nonce", func(t *testing.T) {
		f := newFixture(t)
		c := f.client("user", "pass")
		c.nonce = "00000000000000000000000000000000000000000000000000"[:nonceLen]
		m := f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP()))
		if code(m) != 438 {
			t.Fatalf("code %d, want 438", code(m))
		}
	})
	t.Run("nonce from another client IP", func(t *testing.T) {
		f := newFixture(t)
		c := f.client("user", "pass")
		c.learnNonce(f.send(c.ft, raw(t, stun.MethodAllocate, transportUDP())))
		c.ft.Client = netip.MustParseAddrPort("203.0.113.99:50000")
		if m := f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP())); code(m) != 438 {
			t.Fatalf("code %d, want 438", code(m))
		}
	})
	t.Run("stale nonce", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.NonceLifetime = 30 * time.Second })
		c := f.client("user", "pass")
		c.learnNonce(f.send(c.ft, raw(t, stun.MethodAllocate, transportUDP())))
		f.clock.Advance(31 * time.Second)
		m := f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP()))
		if code(m) != 438 {
			t.Fatalf("code %d, want 438", code(m))
		}
		c.learnNonce(m)
		if m := f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP())); code(m) != 0 {
			t.Fatalf("with the fresh nonce: code %d", code(m))
		}
	})
}

func TestEphemeralAuth(t *testing.T) {
	secret := "s3cr3t"
	eph := func(c *Config) { c.Auth = EphemeralAuth{Secret: secret} }
	// userFirst writes the username in the other order adopters' issuers use, "<user>:<expiry>".
	userFirst := func(user string, expiry time.Time) string {
		return user + ":" + strconv.FormatInt(expiry.Unix(), 10)
	}
	cases := []struct {
		name     string
		username func(user string, expiry time.Time) string
		expiry   time.Time
		pass     func(user string) string
		want     int
	}{
		{"valid", EphemeralUsername, t0.Add(time.Hour), func(u string) string { return EphemeralPassword(secret, u) }, 0},
		{"expired", EphemeralUsername, t0.Add(-time.Second), func(u string) string { return EphemeralPassword(secret, u) }, 401},
		{"other secret", EphemeralUsername, t0.Add(time.Hour), func(u string) string { return EphemeralPassword("nope", u) }, 401},
		{"user first, valid", userFirst, t0.Add(time.Hour), func(u string) string { return EphemeralPassword(secret, u) }, 0},
		{"user first, expired", userFirst, t0.Add(-time.Second), func(u string) string { return EphemeralPassword(secret, u) }, 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, eph)
			user := tc.username("alice", tc.expiry)
			if m := f.client(user, tc.pass(user)).do(stun.MethodAllocate, transportUDP()); code(m) != tc.want {
				t.Fatalf("code %d, want %d", code(m), tc.want)
			}
		})
	}
	t.Run("other user on the allocation gets 441", func(t *testing.T) {
		f := newFixture(t, eph)
		alice := EphemeralUsername("alice", t0.Add(time.Hour))
		bob := EphemeralUsername("bob", t0.Add(time.Hour))
		if m := f.client(alice, EphemeralPassword(secret, alice)).do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
			t.Fatalf("allocate: %d", code(m))
		}
		if m := f.client(bob, EphemeralPassword(secret, bob)).do(stun.MethodRefresh); code(m) != 441 {
			t.Fatalf("refresh by another user: code %d, want 441", code(m))
		}
	})
}

func TestLifetimes(t *testing.T) {
	cases := []struct {
		name  string
		max   time.Duration
		asked uint32
		want  uint32
	}{
		{"default", 0, 0, 600},
		{"less than default gets default", 0, 60, 600},
		{"more than max is clamped", 0, 3600, 600},
		{"max below default", 300 * time.Second, 0, 300},
		{"between default and max", 3600 * time.Second, 1200, 1200},
		{"above a raised max", 3600 * time.Second, 7200, 3600},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.MaxLifetime = tc.max })
			attrs := []stun.Setter{transportUDP()}
			if tc.asked != 0 {
				attrs = append(attrs, lifetimeSetter(tc.asked))
			}
			m := f.client("user", "pass").do(stun.MethodAllocate, attrs...)
			if code(m) != 0 || lifetimeOf(t, m) != tc.want {
				t.Fatalf("code %d lifetime %d, want %d", code(m), lifetimeOf(t, m), tc.want)
			}
		})
	}
}

func TestRefreshAndExpiry(t *testing.T) {
	f := newFixture(t)
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	relay := f.relays.relays[0]

	f.clock.Advance(500 * time.Second)
	if m := c.do(stun.MethodRefresh); code(m) != 0 || lifetimeOf(t, m) != 600 {
		t.Fatalf("refresh: code %d", code(m))
	}
	f.clock.Advance(500 * time.Second) // 1000 s after Allocate, 500 after Refresh
	if n := f.e.Sweep(); n != 0 || f.e.Allocations() != 1 {
		t.Fatalf("refreshed allocation swept: %d", n)
	}
	f.clock.Advance(101 * time.Second)
	if n := f.e.Sweep(); n != 1 || f.e.Allocations() != 0 || !relay.closed {
		t.Fatalf("expired allocation not swept: n=%d closed=%v", n, relay.closed)
	}
	if m := c.do(stun.MethodRefresh); code(m) != 437 {
		t.Fatalf("refresh after expiry: code %d, want 437", code(m))
	}
}

func TestRefreshZeroDeletes(t *testing.T) {
	f := newFixture(t)
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	m := c.do(stun.MethodRefresh, lifetimeSetter(0))
	if code(m) != 0 || lifetimeOf(t, m) != 0 {
		t.Fatalf("refresh 0: code %d", code(m))
	}
	if f.e.Allocations() != 0 || !f.relays.relays[0].closed {
		t.Fatal("lifetime 0 did not delete the allocation")
	}
	// The 5-tuple is free again.
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("re-allocate: code %d", code(m))
	}
}

func TestEvenPortReservation(t *testing.T) {
	f := newFixture(t)
	c := f.client("user", "pass")
	m := c.do(stun.MethodAllocate, transportUDP(), stun.RawAttribute{Type: stun.AttrEvenPort, Value: []byte{0x80}})
	if code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	if xorGet(t, m, stun.AttrXORRelayedAddress).Port()%2 != 0 {
		t.Error("EVEN-PORT got an odd port")
	}
	tok, err := m.Get(stun.AttrReservationToken)
	if err != nil || len(tok) != 8 {
		t.Fatalf("no RESERVATION-TOKEN: %v", err)
	}
	c2 := f.client("user", "pass")
	c2.ft.Client = netip.MustParseAddrPort("203.0.113.7:50002")
	m = c2.do(stun.MethodAllocate, transportUDP(), stun.RawAttribute{Type: stun.AttrReservationToken, Value: tok})
	if code(m) != 0 {
		t.Fatalf("allocate with token: %d", code(m))
	}
	if got := f.relays.reqs[len(f.relays.reqs)-1].Token; got != binary.BigEndian.Uint64(tok) {
		t.Errorf("token passed to relay allocator = %x", got)
	}
}

func TestQuotas(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllocationsPerIP = 1 })
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	c2 := f.client("user", "pass")
	c2.ft.Client = netip.MustParseAddrPort("203.0.113.7:50001")
	if m := c2.do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("second allocation from one IP: code %d, want 486", code(m))
	}
	c.do(stun.MethodRefresh, lifetimeSetter(0))
	if m := c2.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("after the first was deleted: code %d", code(m))
	}

	g := newFixture(t, func(c *Config) { c.MaxAllocations = 1 })
	g.client("user", "pass").do(stun.MethodAllocate, transportUDP())
	c3 := g.client("user", "pass")
	c3.ft.Client = netip.MustParseAddrPort("203.0.113.9:1")
	if m := c3.do(stun.MethodAllocate, transportUDP()); code(m) != 508 {
		t.Fatalf("over MaxAllocations: code %d, want 508", code(m))
	}
}

// allocated returns a fixture with one allocation for clientTuple.
func allocated(t *testing.T) (*fixture, *client, *Allocation) {
	f := newFixture(t)
	c := f.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	return f, c, f.e.Lookup(clientTuple)
}

func TestCreatePermission(t *testing.T) {
	cases := []struct {
		name  string
		peers []netip.AddrPort
		want  int
	}{
		{"allowed", []netip.AddrPort{peerAddr}, 0},
		{"two allowed", []netip.AddrPort{peerAddr, netip.MustParseAddrPort("198.51.100.11:1")}, 0},
		{"outside allowlist", []netip.AddrPort{deniedPeer}, 403},
		{"one of two outside", []netip.AddrPort{peerAddr, deniedPeer}, 403},
		{"IPv6 peer on IPv4 relay", []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:1::1]:1")}, 443},
		{"no peer", nil, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, c, a := allocated(t)
			var attrs []stun.Setter
			for _, p := range tc.peers {
				attrs = append(attrs, peerAttr(p))
			}
			if m := c.do(stun.MethodCreatePermission, attrs...); code(m) != tc.want {
				t.Fatalf("code %d, want %d", code(m), tc.want)
			}
			now := f.e.now()
			for _, p := range tc.peers {
				if got := a.hasPermission(p.Addr(), now); got != (tc.want == 0) {
					t.Errorf("permission for %v = %v", p, got)
				}
			}
		})
	}
}

func TestChannelBindRules(t *testing.T) {
	other := netip.MustParseAddrPort("198.51.100.10:9001")
	f, c, a := allocated(t)
	steps := []struct {
		name string
		num  uint16
		peer netip.AddrPort
		want int
	}{
		{"below range", 0x3FFF, peerAddr, 400},
		{"not a channel", 0x8000, peerAddr, 400},
		{"last number of RFC 8656's range", 0x4FFF, netip.MustParseAddrPort("198.51.100.13:1"), 0},
		{"above RFC 8656's range (RFC 5766, coturn's client)", 0x5000, netip.MustParseAddrPort("198.51.100.14:1"), 0},
		{"last number of RFC 5766's range", 0x7FFF, netip.MustParseAddrPort("198.51.100.15:1"), 0},
		{"outside allowlist", 0x4000, deniedPeer, 403},
		{"port outside the route's range", 0x4000, netip.MustParseAddrPort("198.51.100.200:6000"), 403},
		{"bind", 0x4000, peerAddr, 0},
		{"refresh same binding", 0x4000, peerAddr, 0},
		{"number taken by another peer", 0x4000, other, 400},
		{"peer taken by another number", 0x4001, peerAddr, 400},
		{"second channel", 0x4001, other, 0},
	}
	for _, s := range steps {
		if m := c.do(stun.MethodChannelBind, channelNumber(s.num), peerAttr(s.peer)); code(m) != s.want {
			t.Fatalf("%s: code %d, want %d", s.name, code(m), s.want)
		}
	}
	if !a.hasPermission(peerAddr.Addr(), f.e.now()) {
		t.Error("ChannelBind did not install a permission")
	}
	// After the binding expires, the number may be bound to another peer.
	f.clock.Advance(ChannelLifetime / 2)
	c.do(stun.MethodRefresh)
	f.clock.Advance(ChannelLifetime/2 + time.Second)
	f.e.Sweep()
	third := netip.MustParseAddrPort("198.51.100.12:1")
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4000), peerAttr(third)); code(m) != 0 {
		t.Fatalf("rebinding an expired number: code %d", code(m))
	}
}

// TestChannelNumbersDefault: by default the whole of RFC 5766's range
// 0x4000-0x7FFF is accepted, as coturn and pion/turn servers do, since
// coturn's turnutils_uclient draws numbers up to 0x7FFF; ChannelData on an
// unbound number in it is dropped for want of a channel.
func TestChannelNumbersDefault(t *testing.T) {
	f, c, _ := allocated(t)
	var r Result
	f.e.HandleClient(testListener{}, clientTuple, channelData(0x7FFF, []byte("x")), &r)
	if r.Kind != Drop || r.Drop != DropNoChannel {
		t.Fatalf("unbound 0x7FFF: kind %d drop %v, want dropped as no channel", r.Kind, r.Drop)
	}
	for i, n := range []uint16{0x4FFF, 0x5000, 0x7FFF} {
		p := netip.AddrPortFrom(peerAddr.Addr(), peerAddr.Port()+uint16(i))
		if m := c.do(stun.MethodChannelBind, channelNumber(n), peerAttr(p)); code(m) != 0 {
			t.Fatalf("ChannelBind %#x: code %d", n, code(m))
		}
		f.e.HandleClient(testListener{}, clientTuple, channelData(n, []byte("x")), &r)
		if r.Kind != Forward || r.Peer != p {
			t.Fatalf("ChannelData on %#x: kind %d drop %v to %v, want relayed to %v", n, r.Kind, r.Drop, r.Peer, p)
		}
	}
}

// TestStrictChannelNumbers: with StrictChannelNumbers only RFC 8656 §12's
// 0x4000-0x4FFF binds; 0x5000-0x7FFF is reserved there (RFC 7983
// demultiplexes on it), so ChannelData numbered there is malformed.
func TestStrictChannelNumbers(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.StrictChannelNumbers = true })
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	for _, n := range []uint16{0x5000, 0x7FFF, 0x8000} {
		if m := c.do(stun.MethodChannelBind, channelNumber(n), peerAttr(peerAddr)); code(m) != 400 {
			t.Fatalf("%#x: code %d, want 400", n, code(m))
		}
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4FFF), peerAttr(peerAddr)); code(m) != 0 {
		t.Fatalf("0x4FFF: code %d", code(m))
	}
	var r Result
	f.e.HandleClient(testListener{}, clientTuple, channelData(0x4FFF, []byte("x")), &r)
	if r.Kind != Forward {
		t.Fatalf("0x4FFF: kind %d drop %v, want relayed", r.Kind, r.Drop)
	}
	for _, n := range []uint16{0x5000, 0x7FFF} {
		f.e.HandleClient(testListener{}, clientTuple, channelData(n, []byte("x")), &r)
		if r.Kind != Drop || r.Drop != DropMalformed {
			t.Errorf("ChannelData on %#x: kind %d drop %v, want dropped as malformed", n, r.Kind, r.Drop)
		}
	}
}

func TestChannelDataBothWays(t *testing.T) {
	f, c, a := allocated(t)
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	payload := []byte("hello, peer")
	var r Result
	f.e.HandleClient(testListener{}, clientTuple, channelData(0x4001, payload), &r)
	if r.Kind != Forward || r.Peer != peerAddr || !bytes.Equal(r.Payload, payload) || r.Alloc != a {
		t.Fatalf("ChannelData: kind %d drop %v peer %v payload %q", r.Kind, r.Drop, r.Peer, r.Payload)
	}
	f.e.HandleClient(testListener{}, clientTuple, channelData(0x4002, payload), &r)
	if r.Kind != Drop || r.Drop != DropNoChannel {
		t.Fatalf("unbound channel: kind %d drop %v", r.Kind, r.Drop)
	}

	buf := make([]byte, PeerHeadroom+1500+PeerTailroom)
	n := copy(buf[PeerHeadroom:], "hello, client")
	msg, _, ok := f.e.HandlePeer(a, peerAddr, buf, PeerHeadroom, n)
	if !ok || binary.BigEndian.Uint16(msg) != 0x4001 || string(msg[4:]) != "hello, client" {
		t.Fatalf("peer -> client ChannelData = %x ok=%v", msg, ok)
	}
	// Permissions last 300 s; without a refresh, data stops both ways.
	f.clock.Advance(PermissionLifetime + time.Second)
	if _, _, ok := f.e.HandlePeer(a, peerAddr, buf, PeerHeadroom, n); ok {
		t.Error("peer data relayed after the permission expired")
	}
	f.e.HandleClient(testListener{}, clientTuple, channelData(0x4001, payload), &r)
	if r.Kind != Drop || r.Drop != DropNoPermission {
		t.Fatalf("after permission expiry: kind %d drop %v", r.Kind, r.Drop)
	}
}

func TestStreamChannelDataIsPadded(t *testing.T) {
	f, c, a := allocated(t)
	a.FiveTuple.Proto = ProtoTCP
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	buf := make([]byte, PeerHeadroom+1500+PeerTailroom)
	n := copy(buf[PeerHeadroom:], "12345")
	msg, _, ok := f.e.HandlePeer(a, peerAddr, buf, PeerHeadroom, n)
	if !ok || len(msg) != 12 || binary.BigEndian.Uint16(msg[2:]) != 5 {
		t.Fatalf("stream ChannelData = %x (len %d), want 4+5+3 bytes with length 5", msg, len(msg))
	}
}

func TestSendAndDataIndications(t *testing.T) {
	for _, peer := range []netip.AddrPort{peerAddr, netip.MustParseAddrPort("198.51.100.200:5001")} {
		f, c, a := allocated(t)
		c.do(stun.MethodCreatePermission, peerAttr(peer))
		var r Result
		f.e.HandleClient(testListener{}, clientTuple, sendIndication(t, peer, []byte("abcde")), &r)
		if r.Kind != Forward || r.Peer != peer || string(r.Payload) != "abcde" {
			t.Fatalf("Send: kind %d drop %v peer %v payload %q", r.Kind, r.Drop, r.Peer, r.Payload)
		}
		// Same IP, port outside the route's range: the permission is there,
		// the allowlist is not.
		if peer.Port() == 5001 {
			f.e.HandleClient(testListener{}, clientTuple, sendIndication(t, netip.AddrPortFrom(peer.Addr(), 7000), []byte("x")), &r)
			if r.Drop != DropForbidden {
				t.Fatalf("Send to a port outside the route: drop %v", r.Drop)
			}
		}
		f.e.HandleClient(testListener{}, clientTuple, sendIndication(t, netip.MustParseAddrPort("198.51.100.99:1"), []byte("x")), &r)
		if r.Kind != Drop || r.Drop != DropNoPermission {
			t.Fatalf("Send without permission: kind %d drop %v", r.Kind, r.Drop)
		}

		buf := make([]byte, PeerHeadroom+64+PeerTailroom)
		n := copy(buf[PeerHeadroom:], "xyz12")
		msg, _, ok := f.e.HandlePeer(a, peer, buf, PeerHeadroom, n)
		if !ok {
			t.Fatal("peer data dropped")
		}
		m := &stun.Message{Raw: append([]byte(nil), msg...)}
		if err := m.Decode(); err != nil {
			t.Fatalf("Data indication does not decode: %v", err)
		}
		if m.Type != stun.NewType(stun.MethodData, stun.ClassIndication) {
			t.Errorf("type %v", m.Type)
		}
		if got := xorGet(t, m, stun.AttrXORPeerAddress); got != peer {
			t.Errorf("XOR-PEER-ADDRESS %v", got)
		}
		if d, _ := m.Get(stun.AttrData); string(d) != "xyz12" {
			t.Errorf("DATA %q", d)
		}
		if len(msg)%4 != 0 {
			t.Errorf("Data indication length %d is not padded", len(msg))
		}
		if _, _, ok := f.e.HandlePeer(a, netip.MustParseAddrPort("198.51.100.99:1"), buf, PeerHeadroom, n); ok {
			t.Error("data from a peer without permission relayed")
		}
	}
}

func TestDataIndicationIPv6(t *testing.T) {
	f := newFixture(t)
	c := f.client("user", "pass")
	m := c.do(stun.MethodAllocate, transportUDP(), stun.RawAttribute{Type: stun.AttrRequestedAddressFamily, Value: []byte{2, 0, 0, 0}})
	if code(m) != 0 || !xorGet(t, m, stun.AttrXORRelayedAddress).Addr().Is6() {
		t.Fatalf("IPv6 allocate: code %d", code(m))
	}
	peer := netip.MustParseAddrPort("[2001:db8:1::5]:7000")
	c.do(stun.MethodCreatePermission, peerAttr(peer))
	a := f.e.Lookup(clientTuple)
	buf := make([]byte, PeerHeadroom+8+PeerTailroom)
	n := copy(buf[PeerHeadroom:], "v6")
	msg, _, ok := f.e.HandlePeer(a, peer, buf, PeerHeadroom, n)
	if !ok {
		t.Fatal("dropped")
	}
	dm := &stun.Message{Raw: msg}
	if err := dm.Decode(); err != nil || xorGet(t, dm, stun.AttrXORPeerAddress) != peer {
		t.Fatalf("IPv6 Data indication: %v", err)
	}
}

func TestRevalidateDropsRevokedPeers(t *testing.T) {
	f, c, a := allocated(t)
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	a.Transport = denyAll{}
	f.e.Revalidate()
	if a.hasPermission(peerAddr.Addr(), f.e.now()) || a.channelByNumber(0x4001, f.e.now()) != nil {
		t.Fatal("revoked peer still has a permission or channel")
	}
}

type denyAll struct{}

func (denyAll) PeerCluster(netip.AddrPort) (uint32, bool) { return 0, false }

func TestMalformedIsDroppedAndCounted(t *testing.T) {
	f, c, _ := allocated(t)
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	good := sendIndication(t, peerAddr, []byte("abc"))
	cases := map[string][]byte{
		"empty":                  {},
		"one byte":               {0x40},
		"channel header only":    {0x40, 0x01},
		"channel length too big": {0x40, 0x01, 0x00, 0x10, 1, 2},
		"not STUN":               bytes.Repeat([]byte{0xFF}, 30),
		"STUN header truncated":  good[:10],
		"STUN length too big":    append(append([]byte{}, good[:2]...), append([]byte{0xFF, 0xF0}, good[4:]...)...),
		"attribute truncated":    good[:len(good)-2],
		"response class":         mustType(t, stun.NewType(stun.MethodBinding, stun.ClassSuccessResponse)),
	}
	for name, pkt := range cases {
		t.Run(name, func(t *testing.T) {
			var r Result
			f.e.HandleClient(testListener{}, clientTuple, pkt, &r)
			if r.Kind != Drop || r.Drop == DropNone {
				t.Fatalf("kind %d drop %v", r.Kind, r.Drop)
			}
		})
	}
}

func mustType(t *testing.T, mt stun.MessageType) []byte {
	m, err := stun.Build(stun.TransactionID, mt)
	if err != nil {
		t.Fatal(err)
	}
	return m.Raw
}

func TestDrainingRefusesNewAllocations(t *testing.T) {
	f, c, _ := allocated(t)
	f.e.SetDraining(true)
	other := f.client("user", "pass")
	other.ft.Client = netip.MustParseAddrPort("203.0.113.50:1")
	if m := other.do(stun.MethodAllocate, transportUDP()); code(m) != 508 {
		t.Fatalf("Allocate while draining: code %d, want 508", code(m))
	}
	// The existing allocation still refreshes and binds channels.
	if m := c.do(stun.MethodRefresh); code(m) != 0 {
		t.Fatalf("Refresh while draining: %d", code(m))
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr)); code(m) != 0 {
		t.Fatalf("ChannelBind while draining: %d", code(m))
	}
}
