package turn

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

var (
	altV4    = netip.MustParseAddrPort("192.0.2.2:3478")
	altV4b   = netip.MustParseAddrPort("192.0.2.3:3478")
	altV6    = netip.MustParseAddrPort("[2001:db8::2]:3478")
	clientV6 = FiveTuple{Client: netip.MustParseAddrPort("[2001:db8::7]:50000"),
		Server: netip.MustParseAddrPort("[2001:db8::1]:3478"), Proto: ProtoUDP}
)

// alternatesOf returns every ALTERNATE-SERVER of m, in order.
func alternatesOf(t *testing.T, m *stun.Message) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	for _, a := range m.Attributes {
		if a.Type != stun.AttrAlternateServer {
			continue
		}
		one := &stun.Message{}
		one.Add(stun.AttrAlternateServer, a.Value)
		var as stun.AlternateServer
		if err := as.GetFrom(one); err != nil {
			t.Fatalf("ALTERNATE-SERVER: %v", err)
		}
		ip, _ := netip.AddrFromSlice(as.IP)
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(as.Port)))
	}
	return out
}

// TestRedirect is the redirect's table: why an Allocate gets 300 (or
// stays 508), whether the 300 is signed, and which alternates it offers.
func TestRedirect(t *testing.T) {
	for _, tc := range []struct {
		name       string
		alts       []netip.AddrPort
		maxAllocs  int
		noPorts    bool // the relay allocator has no free port
		drain      bool
		preferred  []netip.AddrPort // SetPreferred: the less-loaded alternates
		ft         FiveTuple
		signed     bool // the Allocate that meets the redirect carries MESSAGE-INTEGRITY
		wantCode   int
		wantAlts   []netip.AddrPort
		wantReason RedirectReason
	}{
		{name: "draining, unsigned first Allocate: 300 before the 401", alts: []netip.AddrPort{altV4, altV6},
			drain: true, ft: clientTuple, wantCode: 300, wantAlts: []netip.AddrPort{altV4}, wantReason: RedirectDraining},
		{name: "draining, signed Allocate: 300 signed, with the other family second", alts: []netip.AddrPort{altV6, altV4},
			drain: true, ft: clientTuple, signed: true, wantCode: 300, wantAlts: []netip.AddrPort{altV4, altV6}, wantReason: RedirectDraining},
		{name: "IPv6 client gets the IPv6 alternate", alts: []netip.AddrPort{altV4, altV6},
			drain: true, ft: clientV6, wantCode: 300, wantAlts: []netip.AddrPort{altV6}, wantReason: RedirectDraining},
		{name: "no alternate of the client's family: 508", alts: []netip.AddrPort{altV6},
			drain: true, ft: clientTuple, signed: true, wantCode: 508},
		{name: "no alternates: 508", drain: true, ft: clientTuple, signed: true, wantCode: 508},
		{name: "at maxAllocations, unsigned: 300", alts: []netip.AddrPort{altV4}, maxAllocs: 1,
			ft: clientTuple, wantCode: 300, wantAlts: []netip.AddrPort{altV4}, wantReason: RedirectCapacity},
		{name: "at maxAllocations, signed: 300", alts: []netip.AddrPort{altV4}, maxAllocs: 1,
			ft: clientTuple, signed: true, wantCode: 300, wantAlts: []netip.AddrPort{altV4}, wantReason: RedirectCapacity},
		{name: "port 0 takes the listener's port", alts: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.2:0")},
			drain: true, ft: clientTuple, wantCode: 300, wantAlts: []netip.AddrPort{altV4}, wantReason: RedirectDraining},
		{name: "neither draining nor full: allocated", alts: []netip.AddrPort{altV4}, ft: clientTuple, signed: true},
		{name: "imbalance, unsigned first Allocate: 300 to a preferred alternate", alts: []netip.AddrPort{altV4, altV4b},
			preferred: []netip.AddrPort{altV4b}, ft: clientTuple, wantCode: 300, wantAlts: []netip.AddrPort{altV4b}, wantReason: RedirectImbalance},
		{name: "imbalance, signed Allocate: served here", alts: []netip.AddrPort{altV4, altV4b},
			preferred: []netip.AddrPort{altV4b}, ft: clientTuple, signed: true},
		{name: "imbalance, no preferred of the client's family: challenged here", alts: []netip.AddrPort{altV4, altV6},
			preferred: []netip.AddrPort{altV6}, ft: clientTuple, wantCode: 401},
		{name: "draining wins over imbalance: any alternate", alts: []netip.AddrPort{altV4},
			preferred: []netip.AddrPort{altV4b}, drain: true, ft: clientTuple, wantCode: 300, wantAlts: []netip.AddrPort{altV4}, wantReason: RedirectDraining},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				c.Alternates = tc.alts
				c.MaxAllocations = tc.maxAllocs
			})
			if tc.maxAllocs > 0 {
				// Fill the engine from another client.
				filler := f.client("user", "pass")
				filler.ft.Client = netip.MustParseAddrPort("203.0.113.99:1")
				if m := filler.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
					t.Fatalf("filling Allocate: %d", code(m))
				}
			}
			if tc.noPorts {
				f.relays.fail = ErrNoCapacity
			}
			c := f.client("user", "pass")
			c.ft = tc.ft
			if tc.signed {
				// The client has a nonce (an unsigned Refresh is challenged
				// like any TURN request, redirecting or not).
				c.learnNonce(f.send(c.ft, raw(t, stun.MethodRefresh)))
			}
			f.e.SetDraining(tc.drain)
			f.e.SetPreferred(tc.preferred)
			var m *stun.Message
			if tc.signed {
				m = f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP()))
			} else {
				m = f.send(c.ft, raw(t, stun.MethodAllocate, transportUDP(), stun.Fingerprint))
			}
			if code(m) != tc.wantCode {
				t.Fatalf("Allocate: code %d, want %d", code(m), tc.wantCode)
			}
			if tc.wantCode != 300 {
				if f.e.Redirects(RedirectDraining)+f.e.Redirects(RedirectCapacity)+f.e.Redirects(RedirectImbalance) != 0 {
					t.Fatal("a redirect was counted for a request not redirected")
				}
				return
			}
			if got := alternatesOf(t, m); !equalAddrs(got, tc.wantAlts) {
				t.Fatalf("ALTERNATE-SERVER: %v, want %v", got, tc.wantAlts)
			}
			if integrity := m.Contains(stun.AttrMessageIntegrity); integrity != tc.signed {
				t.Fatalf("MESSAGE-INTEGRITY in the 300: %v, want %v (signed request)", integrity, tc.signed)
			}
			if tc.signed {
				if err := stun.NewLongTermIntegrity("user", testRealm, "pass").Check(m); err != nil {
					t.Fatalf("the signed 300 does not verify: %v", err)
				}
			}
			if f.e.Redirects(tc.wantReason) != 1 {
				t.Fatalf("Redirects(%s) = %d, want 1", RedirectReasons[tc.wantReason], f.e.Redirects(tc.wantReason))
			}
			if f.e.AllocationErrors(0) != 0 {
				t.Fatal("a 300 was counted as an Allocate error")
			}
		})
	}
}

func equalAddrs(a, b []netip.AddrPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRedirectNeverToSelf is RFC 8489 §10's loop rule on the server side:
// an engine never offers the listener address the Allocate arrived on, so
// a list that holds every replica of a Gateway (this one too) cannot send a
// client back where it is; with only itself in the list the answer is 508.
func TestRedirectNeverToSelf(t *testing.T) {
	self := clientTuple.Server
	for _, tc := range []struct {
		name string
		alts []netip.AddrPort
		want []netip.AddrPort // nil: 508
	}{
		{"only itself", []netip.AddrPort{self}, nil},
		{"itself by port 0", []netip.AddrPort{netip.AddrPortFrom(self.Addr(), 0)}, nil},
		{"itself as IPv4-mapped IPv6", []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom16(self.Addr().As16()), self.Port())}, nil},
		{"itself and another", []netip.AddrPort{self, altV4}, []netip.AddrPort{altV4}},
		{"same IP, other port is another server", []netip.AddrPort{netip.AddrPortFrom(self.Addr(), 3479)},
			[]netip.AddrPort{netip.AddrPortFrom(self.Addr(), 3479)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Alternates = tc.alts })
			f.e.SetDraining(true)
			for _, signed := range []bool{false, true} {
				c := f.client("user", "pass")
				var m *stun.Message
				if signed {
					c.learnNonce(f.send(c.ft, raw(t, stun.MethodRefresh)))
					m = f.send(c.ft, c.signed(stun.MethodAllocate, transportUDP()))
				} else {
					m = f.send(c.ft, raw(t, stun.MethodAllocate, transportUDP()))
				}
				switch {
				case tc.want == nil && code(m) != 508 && !(code(m) == 401 && !signed):
					t.Fatalf("signed %v: code %d, want 508 (or the 401 challenge)", signed, code(m))
				case tc.want != nil && code(m) != 300:
					t.Fatalf("signed %v: code %d, want 300", signed, code(m))
				case tc.want != nil && !equalAddrs(alternatesOf(t, m), tc.want):
					t.Fatalf("signed %v: ALTERNATE-SERVER %v, want %v", signed, alternatesOf(t, m), tc.want)
				}
				for _, a := range alternatesOf(t, m) {
					if a == self {
						t.Fatalf("the engine offered itself: %v", a)
					}
				}
			}
		})
	}
}

// TestRedirectSpreadsAndIsStable: clients spread over the alternates of
// their family, and one client's retransmissions name the same alternate.
func TestRedirectSpreadsAndIsStable(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Alternates = []netip.AddrPort{altV4, altV4b, altV6} })
	f.e.SetDraining(true)
	seen := map[netip.AddrPort]int{}
	for i := range 64 {
		ft := clientTuple
		ft.Client = netip.AddrPortFrom(ft.Client.Addr(), uint16(40000+i))
		pkt := raw(t, stun.MethodAllocate, transportUDP())
		first := alternatesOf(t, f.send(ft, pkt))
		again := alternatesOf(t, f.send(ft, pkt))
		if len(first) != 1 || !equalAddrs(first, again) {
			t.Fatalf("client %v: %v then %v", ft.Client, first, again)
		}
		seen[first[0]]++
	}
	if seen[altV4] == 0 || seen[altV4b] == 0 || seen[altV6] != 0 {
		t.Fatalf("alternates offered: %v", seen)
	}
}

// TestRedirectLeavesOthersAlone: what a redirect must not touch.
func TestRedirectLeavesOthersAlone(t *testing.T) {
	f, c, _ := allocated(t)
	s := *f.e.settings.Load()
	s.Alternates = []netip.AddrPort{altV4}
	if err := f.e.Reconfigure(s); err != nil {
		t.Fatal(err)
	}
	f.e.SetDraining(true)
	// The existing allocation refreshes and binds channels as before.
	if m := c.do(stun.MethodRefresh); code(m) != 0 {
		t.Fatalf("Refresh while draining: %d", code(m))
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr)); code(m) != 0 {
		t.Fatalf("ChannelBind while draining: %d", code(m))
	}
	// A new Allocate on the allocation's 5-tuple is a mismatch, not a redirect.
	if m := f.send(c.ft, raw(t, stun.MethodAllocate, transportUDP())); code(m) == 300 {
		t.Fatal("an Allocate on an allocated 5-tuple was redirected")
	}
	other := f.client("user", "pass")
	other.ft.Client = netip.MustParseAddrPort("203.0.113.50:1")
	// A claim of a port reserved here is not sent elsewhere.
	token := stun.RawAttribute{Type: stun.AttrReservationToken, Value: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	if m := other.do(stun.MethodAllocate, transportUDP(), token); code(m) != 508 {
		t.Fatalf("Allocate with RESERVATION-TOKEN while draining: %d, want 508", code(m))
	}
	// Binding is answered as ever.
	if m := f.send(other.ft, raw(t, stun.MethodBinding)); code(m) != 0 {
		t.Fatalf("Binding while draining: %d", code(m))
	}
}

// TestUnauthenticatedRedirectIsSmall: the 300 to an unsigned Allocate is
// what a spoofed one draws, and is smaller than the 401 it replaces: the
// header, ERROR-CODE without a reason phrase, one ALTERNATE-SERVER and
// FINGERPRINT when the request had one (docs/security.md).
func TestUnauthenticatedRedirectIsSmall(t *testing.T) {
	for _, tc := range []struct {
		name string
		ft   FiveTuple
		fp   bool
		want int
	}{
		{"IPv4, pion/turn's first Allocate (36 bytes)", clientTuple, true, 20 + 8 + 12 + 8},
		{"IPv4, no FINGERPRINT", clientTuple, false, 20 + 8 + 12},
		{"IPv6", clientV6, true, 20 + 8 + 24 + 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Alternates = []netip.AddrPort{altV4, altV6} })
			f.e.SetDraining(true)
			attrs := []stun.Setter{transportUDP()}
			if tc.fp {
				attrs = append(attrs, stun.Fingerprint)
			}
			m := f.send(tc.ft, raw(t, stun.MethodAllocate, attrs...))
			if code(m) != 300 || len(m.Raw) != tc.want {
				t.Fatalf("code %d, %d bytes; want 300 in %d bytes", code(m), len(m.Raw), tc.want)
			}
		})
	}
}
