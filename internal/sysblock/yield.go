package sysblock

import (
	"runtime"
	"time"
)

// YieldEvery is how often a Yielder passes through the Go scheduler.
//
// A worker that only ever blocks in system calls never reschedules, so the
// runtime's monitor sees its P "running" one goroutine and, after 10 ms,
// takes the P away from the system call. Every such take resets the monitor
// to polling every 20 µs, and with a few workers it never backs off again:
// at 20k packets/s that polling was 29% of ternd's CPU. A Gosched every few
// milliseconds keeps each P's schedule tick moving, so nothing is retaken
// while there are idle Ps (Enter sees to that). Not every millisecond: with
// idle Ps a Gosched wakes another thread to look for work, and at 1 ms those
// wake-ups cost 18% of ternd's CPU at 20k packets/s.
const YieldEvery = 4 * time.Millisecond

// Yielder remembers when a worker last passed through the scheduler. The
// zero value is ready; a Yielder belongs to one goroutine.
type Yielder struct{ last time.Time }

// Maybe calls runtime.Gosched if YieldEvery has passed since the last time
// it did. Call it once per batch (it reads the clock), before blocking.
func (y *Yielder) Maybe() {
	now := time.Now()
	if now.Sub(y.last) >= YieldEvery {
		y.last = now
		runtime.Gosched()
	}
}
