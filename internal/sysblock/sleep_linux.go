package sysblock

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleep blocks the calling thread in nanosleep: a worker that owns its
// thread (Enter) sleeps without passing through the Go scheduler and its
// timers.
func sleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}
