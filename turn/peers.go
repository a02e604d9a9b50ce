package turn

import (
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"sync/atomic"
)

// Caps per allocation. A permission costs about 80 bytes and a channel
// about 100 (entry, index slot, its share of a number page), so an
// allocation holds at most ~80 KiB of permissions and ~400 KiB of channels,
// ~520 KiB when its 4,096 channels are spread over the whole number range
// (every page of 0x4000-0x7FFF made, 128 KiB).
const (
	// MaxPermissions is how many peer IPs one allocation may hold
	// permissions for (RFC 8656 §9). A CreatePermission or ChannelBind that
	// would pass it gets 508 Insufficient Capacity and installs nothing.
	MaxPermissions = 1024
	// MaxChannels is how many channels one allocation may bind: as many as
	// RFC 8656 §12's number range (0x4000-0x4FFF) holds. The accepted range
	// (0x4000-0x7FFF, RFC 5766) is four times larger; a ChannelBind past
	// the cap gets 508.
	MaxChannels = maxStrictChannelNumber - minChannelNumber + 1
)

// peerKey is a peer address packed for hashing and comparing: the IP as 16
// bytes (IPv4 mapped into IPv6, so 192.0.2.1 and ::ffff:192.0.2.1 are one
// peer) and the port, 0 for a permission, which is per IP.
type peerKey struct {
	hi, lo uint64
	port   uint16
}

func keyOfAddr(a netip.Addr, port uint16) peerKey {
	b := a.As16()
	return peerKey{hi: binary.LittleEndian.Uint64(b[:8]), lo: binary.LittleEndian.Uint64(b[8:]), port: port}
}

// peerHashSeed keys the hash of every allocation's peer indexes, drawn once per
// process so that clients cannot pick peers whose slots collide.
var peerHashSeed = func() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return binary.LittleEndian.Uint64(b[:])
}()

// hash mixes the key with peerHashSeed through a full 64-bit finalizer per
// word. IPv4 peers differ only in one half of one word, and a cheaper mix
// left the low bits (which pick an index slot) and the high bits (which
// the refusal sketch uses) visibly uneven for consecutive addresses.
func (k peerKey) hash() uint64 {
	h := fmix64(k.hi ^ peerHashSeed)
	h = fmix64(h ^ k.lo)
	return fmix64(h ^ uint64(k.port))
}

// fmix64 is MurmurHash3's 64-bit finalizer: every input bit affects every
// output bit.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xFF51AFD7ED558CCD
	x ^= x >> 33
	x *= 0xC4CEB9FE1A85EC53
	return x ^ x>>33
}

// keyed is what an index holds: a pointer to an entry that knows its key.
type keyed[T any] interface {
	*T
	peerKey() peerKey
}

// minIndexSlots is the smallest slot array of an index (64 bytes).
const minIndexSlots = 8

// index maps peer keys to entries (permissions by IP, channels by IP and
// port): open addressing with linear probing over an array of atomic
// pointers, at most half full. A read hashes the key and loads slots until
// it finds the entry or an empty slot: no lock, no allocation, a small
// constant number of loads whatever the size. Writers hold the
// allocation's mu. An insert stores into an empty slot in place, which a
// concurrent reader sees or not; growing and removing build a new array and
// swap it in, so a reader on the old one sees a consistent snapshot and no
// tombstones are needed. Removal is rare (expiry, revoked routes), and each
// rebuild is linear in the entries, so an allocation's costs stay linear
// in its entries overall.
//
// The zero value is an empty index.
type index[T any, P keyed[T]] struct {
	slots atomic.Pointer[[]atomic.Pointer[T]]
	n     int // entries; under the allocation's mu
}

// get returns the entry with key k, or nil.
func (x *index[T, P]) get(k peerKey) *T {
	sp := x.slots.Load()
	if sp == nil {
		return nil
	}
	s := *sp
	mask := uint64(len(s) - 1)
	for i := k.hash() & mask; ; i = (i + 1) & mask {
		e := s[i].Load()
		if e == nil || P(e).peerKey() == k {
			return e
		}
	}
}

// insert adds e, whose key must not be in the index. The caller holds the
// allocation's mu.
func (x *index[T, P]) insert(e *T) {
	sp := x.slots.Load()
	if sp == nil || 2*(x.n+1) > len(*sp) {
		sp = x.rebuild(x.n+1, nil)
	}
	place[T, P](*sp, e)
	x.n++
}

// place stores e in the first empty slot of its probe sequence in s.
func place[T any, P keyed[T]](s []atomic.Pointer[T], e *T) {
	mask := uint64(len(s) - 1)
	i := P(e).peerKey().hash() & mask
	for s[i].Load() != nil {
		i = (i + 1) & mask
	}
	s[i].Store(e)
}

// removeIf removes the entries for which drop reports true and returns how
// many it removed. The caller holds the allocation's mu.
func (x *index[T, P]) removeIf(drop func(*T) bool) int {
	sp := x.slots.Load()
	if sp == nil {
		return 0
	}
	gone := 0
	for i := range *sp {
		if e := (*sp)[i].Load(); e != nil && drop(e) {
			gone++
		}
	}
	if gone > 0 {
		x.n -= gone
		x.rebuild(x.n, drop)
	}
	return gone
}

// rebuild swaps in an array sized for n entries, holding the current
// entries except those skip reports true for (skip may be nil), and
// returns it. The caller holds the allocation's mu.
func (x *index[T, P]) rebuild(n int, skip func(*T) bool) *[]atomic.Pointer[T] {
	size := minIndexSlots
	for size < 2*n {
		size *= 2
	}
	next := make([]atomic.Pointer[T], size)
	if old := x.slots.Load(); old != nil {
		for i := range *old {
			if e := (*old)[i].Load(); e != nil && (skip == nil || !skip(e)) {
				place[T, P](next, e)
			}
		}
	}
	x.slots.Store(&next)
	return &next
}

// Channel numbers are looked up in a two-level table indexed by
// number-0x4000: 64-entry pages of atomic pointers, made when a number in
// them is first bound. A flat 4,096-entry table would cost 32 KiB for
// every allocation with one channel; clients number their channels up
// from 0x4000 (libwebrtc, pion; Firefox binds none), so a typical allocation needs
// one page (512 bytes) and the page directory (512 bytes). The directory
// of 0x5000-0x7FFF (1.5 KiB) is made only when a client binds a number
// there (coturn's turnutils_uclient draws them at random up to 0x7FFF).
// Pages are made once and kept for the allocation's life: the number
// range bounds them to 256 pages (128 KiB) per allocation.
const chanPageSize = 64

type chanPage [chanPageSize]atomic.Pointer[channel]

// highPages is the page directory of 0x5000-0x7FFF.
type highPages [(maxChannelNumber - maxStrictChannelNumber) / chanPageSize]atomic.Pointer[chanPage]

type chanNumbers struct {
	pages [(maxStrictChannelNumber - minChannelNumber + 1) / chanPageSize]atomic.Pointer[chanPage]
	// high holds the pages of 0x5000-0x7FFF, made when a client first
	// binds one of those numbers.
	high atomic.Pointer[highPages]
}

// slot returns the slot of channel number n (0x4000-0x7FFF), or nil when
// its page has not been made and create is false. With create, the caller
// holds the allocation's mu.
func (t *chanNumbers) slot(n uint16, create bool) *atomic.Pointer[channel] {
	i := int(n) - minChannelNumber
	var dir []atomic.Pointer[chanPage]
	if i < len(t.pages)*chanPageSize {
		dir = t.pages[:]
	} else {
		l := t.high.Load()
		if l == nil {
			if !create {
				return nil
			}
			l = new(highPages)
			t.high.Store(l)
		}
		dir, i = l[:], i-len(t.pages)*chanPageSize
	}
	p := dir[i/chanPageSize].Load()
	if p == nil {
		if !create {
			return nil
		}
		p = new(chanPage)
		dir[i/chanPageSize].Store(p)
	}
	return &p[i%chanPageSize]
}

// each calls f for every entry. The caller holds the allocation's mu, so
// f may not insert or remove.
func (x *index[T, P]) each(f func(*T)) {
	sp := x.slots.Load()
	if sp == nil {
		return
	}
	for i := range *sp {
		if e := (*sp)[i].Load(); e != nil {
			f(e)
		}
	}
}
