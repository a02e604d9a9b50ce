package relay

import (
	"runtime"
	"testing"

	"github.com/tern-gw/tern/turn"
)

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestRelayCost: what 1,000 open relay sockets hold on the Go heap, each,
// is within Pool.RelayCost, which the engine's state budget charges per
// relay socket (issue 22, item 5).
func TestRelayCost(t *testing.T) {
	const n = 1000
	p := newTestPool(t, 31000, 31000+n-1)
	a := &turn.Allocation{Transport: streamClient{}}
	rs := make([]turn.Relay, 0, n)
	before := liveHeap()
	for range n {
		r, _, err := p.Allocate(a, turn.RelayRequest{})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	per := (liveHeap() - before) / n
	t.Logf("relay socket: %d bytes each with %d workers (charged %d)", per, p.Workers(), p.RelayCost())
	if per > p.RelayCost() {
		t.Errorf("a relay socket holds %d bytes, more than the %d RelayCost charges", per, p.RelayCost())
	}
	for _, r := range rs {
		r.Close()
	}
}
