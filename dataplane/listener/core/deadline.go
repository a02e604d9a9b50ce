package core

import (
	"errors"
	"net"
	"time"
)

// DeadlineSlack is how early a read deadline may fire: a connection's
// deadline is moved forward only when it would fire earlier than wanted by
// more than this (see ReadDeadline).
const DeadlineSlack = 250 * time.Millisecond

// ReadDeadline keeps a connection's read deadline within DeadlineSlack
// before the one wanted. Setting a deadline resets a runtime timer; on a
// busy connection the wanted deadline moves a little with every message,
// so setting it each time would cost a timer update per message. The
// caller must treat a timeout that comes before its own deadline as no
// timeout, and call Expired after every timeout.
type ReadDeadline struct{ set time.Time }

// Apply sets c's read deadline when want is earlier than the one set, or
// later by more than DeadlineSlack.
func (d *ReadDeadline) Apply(c net.Conn, want time.Time) {
	if want.Before(d.set) || want.Sub(d.set) > DeadlineSlack {
		_ = c.SetReadDeadline(want)
		d.set = want
	}
}

// Expired forgets the deadline after it has passed, so that the next
// Apply sets it again.
func (d *ReadDeadline) Expired() { d.set = time.Time{} }

// IsTimeout reports whether err is a read deadline passing, after which the
// connection may still be read.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
