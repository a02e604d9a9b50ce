package turn

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// tableShards is the number of independently copied shards. Writers copy
// one shard's map, so at 60k allocations a write copies ~240 entries.
const tableShards = 256

// table maps 5-tuples to allocations. Reads are an atomic load of the
// shard's current map and a map lookup: no lock, no allocation. Writes
// (Allocate, delete, expiry) copy the shard's map and swap it in.
type table struct {
	shards [tableShards]tableShard
	count  atomic.Int64
}

type tableShard struct {
	mu sync.Mutex
	m  atomic.Pointer[map[FiveTuple]*Allocation]
	_  [40]byte // keep shards on separate cache lines
}

func shardOf(ft FiveTuple) uint32 {
	a := ft.Client.Addr().As16()
	h := binary.LittleEndian.Uint64(a[8:]) ^ uint64(ft.Client.Port())<<32 ^ uint64(ft.Server.Port())
	h *= 0x9E3779B97F4A7C15
	return uint32(h >> 56)
}

func (t *table) get(ft FiveTuple) *Allocation {
	m := t.shards[shardOf(ft)].m.Load()
	if m == nil {
		return nil
	}
	return (*m)[ft]
}

// insert adds a unless the 5-tuple already has an allocation, which it
// returns instead.
func (t *table) insert(a *Allocation) (existing *Allocation) {
	s := &t.shards[shardOf(a.FiveTuple)]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if e := (*old)[a.FiveTuple]; e != nil {
			return e
		}
	}
	next := make(map[FiveTuple]*Allocation, mapLen(old)+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[a.FiveTuple] = a
	s.m.Store(&next)
	t.count.Add(1)
	return nil
}

// remove deletes a if it is still the allocation of its 5-tuple, and
// reports whether it did.
func (t *table) remove(a *Allocation) bool {
	s := &t.shards[shardOf(a.FiveTuple)]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old == nil || (*old)[a.FiveTuple] != a {
		return false
	}
	next := make(map[FiveTuple]*Allocation, len(*old))
	for k, v := range *old {
		if k != a.FiveTuple {
			next[k] = v
		}
	}
	s.m.Store(&next)
	t.count.Add(-1)
	return true
}

// each calls f for every allocation in a snapshot of the table.
func (t *table) each(f func(*Allocation)) {
	for i := range t.shards {
		m := t.shards[i].m.Load()
		if m == nil {
			continue
		}
		for _, a := range *m {
			f(a)
		}
	}
}

func mapLen(m *map[FiveTuple]*Allocation) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
