package turn

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

func requestedFamily(f byte) stun.Setter {
	return stun.RawAttribute{Type: stun.AttrRequestedAddressFamily, Value: []byte{f, 0, 0, 0}}
}

func additionalFamilyAttr(f byte) stun.Setter {
	return stun.RawAttribute{Type: attrAdditionalAddressFamily, Value: []byte{f, 0, 0, 0}}
}

// relayedAddrs returns every XOR-RELAYED-ADDRESS of m, in order.
func relayedAddrs(t testing.TB, m *stun.Message) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	for _, a := range m.Attributes {
		if a.Type != stun.AttrXORRelayedAddress {
			continue
		}
		ap, ok := parseXORAddr(a.Value, m.TransactionID[:])
		if !ok {
			t.Fatalf("bad XOR-RELAYED-ADDRESS %x", a.Value)
		}
		out = append(out, ap)
	}
	return out
}

// TestAllocateAddressFamilies follows RFC 8656 §7.2 steps 4-7: which
// relayed transport addresses an Allocate gets, or which error.
func TestAllocateAddressFamilies(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.1")
	v6 := netip.MustParseAddr("2001:db8::1")
	token := stun.RawAttribute{Type: stun.AttrReservationToken, Value: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	cases := []struct {
		name    string
		attrs   []stun.Setter
		failV6  error
		want    int
		relays  []netip.Addr
		addrErr []byte // ADDRESS-ERROR-CODE value, nil for none
		closed  int    // relays closed by a refused request
	}{
		{"no family: IPv4", nil, nil, 0, []netip.Addr{v4}, nil, 0},
		{"requested IPv4", []stun.Setter{requestedFamily(familyIPv4)}, nil, 0, []netip.Addr{v4}, nil, 0},
		{"requested IPv6", []stun.Setter{requestedFamily(familyIPv6)}, nil, 0, []netip.Addr{v6}, nil, 0},
		{"requested IPv6, none", []stun.Setter{requestedFamily(familyIPv6)}, ErrAddressFamily, 440, nil, nil, 0},
		{"requested unknown family", []stun.Setter{requestedFamily(9)}, nil, 440, nil, nil, 0},
		{"requested empty", []stun.Setter{stun.RawAttribute{Type: stun.AttrRequestedAddressFamily}}, nil, 400, nil, nil, 0},
		{"additional IPv6: dual", []stun.Setter{additionalFamilyAttr(familyIPv6)}, nil, 0, []netip.Addr{v4, v6}, nil, 0},
		{"additional IPv6 (draft code point, coturn): dual", []stun.Setter{stun.RawAttribute{Type: attrAdditionalAddressFamilyDraft, Value: []byte{familyIPv6, 0, 0, 0}}}, nil, 0, []netip.Addr{v4, v6}, nil, 0},
		{"additional IPv6, no IPv6 port", []stun.Setter{additionalFamilyAttr(familyIPv6)}, ErrNoCapacity, 0, []netip.Addr{v4}, []byte{familyIPv6, 0, 5, 8}, 0},
		{"additional IPv6, no IPv6 address", []stun.Setter{additionalFamilyAttr(familyIPv6)}, ErrAddressFamily, 440, nil, nil, 1},
		{"additional IPv4", []stun.Setter{additionalFamilyAttr(familyIPv4)}, nil, 400, nil, nil, 0},
		{"additional unknown family", []stun.Setter{additionalFamilyAttr(7)}, nil, 440, nil, nil, 0},
		{"additional empty", []stun.Setter{stun.RawAttribute{Type: attrAdditionalAddressFamily}}, nil, 400, nil, nil, 0},
		{"requested and additional", []stun.Setter{requestedFamily(familyIPv4), additionalFamilyAttr(familyIPv6)}, nil, 400, nil, nil, 0},
		{"additional with token", []stun.Setter{additionalFamilyAttr(familyIPv6), token}, nil, 400, nil, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.relays.failV6 = tc.failV6
			m := f.client("user", "pass").do(stun.MethodAllocate, append([]stun.Setter{transportUDP()}, tc.attrs...)...)
			if code(m) != tc.want {
				t.Fatalf("code %d, want %d", code(m), tc.want)
			}
			var got []netip.Addr
			for _, ap := range relayedAddrs(t, m) {
				got = append(got, ap.Addr())
			}
			if len(got) != len(tc.relays) {
				t.Fatalf("relayed addresses %v, want %v", got, tc.relays)
			}
			for i := range got {
				if got[i] != tc.relays[i] {
					t.Fatalf("relayed addresses %v, want %v", got, tc.relays)
				}
			}
			v, err := m.Get(attrAddressErrorCode)
			if _, e := m.Get(attrAddressErrorCodeDraft); e == nil {
				t.Error("ADDRESS-ERROR-CODE under the draft code point for an RFC 8656 request")
			}
			if (err == nil) != (tc.addrErr != nil) || string(v) != string(tc.addrErr) {
				t.Errorf("ADDRESS-ERROR-CODE %x, want %x", v, tc.addrErr)
			}
			closed := 0
			for _, r := range f.relays.relays {
				if r.closed {
					closed++
				}
			}
			if closed != tc.closed {
				t.Errorf("%d relays closed, want %d", closed, tc.closed)
			}
			if tc.want != 0 && f.e.Allocations() != 0 {
				t.Error("a refused Allocate left an allocation")
			}
			if len(f.relays.reqs) > 0 && !f.relays.reqs[0].Default != (len(tc.attrs) > 0) {
				t.Errorf("RelayRequest.Default = %v", f.relays.reqs[0].Default)
			}
		})
	}
}

// TestDualAllocationRelays: a dual allocation relays to peers of both
// families, each from the relayed transport address of its family, and
// its deletion closes both relays and frees one quota slot.
func TestDualAllocationRelays(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Settings.AllocationsPerIP = 1 })
	c := f.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP(), additionalFamilyAttr(familyIPv6)); code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	a := f.e.Lookup(clientTuple)
	peer4 := peerAddr
	peer6 := netip.MustParseAddrPort("[2001:db8:1::5]:7000")
	if m := c.do(stun.MethodCreatePermission, peerAttr(peer4), peerAttr(peer6)); code(m) != 0 {
		t.Fatalf("CreatePermission to both families: %d", code(m))
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peer6)); code(m) != 0 {
		t.Fatalf("ChannelBind to an IPv6 peer: %d", code(m))
	}
	mapped := netip.AddrPortFrom(netip.AddrFrom16(peer4.Addr().As16()), peer4.Port())
	for _, p := range []netip.AddrPort{peer4, peer6, mapped} {
		var r Result
		f.e.HandleClient(testListener{}, clientTuple, sendIndication(t, p, []byte("x")), &r)
		if r.Kind != Forward {
			t.Fatalf("Send to %v: kind %d drop %v", p, r.Kind, r.Drop)
		}
		want := a.relays[familyIndex(p.Addr())]
		if got := r.Alloc.RelayFor(r.Peer.Addr()); got != want || got.Addr().Addr().Is4() != p.Addr().Unmap().Is4() {
			t.Errorf("Send to %v leaves from %v", p, got.Addr())
		}
	}
	buf := make([]byte, PeerHeadroom+8+PeerTailroom)
	n := copy(buf[PeerHeadroom:], "v4")
	if _, _, ok := f.e.HandlePeer(a, peer4, buf, PeerHeadroom, n); !ok {
		t.Error("data from the IPv4 peer dropped")
	}
	if m := c.do(stun.MethodRefresh, lifetimeSetter(0)); code(m) != 0 {
		t.Fatalf("delete: %d", code(m))
	}
	for _, r := range f.relays.relays {
		if !r.closed {
			t.Errorf("relay %v not closed", r.addr)
		}
	}
	// The per-IP cap of 1 is free again: the dual allocation held one slot.
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("allocate after delete: %d", code(m))
	}
}

// TestPeerAddressFamilyMismatch: a peer of a family the allocation has no
// relayed transport address of gets 443 (RFC 8656 §9.2, §11.2).
func TestPeerAddressFamilyMismatch(t *testing.T) {
	peer6 := netip.MustParseAddrPort("[2001:db8:1::5]:7000")
	cases := []struct {
		name   string
		family byte
		peer   netip.AddrPort
	}{
		{"IPv4 allocation, IPv6 peer", familyIPv4, peer6},
		{"IPv6 allocation, IPv4 peer", familyIPv6, peerAddr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := f.client("user", "pass")
			if m := c.do(stun.MethodAllocate, transportUDP(), requestedFamily(tc.family)); code(m) != 0 {
				t.Fatalf("allocate: %d", code(m))
			}
			if m := c.do(stun.MethodCreatePermission, peerAttr(tc.peer)); code(m) != 443 {
				t.Errorf("CreatePermission: %d, want 443", code(m))
			}
			if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(tc.peer)); code(m) != 443 {
				t.Errorf("ChannelBind: %d, want 443", code(m))
			}
		})
	}
}

// TestAddressErrorCodeDraft: a dual Allocate under the drafts' code point
// (coturn's 0x8032) that gets no IPv6 port hears why under the drafts'
// ADDRESS-ERROR-CODE, 0x8033, and not under RFC 8656's.
func TestAddressErrorCodeDraft(t *testing.T) {
	f := newFixture(t)
	f.relays.failV6 = ErrNoCapacity
	m := f.client("user", "pass").do(stun.MethodAllocate, transportUDP(),
		stun.RawAttribute{Type: attrAdditionalAddressFamilyDraft, Value: []byte{familyIPv6, 0, 0, 0}})
	if code(m) != 0 || len(relayedAddrs(t, m)) != 1 {
		t.Fatalf("code %d, relayed %v", code(m), relayedAddrs(t, m))
	}
	if v, err := m.Get(attrAddressErrorCodeDraft); err != nil || string(v) != string([]byte{familyIPv6, 0, 5, 8}) {
		t.Errorf("ADDRESS-ERROR-CODE (0x8033) %x %v, want 02000508", v, err)
	}
	if m.Contains(attrAddressErrorCode) {
		t.Error("ADDRESS-ERROR-CODE under RFC 8656's code point too")
	}
}

// TestDualAllocationRefusedQuota: an ADDITIONAL-ADDRESS-FAMILY Allocate
// refused with 440 gives back its allocation's quota slot; a port its
// EVEN-PORT reserved keeps one until claimed or swept, as any reservation.
func TestDualAllocationRefusedQuota(t *testing.T) {
	evenR := stun.RawAttribute{Type: stun.AttrEvenPort, Value: []byte{0x80}}
	for _, tc := range []struct {
		name  string
		attrs []stun.Setter
		held  int // quota slots still held after the 440
	}{
		{"plain", nil, 0},
		{"EVEN-PORT with R", []stun.Setter{evenR}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Settings.AllocationsPerIP = 2 })
			f.relays.failV6 = ErrAddressFamily
			c := f.client("user", "pass")
			attrs := append([]stun.Setter{transportUDP(), additionalFamilyAttr(familyIPv6)}, tc.attrs...)
			if m := c.do(stun.MethodAllocate, attrs...); code(m) != 440 {
				t.Fatalf("code %d, want 440", code(m))
			}
			// 2 - held more allocations fit; the next gets 486.
			for i := 0; i < 2-tc.held; i++ {
				c.ft.Client = netip.AddrPortFrom(clientAddr.Addr(), uint16(40000+i))
				if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
					t.Fatalf("allocation %d after the 440: code %d", i, code(m))
				}
			}
			c.ft.Client = netip.AddrPortFrom(clientAddr.Addr(), 40100)
			if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
				t.Fatalf("allocation past the quota: code %d, want 486", code(m))
			}
		})
	}
}
