package coarseclock

import (
	"testing"
	"time"
)

// TestSetNow: Now is the instant of the last Set, to the nanosecond, and
// does not move by itself.
func TestSetNow(t *testing.T) {
	c := New()
	for _, at := range []time.Time{time.Unix(1, 0), time.Unix(1700000000, 123456789), time.Unix(1700000000, 123456790)} {
		c.Set(at)
		if got := c.Now(); !got.Equal(at) {
			t.Errorf("after Set(%v): Now %v", at, got)
		}
		if got := c.Now(); !got.Equal(at) {
			t.Errorf("second Now after Set(%v): %v", at, got)
		}
	}
}
