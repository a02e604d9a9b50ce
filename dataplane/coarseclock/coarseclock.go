// Package coarseclock is the dataplane's turn.Clock: the time, as of the
// last Set, read with one atomic load, so that per-packet permission and
// channel expiry checks make no system call. The dataplane sets it every
// Period; expiry checks on the packet path are then off by at most that.
package coarseclock

import (
	"sync/atomic"
	"time"
)

// Period is how often the dataplane advances the clock (Set). Expiry
// checks on the packet path are then off by at most this much, against
// lifetimes of seconds to minutes (RFC 8656: permissions 300 s, channel
// bindings 600 s). Not shorter: each tick wakes a thread of an otherwise
// blocked process, and at 5 ms those wake-ups were most of the
// goroutine parking in a TURN-DTLS peer -> client profile; 25 ms took
// that row's server CPU per relayed packet to 0.88x (medians of six
// alternated runs; bench/PROFILE.md has both).
const Period = 25 * time.Millisecond

// Clock is a turn.Clock read with one atomic load. Its methods are safe
// for concurrent use.
type Clock struct{ ns atomic.Int64 }

// New returns a Clock set to the current time.
func New() *Clock {
	c := &Clock{}
	c.Set(time.Now())
	return c
}

// Now implements turn.Clock: the time of the last Set.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set advances the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }
