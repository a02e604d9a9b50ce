package turn

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v2"
)

// fixedCluster admits every peer under one cluster number.
type fixedCluster uint32

func (c fixedCluster) PeerCluster(netip.AddrPort) (uint32, bool) { return uint32(c), true }

// TestClusterNumbers: the transport's cluster number for a peer comes back
// with every packet relayed to it (Result.Cluster) and from it
// (HandlePeer), from the channel or the permission that let it through, and
// Revalidate files them under the number the transport gives now.
func TestClusterNumbers(t *testing.T) {
	f, c, a := allocated(t)
	ranged := netip.MustParseAddrPort("198.51.100.200:5001") // testListener: cluster 3
	c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr))
	c.do(stun.MethodCreatePermission, peerAttr(ranged))
	buf := make([]byte, PeerHeadroom+64+PeerTailroom)

	check := func(stage string, want, wantRanged uint32) {
		t.Helper()
		var r Result
		f.e.HandleClient(testListener{}, clientTuple, channelData(0x4001, []byte("x")), &r)
		if r.Kind != Forward || r.Cluster != want {
			t.Errorf("%s: ChannelData: kind %d cluster %d, want Forward under %d", stage, r.Kind, r.Cluster, want)
		}
		if _, cl, ok := f.e.HandlePeer(a, peerAddr, buf, PeerHeadroom, 1); !ok || cl != want {
			t.Errorf("%s: from the channel's peer: ok=%v cluster %d, want %d", stage, ok, cl, want)
		}
		if _, cl, ok := f.e.HandlePeer(a, ranged, buf, PeerHeadroom, 1); !ok || cl != wantRanged {
			t.Errorf("%s: from a permitted peer: ok=%v cluster %d, want %d", stage, ok, cl, wantRanged)
		}
	}
	check("bound", 1, 3)

	// A Send indication asks the transport each time.
	var r Result
	f.e.HandleClient(testListener{}, clientTuple, sendIndication(t, ranged, []byte("x")), &r)
	if r.Kind != Forward || r.Cluster != 3 {
		t.Errorf("Send: kind %d cluster %d, want Forward under 3", r.Kind, r.Cluster)
	}
	f.e.HandleClient(testListener{}, clientTuple, channelData(0x4002, []byte("x")), &r)
	if r.Kind != Drop || r.Cluster != 0 {
		t.Errorf("dropped ChannelData: kind %d cluster %d, want a drop under 0", r.Kind, r.Cluster)
	}

	a.Transport = fixedCluster(9)
	f.e.Revalidate()
	check("revalidated", 9, 9)
}

// TestAllocationErrorsByCode: error responses to Allocate are counted by
// code, except the 401 that starts every allocation.
func TestAllocationErrorsByCode(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AllocationsPerUser = 1 })
	c := f.client("user", "pass")
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("allocate: code %d", code(m))
	}
	if n := f.e.AllocationErrors(401); n != 0 {
		t.Errorf("the challenge before a successful Allocate counted as %d errors", n)
	}
	// A second Allocate on the same 5-tuple with another transaction: 437.
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 437 {
		t.Fatalf("second allocate: code %d, want 437", code(m))
	}
	// Over the per-user quota from another 5-tuple: 486.
	c2 := f.client("user", "pass")
	c2.ft.Client = netip.MustParseAddrPort("203.0.113.8:50000")
	if m := c2.do(stun.MethodAllocate, transportUDP()); code(m) != 486 {
		t.Fatalf("over quota: code %d, want 486", code(m))
	}
	// Wrong password: a signed Allocate that fails authentication.
	bad := f.client("user", "wrong")
	bad.ft.Client = netip.MustParseAddrPort("203.0.113.9:50000")
	if m := bad.do(stun.MethodAllocate, transportUDP()); code(m) != 401 {
		t.Fatalf("bad password: code %d, want 401", code(m))
	}
	// A Refresh error is not an Allocate error.
	other := f.client("user", "pass")
	other.ft.Client = netip.MustParseAddrPort("203.0.113.10:50000")
	if m := other.do(stun.MethodRefresh); code(m) != 437 {
		t.Fatalf("refresh without allocation: code %d, want 437", code(m))
	}
	want := map[int]uint64{437: 1, 486: 1, 401: 1}
	for _, code := range AllocationErrorCodes {
		if got := f.e.AllocationErrors(code); got != want[code] {
			t.Errorf("AllocationErrors(%d) = %d, want %d", code, got, want[code])
		}
	}
	if got := f.e.AllocationErrors(0); got != 0 {
		t.Errorf("AllocationErrors(0) = %d, want 0", got)
	}
	if got := f.e.AllocationErrors(999); got != 0 {
		t.Errorf("AllocationErrors(999) = %d, want 0", got)
	}
}
