package turn

import (
	"sync/atomic"
	"time"
)

// Clock tells the engine the time. The dataplane passes a coarse clock that
// is updated every few milliseconds, so per-packet expiry checks cost an
// atomic load instead of a system call; tests pass a ManualClock.
type Clock interface {
	Now() time.Time
}

// SystemClock is a Clock backed by time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to; for tests. It is safe
// for concurrent use.
type ManualClock struct{ ns atomic.Int64 }

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.ns.Store(t.UnixNano())
	return c
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
