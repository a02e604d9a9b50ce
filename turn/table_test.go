package turn

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

func tupleN(i int) FiveTuple {
	return FiveTuple{
		Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), uint16(40000+i%1000)),
		Server: netip.MustParseAddrPort("127.0.0.1:3478"),
		Proto:  ProtoUDP,
	}
}

// TestTable inserts, finds and removes enough allocations to force several
// resizes and tombstone clean-ups, checking every lookup against a map.
func TestTable(t *testing.T) {
	var tb table
	if tb.get(tupleN(1)) != nil {
		t.Fatal("empty table found an allocation")
	}
	const n = 20000
	allocs := make([]*Allocation, n)
	for i := range allocs {
		allocs[i] = &Allocation{FiveTuple: tupleN(i)}
		if e := tb.insert(allocs[i]); e != nil {
			t.Fatalf("insert %d: found existing %v", i, e.FiveTuple)
		}
	}
	if e := tb.insert(&Allocation{FiveTuple: tupleN(7)}); e != allocs[7] {
		t.Fatalf("second insert of a 5-tuple returned %p, want the first allocation %p", e, allocs[7])
	}
	if got := tb.count.Load(); got != n {
		t.Fatalf("count %d, want %d", got, n)
	}
	// Remove every other one, then re-add half of those: tombstones are
	// reused and cleaned up along the way.
	for i := 0; i < n; i += 2 {
		if !tb.remove(allocs[i]) {
			t.Fatalf("remove %d failed", i)
		}
		if tb.remove(allocs[i]) {
			t.Fatalf("remove %d twice succeeded", i)
		}
	}
	for i := 0; i < n; i += 4 {
		allocs[i] = &Allocation{FiveTuple: tupleN(i)}
		if e := tb.insert(allocs[i]); e != nil {
			t.Fatalf("re-insert %d: found existing", i)
		}
	}
	want := 0
	for i := range allocs {
		live := i%2 == 1 || i%4 == 0
		got := tb.get(tupleN(i))
		switch {
		case live && got != allocs[i]:
			t.Fatalf("get %d = %p, want %p", i, got, allocs[i])
		case !live && got != nil:
			t.Fatalf("get %d = %p after remove, want nil", i, got)
		}
		if live {
			want++
		}
	}
	seen := 0
	tb.each(func(*Allocation) { seen++ })
	if seen != want || int(tb.count.Load()) != want {
		t.Fatalf("each saw %d, count %d, want %d", seen, tb.count.Load(), want)
	}
	// A stale allocation of a 5-tuple is not removed in place of the live one.
	if tb.remove(&Allocation{FiveTuple: tupleN(1)}) || tb.get(tupleN(1)) != allocs[1] {
		t.Fatal("remove of another allocation with the same 5-tuple took the live one")
	}
}

// TestTableConcurrent runs lock-free readers against writers that insert,
// remove and resize (run with -race): a reader must always find an
// allocation that stays in the table.
func TestTableConcurrent(t *testing.T) {
	var tb table
	const stable = 500
	for i := range stable {
		tb.insert(&Allocation{FiveTuple: tupleN(i)})
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var misses atomic.Int64
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; !stop.Load(); j++ {
				if tb.get(tupleN((j+r)%stable)) == nil {
					misses.Add(1)
				}
			}
		}()
	}
	for i := stable; i < stable+20000; i++ {
		a := &Allocation{FiveTuple: tupleN(i)}
		tb.insert(a)
		if i%3 != 0 {
			tb.remove(a)
		}
	}
	stop.Store(true)
	wg.Wait()
	if m := misses.Load(); m != 0 {
		t.Fatalf("readers missed a stable allocation %d times", m)
	}
}

// BenchmarkTableGet is the per-packet lookup at 10k held allocations.
func BenchmarkTableGet(b *testing.B) {
	var tb table
	for i := range 10000 {
		tb.insert(&Allocation{FiveTuple: tupleN(i)})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if tb.get(tupleN(i%10000)) == nil {
			b.Fatal("miss")
		}
	}
}
