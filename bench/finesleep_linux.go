//go:build linux

package bench

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// fineSleeper sleeps with nanosleep on a thread of its own whose timer
// slack is 1 µs: a sleep of tens of µs ends within a few µs of its time,
// where the runtime's timers, woken through epoll_wait's millisecond
// timeout once the process is idle, oversleep to a millisecond. The
// thread is this goroutine's until stop.
type fineSleeper struct{ slack int }

func startFineSleep() *fineSleeper {
	runtime.LockOSThread()
	s := &fineSleeper{slack: -1}
	if v, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil {
		s.slack = v
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	}
	return s
}

func (s *fineSleeper) sleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_ = unix.Nanosleep(&ts, nil) // woken early (EINTR): the caller's loop checks the time
}

func (s *fineSleeper) stop() {
	if s.slack >= 0 {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(s.slack), 0, 0, 0)
	}
	runtime.UnlockOSThread()
}
