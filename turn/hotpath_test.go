package turn

import (
	"testing"

	"github.com/pion/stun/v2"
)

// hotFixture returns an engine with one allocation that has channel 0x4001
// bound to peerAddr, and the packets of both relayed paths.
func hotFixture(t testing.TB) (*Engine, *Allocation, []byte, []byte) {
	f := newFixture(t)
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	payload := make([]byte, 100)
	return f.e, f.e.Lookup(clientTuple), channelData(0x4001, payload), sendIndication(t, peerAddr, payload)
}

// TestRelayPathsDoNotAllocate is the allocation-count regression guard of
// the hot-path rules (docs/performance.md): no heap allocation per relayed
// packet, in either direction, on any of the three relayed paths.
func TestRelayPathsDoNotAllocate(t *testing.T) {
	e, a, cd, send := hotFixture(t)
	var r Result
	buf := make([]byte, PeerHeadroom+1500+PeerTailroom)
	cases := map[string]func(){
		"client ChannelData": func() { e.HandleClient(testListener{}, clientTuple, cd, &r) },
		"client Send":        func() { e.HandleClient(testListener{}, clientTuple, send, &r) },
		"peer ChannelData":   func() { e.HandlePeer(a, peerAddr, buf, PeerHeadroom, 100) },
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per packet, want 0", name, n)
		}
	}
	// Data indication: a peer with a permission but no channel.
	f := newFixture(t)
	c := f.client("user", "pass")
	c.do(stun.MethodAllocate, transportUDP())
	c.do(stun.MethodCreatePermission, peerAttr(peerAddr))
	a2 := f.e.Lookup(clientTuple)
	if n := testing.AllocsPerRun(1000, func() { f.e.HandlePeer(a2, peerAddr, buf, PeerHeadroom, 100) }); n != 0 {
		t.Errorf("peer Data indication: %v allocations per packet, want 0", n)
	}
	if r.Kind != Forward {
		t.Fatal("hot path fixture did not relay")
	}
	// A channel above 0x4FFF (as coturn's turnutils_uclient binds) is
	// looked up in the page directory made on its first bind: no
	// allocation per packet either.
	c.do(stun.MethodChannelBind, channelNumber(0x7ABC), peerAttr(peerAddr))
	high := channelData(0x7ABC, make([]byte, 100))
	if n := testing.AllocsPerRun(1000, func() { f.e.HandleClient(testListener{}, clientTuple, high, &r) }); n != 0 {
		t.Errorf("client ChannelData on 0x7ABC: %v allocations per packet, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { f.e.HandlePeer(a2, peerAddr, buf, PeerHeadroom, 100) }); n != 0 {
		t.Errorf("peer ChannelData on 0x7ABC: %v allocations per packet, want 0", n)
	}
	if r.Kind != Forward {
		t.Fatal("ChannelData on 0x7ABC not relayed")
	}
}

func BenchmarkChannelDataClientToPeer(b *testing.B) {
	e, _, cd, _ := hotFixture(b)
	var r Result
	b.ReportAllocs()
	b.SetBytes(int64(len(cd)))
	for b.Loop() {
		e.HandleClient(testListener{}, clientTuple, cd, &r)
	}
	if r.Kind != Forward {
		b.Fatal("not relayed")
	}
}

func BenchmarkChannelDataPeerToClient(b *testing.B) {
	e, a, _, _ := hotFixture(b)
	buf := make([]byte, PeerHeadroom+1500+PeerTailroom)
	b.ReportAllocs()
	b.SetBytes(100)
	for b.Loop() {
		if _, _, ok := e.HandlePeer(a, peerAddr, buf, PeerHeadroom, 100); !ok {
			b.Fatal("dropped")
		}
	}
}

func BenchmarkSendIndication(b *testing.B) {
	e, _, _, send := hotFixture(b)
	var r Result
	b.ReportAllocs()
	b.SetBytes(int64(len(send)))
	for b.Loop() {
		e.HandleClient(testListener{}, clientTuple, send, &r)
	}
	if r.Kind != Forward {
		b.Fatal("not relayed")
	}
}
