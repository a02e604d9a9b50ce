// Package admission decides which connections a TURN-TCP, TURN-TLS or
// TURN-DTLS listener keeps: a cap per client address (an IPv4 address or an
// IPv6 /64) and a cap on the listener's connections, at which a new
// connection pushes out the oldest one that holds no allocation (shedding).
//
// It has one lock, Set.mu, and never calls out while holding it: it calls
// no connection, no engine and no logger under it. What it decides to close
// it returns (Admit's victim), and the caller closes it after Admit has
// returned; the one question it must ask the caller (does this connection
// hold an allocation?) it asks with the lock released. So any lock of the
// caller's may be held while calling into a Set, and a Set's lock is
// always the last one taken.
package admission

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// Limits are the caps a Set applies to a new connection.
type Limits struct {
	// PerIP caps the connections of one client IPv4 address or IPv6 /64;
	// 0 means no cap.
	PerIP int
	// Max caps the connections; 0 means no cap.
	Max int
}

// Decision is what Admit decided about a new connection.
type Decision int

const (
	// Admitted: the connection holds its slots until Remove.
	Admitted Decision = iota
	// Refused: over a limit; close it and accept the next.
	Refused
	// Closing: the Set is closed; stop accepting.
	Closing
)

// Entry is a connection's place in a Set. The caller makes one per
// connection (NewEntry) and keeps it for the connection's life.
type Entry[C any] struct {
	// Conn is the caller's connection, handed back as Admit's victim.
	Conn C
	key  netip.Addr // the client address's share of Limits.PerIP

	// Guarded by Set.mu.
	prev, next *Entry[C] // neighbours on Set.shed
	listed     bool      // on Set.shed
	counted    bool      // holds a slot of Limits.Max
	countedIP  bool      // holds a slot of Limits.PerIP
}

// NewEntry returns the entry of connection c from client address client.
func NewEntry[C any](c C, client netip.Addr) *Entry[C] {
	return &Entry[C]{Conn: c, key: ipKey(client)}
}

// Set holds one listener's connections' slots.
type Set[C any] struct {
	// allocated reports whether a connection holds an allocation; it is
	// called without mu held.
	allocated func(C) bool

	mu     sync.Mutex
	closed bool
	// active is how many entries hold a slot of Limits.Max: the admitted
	// ones less those shed or removed.
	active int
	perIP  map[netip.Addr]int // slots of Limits.PerIP held, by key
	// shed lists the entries without an allocation, oldest first: the
	// ones a new connection may push out at Limits.Max.
	shed list[C]

	refusedPerIP, refusedTotal, shedCount, accepted atomic.Uint64
}

// New returns an empty Set. allocated reports whether a connection holds
// an allocation (the engine's Lookup of its 5-tuple); the Set calls it
// without its lock held, so it may take locks of its own.
func New[C any](allocated func(C) bool) *Set[C] {
	return &Set[C]{allocated: allocated, perIP: map[netip.Addr]int{}}
}

// Counts are a Set's counters since it was made.
type Counts struct {
	// Accepted counts admitted connections; RefusedPerIP and RefusedTotal
	// those refused over Limits.PerIP (at Admit or ClaimIP) and at
	// Limits.Max with none to shed; Shed those pushed out.
	Accepted, RefusedPerIP, RefusedTotal, Shed uint64
}

// Counts returns the Set's counters.
func (s *Set[C]) Counts() Counts {
	return Counts{Accepted: s.accepted.Load(), RefusedPerIP: s.refusedPerIP.Load(),
		RefusedTotal: s.refusedTotal.Load(), Shed: s.shedCount.Load()}
}

// Admit registers a new connection under lim. With countIP it takes a
// slot of the client address's share at once (TCP and TLS, whose
// handshake proved the address, and DTLS, whose cookie did); without, the
// caller may take it later with ClaimIP. At lim.Max it gives the slots of the oldest connection that
// holds no allocation to e and returns that connection as victim, for the
// caller to close; it refuses e when every connection holds one.
func (s *Set[C]) Admit(e *Entry[C], lim Limits, countIP bool) (d Decision, victim *Entry[C]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Closing, nil
	}
	if countIP && !s.takeIPLocked(e, lim) {
		s.refusedPerIP.Add(1)
		return Refused, nil
	}
	for lim.Max > 0 && s.active >= lim.Max {
		v := s.shed.head
		if v == nil {
			s.releaseLocked(e)
			s.refusedTotal.Add(1)
			return Refused, nil
		}
		// Off the list while the caller is asked, so that no other Admit
		// picks it meanwhile. The shed list is updated by each
		// connection's reader after a request, so an allocation made a
		// moment ago may not show on it yet.
		s.shed.remove(v)
		s.mu.Unlock()
		has := s.allocated(v.Conn)
		s.mu.Lock()
		switch {
		case s.closed:
			s.releaseLocked(e)
			return Closing, nil
		case has || !v.counted:
			// It holds an allocation (its reader lists it again when it
			// ends it), or it was removed meanwhile: look again.
			continue
		}
		// One victim per admission, as limits lowered at run time leave
		// the listener over Max until connections end.
		s.releaseLocked(v)
		victim = v
		break
	}
	s.active++
	e.counted = true
	s.shed.pushBack(e)
	s.accepted.Add(1)
	if victim != nil {
		s.shedCount.Add(1)
	}
	return Admitted, victim
}

// ClaimIP takes a slot of the client address's share for a connection
// admitted without one. It reports
// false, and counts a refusal, when the share is used up or when e was
// shed meanwhile.
func (s *Set[C]) ClaimIP(e *Entry[C], lim Limits) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.counted && s.takeIPLocked(e, lim) {
		return true
	}
	s.refusedPerIP.Add(1)
	return false
}

func (s *Set[C]) takeIPLocked(e *Entry[C], lim Limits) bool {
	if lim.PerIP > 0 && s.perIP[e.key] >= lim.PerIP {
		return false
	}
	s.perIP[e.key]++
	e.countedIP = true
	return true
}

// releaseLocked gives up e's slots (total and per address), once.
func (s *Set[C]) releaseLocked(e *Entry[C]) {
	if e.countedIP {
		e.countedIP = false
		if s.perIP[e.key]--; s.perIP[e.key] <= 0 {
			delete(s.perIP, e.key)
		}
	}
	if e.counted {
		e.counted = false
		s.active--
	}
	s.shed.remove(e)
}

// SetAllocated moves e off the shed list when its connection holds an
// allocation and back (as the newest) when it no longer does.
func (s *Set[C]) SetAllocated(e *Entry[C], allocated bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case allocated:
		s.shed.remove(e)
	case e.counted && !e.listed:
		s.shed.pushBack(e)
	}
}

// Remove gives up the slots of a connection that has ended.
func (s *Set[C]) Remove(e *Entry[C]) {
	s.mu.Lock()
	s.releaseLocked(e)
	s.mu.Unlock()
}

// Close refuses every later Admit with Closing. The caller closes the
// connections it holds.
func (s *Set[C]) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// ipKey is the address whose connections share Limits.PerIP: an IPv4
// address, or an IPv6 /64, which one host can fill with addresses of its
// own as a NAT fills one IPv4 address with clients.
func ipKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is4() {
		return a
	}
	p, _ := a.Prefix(64)
	return p.Addr()
}

// list is a doubly linked list of entries through their prev and next
// fields, guarded by Set.mu.
type list[C any] struct{ head, tail *Entry[C] }

func (q *list[C]) pushBack(e *Entry[C]) {
	e.prev, e.next, e.listed = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = e
	} else {
		q.head = e
	}
	q.tail = e
}

// remove takes e off the list; it is a no-op when e is not on it.
func (q *list[C]) remove(e *Entry[C]) {
	if !e.listed {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		q.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		q.tail = e.prev
	}
	e.prev, e.next, e.listed = nil, nil, false
}
