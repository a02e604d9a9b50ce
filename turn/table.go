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
	m  atomic.Pointer[map[tupleKey]*Allocation]
	_  [40]byte // keep shards on separate cache lines
}

// tupleKey packs a 5-tuple into 24 bytes: the map hashes and compares it
// much faster than FiveTuple, whose netip.Addr fields carry zone handles.
// The server address is folded to 32 bits: two listeners that differ only
// in the folded bits of their IPv6 addresses and share a port would share
// keys, which no real deployment has.
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

func (k tupleKey) shard() uint32 {
	h := (k.lo ^ k.rest) * 0x9E3779B97F4A7C15
	return uint32(h >> 56)
}

func (t *table) get(ft FiveTuple) *Allocation {
	k := keyOf(ft)
	m := t.shards[k.shard()].m.Load()
	if m == nil {
		return nil
	}
	return (*m)[k]
}

// insert adds a unless the 5-tuple already has an allocation, which it
// returns instead.
func (t *table) insert(a *Allocation) (existing *Allocation) {
	key := keyOf(a.FiveTuple)
	s := &t.shards[key.shard()]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if e := (*old)[key]; e != nil {
			return e
		}
	}
	next := make(map[tupleKey]*Allocation, mapLen(old)+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[key] = a
	s.m.Store(&next)
	t.count.Add(1)
	return nil
}

// remove deletes a if it is still the allocation of its 5-tuple, and
// reports whether it did.
func (t *table) remove(a *Allocation) bool {
	key := keyOf(a.FiveTuple)
	s := &t.shards[key.shard()]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old == nil || (*old)[key] != a {
		return false
	}
	next := make(map[tupleKey]*Allocation, len(*old))
	for k, v := range *old {
		if k != key {
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

func mapLen(m *map[tupleKey]*Allocation) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
