package dataplane

import (
	"sync/atomic"
	"time"
)

// coarseClockPeriod is how often the coarse clock is advanced. Expiry
// checks on the packet path are then off by at most this much.
const coarseClockPeriod = 5 * time.Millisecond

// coarseClock is a turn.Clock read with one atomic load, so per-packet
// permission and channel expiry checks make no system call.
type coarseClock struct{ ns atomic.Int64 }

func newCoarseClock() *coarseClock {
	c := &coarseClock{}
	c.set(time.Now())
	return c
}

// Now implements turn.Clock.
func (c *coarseClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *coarseClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
