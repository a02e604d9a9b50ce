package turn

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pion/stun/v2"
)

// TestExportImport moves an allocation with a permission and a channel
// from one engine to another, as a hand-over does: the second engine then
// relays on the channel and by Send indication, accepts the first engine's
// nonce, refreshes the allocation and counts its quota and state.
func TestExportImport(t *testing.T) {
	old := newFixture(t)
	c := old.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("Allocate: %v", m)
	}
	if m := c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr)); code(m) != 0 {
		t.Fatalf("ChannelBind: %v", m)
	}
	other := netip.MustParseAddrPort("198.51.100.11:7000")
	if m := c.do(stun.MethodCreatePermission, peerAttr(other)); code(m) != 0 {
		t.Fatalf("CreatePermission: %v", m)
	}
	var states []AllocationState
	old.e.Export(func(a *Allocation) { states = append(states, a.State()) })
	if len(states) != 1 {
		t.Fatalf("exported %d allocations, want 1", len(states))
	}

	next := newFixture(t)
	next.clock = old.clock
	next.e.clock = old.clock
	next.e.SetNonceKey(old.e.NonceKey())
	a, err := next.e.Import(states[0], testListener{}, func(*Allocation) ([]Relay, error) {
		return []Relay{&testRelay{addr: states[0].Relays[0]}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(states[0], a.State(), cmp.Comparer(func(x, y netip.Addr) bool { return x == y }),
		cmp.Comparer(func(x, y netip.AddrPort) bool { return x == y })); diff != "" {
		t.Errorf("imported state differs (-exported +imported):\n%s", diff)
	}
	if got, want := next.e.StateBytes(), old.e.StateBytes(); got != want {
		t.Errorf("state bytes %d, want %d as in the exporting engine", got, want)
	}
	var r Result
	next.e.HandleClient(testListener{}, clientTuple, channelData(0x4001, []byte("media")), &r)
	if r.Kind != Forward || r.Peer != peerAddr || r.Cluster != 1 {
		t.Errorf("ChannelData after import: kind %d peer %v cluster %d, want a forward to %v in cluster 1", r.Kind, r.Peer, r.Cluster, peerAddr)
	}
	next.e.HandleClient(testListener{}, clientTuple, sendIndication(t, other, []byte("x")), &r)
	if r.Kind != Forward || r.Peer != other {
		t.Errorf("Send indication after import: kind %d drop %v, want a forward to %v", r.Kind, r.Drop, other)
	}
	// The client keeps its nonce: the refresh needs no 438 round.
	c.f = next
	if m := next.send(c.ft, c.signed(stun.MethodRefresh)); code(m) != 0 {
		t.Errorf("Refresh with the old engine's nonce: %v", m)
	}
	// Quota: a second allocation of the user on a per-user cap of 1 is refused.
	s := *next.e.settings.Load()
	s.AllocationsPerUser = 1
	if err := next.e.Reconfigure(s); err != nil {
		t.Fatal(err)
	}
	c2 := next.client("user", "pass")
	c2.ft.Client = netip.MustParseAddrPort("203.0.113.8:50000")
	if m := c2.do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Errorf("second Allocate over a per-user cap of 1: %v, want 486", m)
	}
	if _, err := next.e.Import(states[0], testListener{}, func(*Allocation) ([]Relay, error) {
		return []Relay{&testRelay{addr: states[0].Relays[0]}}, nil
	}); !errors.Is(err, ErrImport) {
		t.Errorf("importing a 5-tuple twice: %v, want ErrImport", err)
	}
	next.e.Close()
	if n := next.e.StateBytes(); n != 0 {
		t.Errorf("state bytes after Close: %d, want 0", n)
	}
}

// TestImportRefusesInvalid: Import installs nothing from a state it cannot
// hold, and says which part is wrong.
func TestImportRefusesInvalid(t *testing.T) {
	good := AllocationState{FiveTuple: clientTuple, Username: "user", Relays: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:49152")}, Expires: t0.Add(DefaultLifetime).UnixNano()}
	for name, mut := range map[string]func(*AllocationState){
		"tcp":         func(s *AllocationState) { s.FiveTuple.Proto = ProtoTCP },
		"no relay":    func(s *AllocationState) { s.Relays = nil },
		"two v4":      func(s *AllocationState) { s.Relays = append(s.Relays, s.Relays[0]) },
		"channel num": func(s *AllocationState) { s.Channels = []ChannelState{{Number: 0x3FFF, Peer: peerAddr}} },
		"channel dup": func(s *AllocationState) {
			s.Channels = []ChannelState{{Number: 0x4000, Peer: peerAddr}, {Number: 0x4000, Peer: deniedPeer}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			st := good
			st.Relays = append([]netip.AddrPort(nil), good.Relays...)
			mut(&st)
			opened := false
			_, err := f.e.Import(st, testListener{}, func(*Allocation) ([]Relay, error) { opened = true; return nil, nil })
			if !errors.Is(err, ErrImport) || opened || f.e.Allocations() != 0 {
				t.Errorf("Import: %v (opened %v, %d allocations), want ErrImport and nothing installed", err, opened, f.e.Allocations())
			}
		})
	}
}
