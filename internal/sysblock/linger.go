package sysblock

import "time"

// Linger paces how a worker that blocks for packets waits, so that a steady
// stream of lone datagrams wakes it once per period instead of once per
// datagram.
//
// Interleaved flows (hundreds of WebRTC streams, each sending one datagram
// every few milliseconds) reach a socket one datagram at a time, 50 µs apart
// at 20k packets/s. A worker that blocks again after each one is woken for
// each one, and on this kind of machine a wake-up costs more than relaying
// the datagram (bench/PROFILE.md, "WebRTC-shaped UDP"). While datagrams keep
// arriving closer together than Period, a lingering worker instead sleeps
// Period and then takes whatever arrived meanwhile without blocking, all in
// one batch: at most about 1/Period wake-ups per second, for at most Period
// of added delay. It falls back to blocking as soon as a poll finds nothing,
// so traffic slower than one datagram per Period (a latency probe, an idle
// relay) waits exactly as before.
//
// The zero value (Period 0) never lingers. A Linger belongs to one worker.
type Linger struct {
	// Period is the sleep between polls while busy; 0 turns lingering off.
	Period time.Duration
	busy   bool
	since  time.Time // when the worker last went to block
}

// Wait is called before the worker waits. It returns false when the worker
// should block as usual; it returns true after sleeping Period, and then
// the worker polls without blocking and reports what it found with Polled.
func (l *Linger) Wait() (poll bool) {
	if l.Period <= 0 {
		return false
	}
	if !l.busy {
		l.since = time.Now()
		return false
	}
	sleep(l.Period)
	return true
}

// Woke is called after a blocking wait returned work: the worker becomes
// busy when that wait was shorter than Period.
func (l *Linger) Woke() {
	if l.Period > 0 {
		l.busy = time.Since(l.since) < l.Period
	}
}

// Polled is called after a poll that Wait asked for, with whether it found
// any work; a poll that finds none ends the busy spell.
func (l *Linger) Polled(found bool) { l.busy = found }
