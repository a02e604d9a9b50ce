package stream

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/turn"
)

// TURN-TLS on the event loops (Linux). The handshake runs on the
// connection's goroutine, as before (serveConn): crypto/tls's handshake
// blocks, and it is a few round trips per connection. Once it is done the
// socket moves to an event loop (toLoop) and the goroutine ends; the loop
// then reads the socket through the session (tlsSession.Read: ternd's own
// records at TLS 1.3, tls.Conn's at TLS 1.2, both over
// tlsSocket.readMoved, which never blocks), splits the plaintext into
// frames as for TURN-TCP, and seals every reply of a wake-up as one
// record, written with one write(2) (fdConn). Relay workers seal what
// peers send through the same session (tlsRelay), as before.

// readMoved is tlsSocket.Read once the socket is on a loop: one
// non-blocking read(2), or errWouldBlock when a read this wake-up already
// found the socket drained (a short read) or made loopReads reads, so that
// crypto/tls asks for no read(2) that could only return EAGAIN, and one
// busy client does not starve the others (the level-triggered epoll set
// reports what is left at the next wake-up).
func (s *tlsSocket) readMoved(fc *fdConn, b []byte) (int, error) {
	if s.drained || s.reads >= loopReads || len(b) == 0 {
		return 0, errWouldBlock
	}
	s.reads++
	n, err := readNB(fc.fd, b)
	switch {
	case err == unix.EAGAIN:
		s.drained = true
		return 0, errWouldBlock
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	if n < len(b) {
		s.drained = true
	}
	s.records += s.rec.scan(b[:n])
	return n, nil
}

// toLoop moves the socket of c, whose TLS handshake (tc) is done, to an
// event loop, and reports whether it did: the caller's goroutine then
// leaves c to the loop (it must not finish it). It does not move a socket
// with handshake bytes still waiting in the outConn's backlog, nor when
// the event loops are off or cannot run: the goroutine then serves c.
func (s *tlsSocket) toLoop(c *core.Conn, tc *tlsSession, log *slog.Logger) bool {
	if readerGoroutines.Load() {
		return false
	}
	loopsOnce.Do(startLoops)
	if loopsErr != nil {
		return false
	}
	if h, ok := s.Conn.(*helloConn); ok && len(h.pre) > 0 {
		return false // cannot be: the handshake read the whole hello
	}
	o := s.o
	o.mu.Lock()
	idle := !o.busy && len(o.pend) == 0 && o.queued == 0 && o.err == nil
	if idle {
		// Nothing may write through o any more: a write racing the
		// move fails rather than reach a socket the loop serves.
		o.err = net.ErrClosed
	}
	o.mu.Unlock()
	if !idle {
		return false
	}
	fd := -1
	var derr error
	if cerr := o.rc.Control(func(fd0 uintptr) { fd, derr = unix.FcntlInt(fd0, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil || derr != nil {
		o.mu.Lock()
		o.err = nil
		o.mu.Unlock()
		return false
	}
	remote, _ := o.RemoteAddr().(*net.TCPAddr)
	if remote == nil {
		remote = &net.TCPAddr{}
	}
	fc := newFDConn(fd, remote)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		unix.Close(fd)
		return false // closed meanwhile: the goroutine finishes c
	}
	s.fc.Store(fc)
	s.mu.Unlock()
	// The duplicate keeps the socket open: closing the net.TCPConn takes
	// it out of the netpoller, and no one writes or reads o any more.
	o.TCPConn.Close()
	if !startLoopConn(c, fc, tc, s, log) {
		c.Finish()
	}
	return true
}

// serveTLS is serve for a TURN-TLS connection: it reads lc's session until
// it would block (tlsSocket.readMoved), handles every whole frame of the
// plaintext, and seals the replies of the wake-up as one record.
func (lp *loop) serveTLS(lc *loopConn) {
	f := &lc.f
	s := lc.tsock
	s.drained, s.reads = false, 0
	var fail error
	for fail == nil {
		if f.buf == nil {
			f.buf = bufPools[0].Get().(*[]byte)
			f.class, f.r, f.w = 0, 0, 0
		}
		room := len(*f.buf) - f.w
		n, err := lc.tls.Read((*f.buf)[f.w:])
		if n > 0 {
			f.w += n
			fail = lp.frames(lc)
		}
		if err != nil {
			if errors.Is(err, errWouldBlock) {
				// crypto/tls holds no whole record now (at most a part of
				// one, which s.rec has not counted): the counts agree.
				s.settled, s.taken = true, s.records
			} else {
				fail = err
			}
			break
		}
		if n == 0 {
			break // no room (cannot be: frames makes room)
		}
		if n < room && !lc.tls.Own() {
			// The record's whole plaintext: crypto/tls holds none of it.
			// (Tern's own records need no count: their last Read is
			// cheap, errWouldBlock without a read(2) once drained.)
			s.taken++
			if s.settled && !s.rec.lost && s.taken >= s.records && (s.drained || s.reads >= loopReads) {
				break // nothing whole is left in the session, nor more to read now
			}
		}
	}
	lp.served(lc, lc.tls, fail)
}

// failed ends lc after fail, logging and counting it as serve does.
func (lp *loop) failed(lc *loopConn, fail error) {
	if !errors.Is(fail, io.EOF) && !errors.Is(fail, net.ErrClosed) && !errors.Is(fail, syscall.ECONNRESET) {
		lc.log.Debug("closing connection", "client", lc.c.FT.String(), "error", fail)
	}
	switch {
	case errors.Is(fail, errBadFrame):
		lc.c.Stats.Drops[turn.DropMalformed].Add(1)
	case errors.Is(fail, errFrameBudget):
		lc.c.FrameClosed()
	}
	lp.end(lc)
}
