package turn

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// minTableSlots is the smallest slot array (8 KiB of pointers).
const minTableSlots = 1 << 10

// table maps 5-tuples to allocations. It is an open-addressing hash table
// of atomic pointers with linear probing: a read hashes the key and loads
// slots until it finds the allocation or an empty slot, with no lock and no
// allocation. Writers (Allocate, delete, expiry) serialize on mu and store
// into the live array in place; deleted slots hold a tombstone so probe
// chains stay intact. When live plus deleted slots would pass half the
// array, the writer builds a new array and swaps it in; readers still on
// the old one see a consistent, slightly stale table, as with any
// copy-on-write snapshot.
//
// A held allocation costs 2-4 slots (16-32 bytes), where a map per shard
// cost ~10 times that, and an Allocate makes no garbage except on a resize.
// The zero value is an empty table.
type table struct {
	mu    sync.Mutex
	slots atomic.Pointer[tableSlots]
	count atomic.Int64
	// Under mu: tombstones in the current array, and the hash seed, drawn
	// once so that clients cannot choose ports that collide.
	tombs  int
	seed   uint64
	seeded bool
}

type tableSlots struct {
	mask uint64
	seed uint64
	s    []atomic.Pointer[Allocation]
}

// tombstone marks a deleted slot; it is never a real allocation.
var tombstone = new(Allocation)

// tupleKey packs a 5-tuple into 24 bytes, cheaper to hash and compare than
// FiveTuple, whose netip.Addr fields carry zone handles. The server address
// is folded to 32 bits: two listeners that differ only in the folded bits
// of their IPv6 addresses and share a port would share keys, which no real
// deployment has.
type tupleKey struct {
	hi, lo uint64 // client IP (IPv4 mapped into IPv6)
	rest   uint64 // client port, server port, server IP fold, protocol
}

func keyOf(ft FiveTuple) tupleKey {
	c := ft.Client.Addr().As16()
	s := ft.Server.Addr().As16()
	fold := binary.LittleEndian.Uint32(s[12:]) ^ binary.LittleEndian.Uint32(s[8:]) ^
		binary.LittleEndian.Uint32(s[4:]) ^ binary.LittleEndian.Uint32(s[:4])
	return tupleKey{
		hi:   binary.LittleEndian.Uint64(c[:8]),
		lo:   binary.LittleEndian.Uint64(c[8:]),
		rest: uint64(ft.Client.Port()) | uint64(ft.Server.Port())<<16 | uint64(fold&0xFFFFFF)<<32 | uint64(ft.Proto)<<56,
	}
}

// hash mixes the key with a seed (multiply and xor-shift rounds), so that
// consecutive client ports spread over the array.
func (k tupleKey) hash(seed uint64) uint64 {
	const m = 0xD6E8FEB86659FD93
	h := (k.hi ^ seed) * m
	h = (h ^ h>>32 ^ k.lo) * m
	h = (h ^ h>>32 ^ k.rest) * m
	return h ^ h>>32
}

func (t *table) get(ft FiveTuple) *Allocation {
	ts := t.slots.Load()
	if ts == nil {
		return nil
	}
	k := keyOf(ft)
	for i := k.hash(ts.seed) & ts.mask; ; i = (i + 1) & ts.mask {
		a := ts.s[i].Load()
		if a == nil {
			return nil
		}
		if a != tombstone && a.key == k {
			return a
		}
	}
}

// insert adds a unless the 5-tuple already has an allocation, which it
// returns instead.
func (t *table) insert(a *Allocation) (existing *Allocation) {
	a.key = keyOf(a.FiveTuple)
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.slots.Load()
	if ts == nil || int(t.count.Load())+t.tombs+1 > len(ts.s)/2 {
		ts = t.rebuild(int(t.count.Load()) + 1)
	}
	free := -1
	for i := a.key.hash(ts.seed) & ts.mask; ; i = (i + 1) & ts.mask {
		cur := ts.s[i].Load()
		switch {
		case cur == nil:
			if free < 0 {
				free = int(i)
			} else {
				t.tombs-- // reusing a tombstone
			}
			ts.s[free].Store(a)
			t.count.Add(1)
			return nil
		case cur == tombstone:
			if free < 0 {
				free = int(i)
			}
		case cur.key == a.key:
			return cur
		}
	}
}

// remove deletes a if it is still the allocation of its 5-tuple, and
// reports whether it did.
func (t *table) remove(a *Allocation) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.slots.Load()
	if ts == nil {
		return false
	}
	for i := a.key.hash(ts.seed) & ts.mask; ; i = (i + 1) & ts.mask {
		cur := ts.s[i].Load()
		if cur == nil {
			return false
		}
		if cur == a {
			ts.s[i].Store(tombstone)
			t.count.Add(-1)
			t.tombs++
			if t.tombs > len(ts.s)/4 {
				t.rebuild(int(t.count.Load()))
			}
			return true
		}
	}
}

// rebuild swaps in a new array sized for n live allocations at a load of at
// most a quarter, without tombstones, and returns it. The caller holds mu.
func (t *table) rebuild(n int) *tableSlots {
	if !t.seeded {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails on supported platforms
		t.seed, t.seeded = binary.LittleEndian.Uint64(b[:]), true
	}
	size := minTableSlots
	for size < 4*n {
		size *= 2
	}
	next := &tableSlots{mask: uint64(size - 1), seed: t.seed, s: make([]atomic.Pointer[Allocation], size)}
	if old := t.slots.Load(); old != nil {
		for i := range old.s {
			a := old.s[i].Load()
			if a == nil || a == tombstone {
				continue
			}
			j := a.key.hash(next.seed) & next.mask
			for next.s[j].Load() != nil {
				j = (j + 1) & next.mask
			}
			next.s[j].Store(a)
		}
	}
	t.tombs = 0
	t.slots.Store(next)
	return next
}

// each calls f for every allocation in a snapshot of the table.
func (t *table) each(f func(*Allocation)) {
	ts := t.slots.Load()
	if ts == nil {
		return
	}
	for i := range ts.s {
		if a := ts.s[i].Load(); a != nil && a != tombstone {
			f(a)
		}
	}
}
