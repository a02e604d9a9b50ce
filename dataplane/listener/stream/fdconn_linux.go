package stream

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// fdConn is a TURN-TCP connection served by an event loop (loop_linux.go):
// a raw non-blocking socket descriptor that was accepted with accept4(2)
// straight from the listening socket, so it never enters the Go netpoller
// (a net.TCPConn would: the runtime's epoll set would report every arrival
// too and wake a second thread, bench/PROFILE.md "TURN-TCP on event
// loops"). It is the core.Conn's C, W and Relay.
//
// Writes never block: each is one write(2) on the caller's goroutine (the
// loop's, for the replies of a wake-up; a relay worker's, for what peers
// sent during its wake-up), and what the socket does not take waits in a
// backlog, bounded as outConn's is (outBacklog, outBacklogMax), which the
// loop writes when epoll reports the socket writable (EPOLLOUT, armed
// only while there is a backlog). A client that takes nothing of its
// backlog for writeTimeout is disconnected (the loop's tick).
//
// The descriptor is closed only by the loop (end), or by Close before a
// loop took the connection, always under mu: a writer holding mu that
// finds the connection open writes a descriptor that cannot have been
// reused. The loop reads without mu, since it is the one that closes.
type fdConn struct {
	fd            int
	local, remote *net.TCPAddr

	mu sync.Mutex
	// lp and lc are the loop serving the connection and its entry there;
	// nil until startLoop attaches it.
	lp *loop
	lc *loopConn
	// closed: Close was called (or the loop ended the connection); no
	// write may start. fdOpen: the descriptor is still open.
	closed, fdOpen bool
	err            error // the first write error; every later write returns it
	// pend is the backlog; spare the emptied backlog buffer kept for reuse.
	pend, spare []byte
	// pendAt is when the backlog began or last shrank.
	pendAt time.Time
	// outArmed is whether EPOLLOUT is in the socket's epoll events.
	outArmed bool
}

// newFDConn wraps fd, a connected non-blocking TCP socket to remote.
func newFDConn(fd int, remote *net.TCPAddr) *fdConn {
	fc := &fdConn{fd: fd, remote: remote, fdOpen: true}
	if sa, err := unix.Getsockname(fd); err == nil {
		fc.local = tcpAddrOf(sa)
	} else {
		fc.local = &net.TCPAddr{}
	}
	return fc
}

// tcpAddrOf converts an accepted or bound socket address.
func tcpAddrOf(sa unix.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)))
	case *unix.SockaddrInet6:
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)))
	}
	return &net.TCPAddr{}
}

// errNoRead is what Read returns: the loop reads the descriptor itself.
var errNoRead = errors.New("stream: event-loop connection is read by its loop")

// Read implements net.Conn; it is never used (the loop reads).
func (fc *fdConn) Read([]byte) (int, error) { return 0, errNoRead }

// Write writes b or queues what the socket does not take; it returns
// len(b) unless the connection has failed, is closed or its backlog is
// past outBacklogMax.
func (fc *fdConn) Write(b []byte) (int, error) {
	if _, err := fc.write(b, false); err != nil {
		return 0, err
	}
	return len(b), nil
}

// WriteRelayed implements core.RelayWriter: a relayed message that would
// wait behind outBacklog bytes is dropped.
func (fc *fdConn) WriteRelayed(msg []byte) (bool, error) { return fc.write(msg, true) }

func (fc *fdConn) write(b []byte, droppable bool) (dropped bool, err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	switch {
	case fc.err != nil:
		return false, fc.err
	case fc.closed:
		return false, net.ErrClosed
	}
	if len(fc.pend) == 0 {
		n, err := writeNB(fc.fd, b)
		if err != nil {
			fc.err = err
			return false, err
		}
		if b = b[n:]; len(b) == 0 {
			return false, nil
		}
		if n > 0 {
			// Part of a message went out: the rest must follow whatever
			// the limits, or the stream's framing would break.
			droppable = false
		}
	}
	switch {
	case droppable && len(fc.pend)+len(b) > outBacklog:
		return true, nil
	case len(fc.pend)+len(b) > outBacklogMax:
		fc.err = errBacklog
		return false, fc.err
	}
	if len(fc.pend) == 0 {
		if fc.pend == nil {
			fc.pend, fc.spare = fc.spare, nil
		}
		fc.pendAt = time.Now()
	}
	fc.pend = append(fc.pend, b...)
	fc.armOut(true)
	return false, nil
}

// writeNB is one non-blocking write(2); a full socket is no error (0
// written).
func writeNB(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, nil
		case err != nil:
			return 0, err
		}
		return n, nil
	}
}

// armOut adds EPOLLOUT to, or removes it from, the socket's events in its
// loop's epoll set; the caller holds mu.
func (fc *fdConn) armOut(on bool) {
	if fc.lp == nil || fc.outArmed == on || !fc.fdOpen {
		return
	}
	ev := loopEvent(fc.lc.id, on)
	if unix.EpollCtl(fc.lp.ep, unix.EPOLL_CTL_MOD, fc.fd, &ev) == nil {
		fc.outArmed = on
	}
}

// loopEvent is the epoll registration of connection id, with EPOLLOUT
// when out.
func loopEvent(id uint64, out bool) unix.EpollEvent {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(id), Pad: int32(id >> 32)}
	if out {
		ev.Events |= unix.EPOLLOUT
	}
	return ev
}

// flushPend writes the backlog as far as the socket takes it (the loop,
// on EPOLLOUT); it returns the write error that ends the connection.
func (fc *fdConn) flushPend(now time.Time) error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.err != nil || !fc.fdOpen {
		return fc.err
	}
	if len(fc.pend) > 0 {
		n, err := writeNB(fc.fd, fc.pend)
		if err != nil {
			fc.err = err
			return err
		}
		if n > 0 {
			fc.pend = fc.pend[:copy(fc.pend, fc.pend[n:])]
			fc.pendAt = now
		}
	}
	if len(fc.pend) == 0 {
		if cap(fc.pend) <= queueKeepOut {
			fc.spare = fc.pend[:0]
		}
		fc.pend = nil
		fc.armOut(false)
	}
	return nil
}

// backlogged reports whether a message of n bytes would wait behind more
// than outBacklog bytes (a TLS record a little larger than its message:
// the limit is not that exact), for tlsRelay.
func (fc *fdConn) backlogged(n int) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.pend)+n > outBacklog
}

// stalled reports whether the client has taken nothing of its backlog for
// writeTimeout.
func (fc *fdConn) stalled(now time.Time) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.pend) > 0 && now.Sub(fc.pendAt) >= writeTimeout
}

// Close closes the connection: at once when no loop serves it, else the
// loop is told and closes it (end), so that the descriptor is never
// closed under the loop's reads. It never blocks on the client.
func (fc *fdConn) Close() error {
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return nil
	}
	fc.closed = true
	lp, lc := fc.lp, fc.lc
	if lp == nil && fc.fdOpen {
		fc.closeFD()
	}
	fc.mu.Unlock()
	if lp != nil {
		lp.closedNow(lc)
	}
	return nil
}

// Abort closes the connection with a reset (SO_LINGER 0), leaving no
// TIME_WAIT state (core.Conn.Abort).
func (fc *fdConn) Abort() {
	fc.mu.Lock()
	if fc.fdOpen {
		_ = unix.SetsockoptLinger(fc.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	fc.mu.Unlock()
	_ = fc.Close()
}

// closeFD leaves the loop's epoll set and closes the descriptor; the
// caller holds mu.
func (fc *fdConn) closeFD() {
	if !fc.fdOpen {
		return
	}
	if fc.lp != nil {
		_ = unix.EpollCtl(fc.lp.ep, unix.EPOLL_CTL_DEL, fc.fd, nil)
	}
	_ = unix.Close(fc.fd)
	fc.fdOpen = false
	fc.pend, fc.spare = nil, nil
}

func (fc *fdConn) LocalAddr() net.Addr  { return fc.local }
func (fc *fdConn) RemoteAddr() net.Addr { return fc.remote }

// SetDeadline, SetReadDeadline and SetWriteDeadline do nothing: the loop
// enforces the connection's time limits (its tick).
func (fc *fdConn) SetDeadline(time.Time) error      { return nil }
func (fc *fdConn) SetReadDeadline(time.Time) error  { return nil }
func (fc *fdConn) SetWriteDeadline(time.Time) error { return nil }
