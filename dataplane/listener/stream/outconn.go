package stream

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Output limits of a TURN-TCP or TURN-TLS connection, in bytes waiting in
// the process (beyond what the kernel's socket buffer holds).
const (
	// outBacklog is how much may wait for a slow client before relayed
	// messages are dropped (UDP-like loss, never blocking a relay worker).
	outBacklog = 256 << 10
	// outBacklogMax is how much may wait at all: replies and TLS records,
	// which cannot be dropped, past it close the connection.
	outBacklogMax = 4 * outBacklog
)

// writeTimeout bounds one write of a connection's backlog; a client that
// does not read for that long is disconnected.
const writeTimeout = 5 * time.Second

// errBacklog is the error of a write past outBacklogMax.
var errBacklog = errors.New("client does not read: output backlog full")

// outConn is the writing side of a TCP connection (below crypto/tls for
// TURN-TLS). Its Write never blocks: it writes at once with a non-blocking
// system call, on the caller's goroutine (a relay worker's or the reader's),
// and only what the socket does not take waits in a backlog, which a
// flusher goroutine, started the first time one is needed, writes in
// order. On media-rate traffic the socket always has room, so a relayed
// message costs one write(2) and no goroutine wake-up.
//
// Reads, deadlines and Close pass through to the embedded connection.
type outConn struct {
	*net.TCPConn
	rc   syscall.RawConn
	quit <-chan struct{} // closed when the connection ends: the flusher stops

	mu sync.Mutex
	// pend are the bytes waiting for the flusher; spare is the buffer the
	// flusher gave back, reused for the next backlog.
	pend, spare []byte
	// busy is whether the flusher holds bytes it is writing: while it
	// does, or while pend is not empty, a Write must queue behind them.
	busy bool
	// queued is len(pend) plus the bytes the flusher is writing.
	queued int
	err    error         // the first write error; every later Write returns it
	wake   chan struct{} // nil until the flusher starts

	// The arguments and results of rawWrite, which is passed to
	// RawConn.Write as a method value made once, so that a write
	// allocates no closure. Guarded by mu.
	wb    []byte
	wn    int
	werr  error
	rawFn func(fd uintptr) bool

	// onClose, when set, is called after Close: it tells the event loop
	// serving the connection (loop_linux.go) that its socket is gone.
	onClose atomic.Pointer[func()]
}

// Close closes the connection and tells its event loop, if any.
func (o *outConn) Close() error {
	err := o.TCPConn.Close()
	if f := o.onClose.Load(); f != nil {
		(*f)()
	}
	return err
}

func newOutConn(tc *net.TCPConn, quit <-chan struct{}) (*outConn, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	o := &outConn{TCPConn: tc, rc: rc, quit: quit}
	o.rawFn = o.rawWrite
	return o, nil
}

// Write writes b or queues what the socket does not take; it returns
// len(b) unless the connection has failed or its backlog is past
// outBacklogMax.
func (o *outConn) Write(b []byte) (int, error) {
	_, err := o.write(b, false)
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// write is Write, except that with droppable it gives up a message that
// would have to wait behind outBacklog bytes, reporting dropped.
func (o *outConn) write(b []byte, droppable bool) (dropped bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return false, o.err
	}
	if rawIO && !o.busy && len(o.pend) == 0 {
		o.wb, o.wn, o.werr = b, 0, nil
		err := o.rc.Write(o.rawFn) // closed, or past a deadline: f is not called
		if err == nil {
			err = o.werr
		}
		n := o.wn
		o.wb, o.wn, o.werr = nil, 0, nil
		if err != nil {
			o.err = err
			return false, err
		}
		if b = b[n:]; len(b) == 0 {
			return false, nil
		}
		// Part of a message went out: the rest must follow whatever the
		// limits, or the stream's framing would break.
		droppable = false
	}
	switch {
	case droppable && o.queued+len(b) > outBacklog:
		return true, nil
	case o.queued+len(b) > outBacklogMax:
		o.err = errBacklog
		return false, o.err
	}
	if o.pend == nil {
		o.pend, o.spare = o.spare, nil
	}
	o.pend = append(o.pend, b...)
	o.queued += len(b)
	if o.wake == nil {
		o.wake = make(chan struct{}, 1)
		go o.flusher(o.wake)
	}
	if !o.busy {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
	return false, nil
}

// rawWrite makes one non-blocking write of o.wb; a full socket is no error
// (nothing written), so that RawConn.Write never waits.
func (o *outConn) rawWrite(fd uintptr) bool {
	o.wn, o.werr = 0, nil
	for {
		n, err := sysWrite(fd, o.wb)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
		case err != nil:
			o.werr = err
		default:
			o.wn = n
		}
		return true
	}
}

// flushChunk is how much of the backlog the flusher writes under one
// deadline of writeTimeout.
const flushChunk = 64 << 10

// flusher writes the backlog, blocking, until the connection ends; a
// client that takes less than flushChunk bytes in writeTimeout is
// disconnected.
func (o *outConn) flusher(wake chan struct{}) {
	for {
		select {
		case <-o.quit:
			return
		case <-wake:
		}
		for {
			o.mu.Lock()
			if len(o.pend) == 0 || o.err != nil {
				o.busy = false
				o.mu.Unlock()
				break
			}
			out := o.pend
			o.pend, o.busy = nil, true
			o.mu.Unlock()

			var err error
			for rest := out; len(rest) > 0 && err == nil; {
				n := min(len(rest), flushChunk)
				_ = o.TCPConn.SetWriteDeadline(time.Now().Add(writeTimeout))
				_, err = o.TCPConn.Write(rest[:n])
				rest = rest[n:]
			}
			// Direct writes must not find an expired deadline.
			_ = o.TCPConn.SetWriteDeadline(time.Time{})

			o.mu.Lock()
			o.queued -= len(out)
			o.spare = out[:0]
			if err != nil && o.err == nil {
				o.err = err
			}
			o.mu.Unlock()
			if err != nil {
				o.TCPConn.Close() // a stalled or gone client: the reader ends too
				return
			}
		}
	}
}

// WriteRelayed implements core.RelayWriter for TURN-TCP: a relayed message
// that would wait behind outBacklog bytes is dropped.
func (o *outConn) WriteRelayed(msg []byte) (bool, error) { return o.write(msg, true) }

// backlogged reports whether a message of n bytes would wait behind more
// than outBacklog bytes (a TLS record is a little larger than its message;
// the limit is not that exact).
func (o *outConn) backlogged(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued+n > outBacklog
}
