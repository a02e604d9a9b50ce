package stream

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/turn"
)

// Event loops for plain TURN-TCP connections (Linux). Rather than one
// reader goroutine per connection, a small fixed set of loops, one per
// processor up to maxLoops, each waits in its own epoll set on the raw
// sockets of the connections assigned to it (round robin at accept). On
// a wake-up a loop reads each ready connection until it is drained: until
// EAGAIN, or a read that did not fill the buffer, which took all the
// socket held (at most loopReads reads, so that one busy client cannot
// starve the others; the epoll set is level-triggered, so the rest comes
// at the next wake-up), splits the bytes into frames in the connection's read buffer
// (frameSize: RFC 8656 §3.1 framing, ChannelData padded per §12.5), runs
// the engine on each, and writes every reply the wake-up produced for the
// client with one write (outConn.Write).
//
// The sockets stay net.TCPConns: a loop reads through
// syscall.RawConn.Read with a callback that never waits, which holds the
// socket open while it reads, so that a Close from another goroutine
// (CloseAll, a relay worker whose write failed, an admission victim's
// Abort) never lets the loop read a reused descriptor. A closed socket
// leaves the epoll set by itself and raises no event: outConn.Close tells
// the loop at once, and the loop's tick (every loopTick) finds the rest
// (rc.Control fails), then ends them as a reader goroutine would (Finish).
//
// The tick also enforces the time limits the reader goroutine enforced
// with read deadlines: the handshake and idle limits (core.Conn.IdleLimit,
// Expired) and the partial-frame limit. Limits are thus checked to within
// loopTick (core.DeadlineSlack), as deadlines were.
//
// Locks: loop.mu guards the connection table and the closed list; it is
// taken alone, never while a connection's outConn.mu or core locks are
// held by the loop (the loop releases it before it serves a connection).
// outConn.Close takes loop.mu under no other lock of this package.

const (
	// maxLoops caps the event loops of the process.
	maxLoops = 8
	// loopEvents is how many ready connections one epoll_wait returns.
	loopEvents = 128
	// loopReads caps the reads of one connection per wake-up.
	loopReads = 16
	// loopTick is how often a loop checks its connections' time limits.
	loopTick = core.DeadlineSlack
)

// loops are the process's event loops, started on the first use.
var (
	loopsOnce sync.Once
	loops     []*loop
	loopsErr  error
	loopNext  uint32
	loopsMu   sync.Mutex
)

// loop is one event loop: an epoll set and the connections in it.
type loop struct {
	ep int
	ev [loopEvents]unix.EpollEvent

	mu     sync.Mutex
	conns  map[uint64]*loopConn
	next   uint64      // id of the next connection; never reused
	closed []*loopConn // closed through outConn.Close, to end at once
	wakeFd int         // eventfd that wakes the loop for closed
}

// loopConn is one connection served by a loop; only the loop touches it
// after it has been added.
type loopConn struct {
	id  uint64
	c   *core.Conn
	o   *outConn
	rc  syscall.RawConn
	log *slog.Logger
	f   frameReader // buf, class, r, w and partial only
	res turn.Result
	// last is when the client last sent a whole frame; limit how long it
	// may stay silent after it.
	last  time.Time
	limit time.Duration
	// out collects the replies of one wake-up (Reply), written at once.
	out []byte
	// read's results (readFn is a method value made once).
	rn    int
	rerr  error
	rdFn  func(fd uintptr) bool
	nopFn func(fd uintptr)
	ended bool
}

// startLoop serves c, a plain TURN-TCP connection, from an event loop; it
// returns false when no loop can (the caller then starts a reader
// goroutine).
func startLoop(c *core.Conn, o *outConn, log *slog.Logger) bool {
	loopsOnce.Do(startLoops)
	if loopsErr != nil {
		return false
	}
	loopsMu.Lock()
	lp := loops[loopNext%uint32(len(loops))]
	loopNext++
	loopsMu.Unlock()
	lc := &loopConn{c: c, o: o, rc: o.rc, log: log, last: time.Now(), limit: core.HandshakeTimeout}
	lc.rdFn = lc.readFn
	lc.nopFn = func(uintptr) {}
	lp.mu.Lock()
	lc.id = lp.next
	lp.next++
	lp.conns[lc.id] = lc
	lp.mu.Unlock()
	onClose := func() { lp.closedNow(lc) }
	o.onClose.Store(&onClose)
	var err error
	if cerr := o.rc.Control(func(fd uintptr) {
		err = unix.EpollCtl(lp.ep, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{
			Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(lc.id), Pad: int32(lc.id >> 32)})
	}); cerr != nil {
		err = cerr
	}
	if err != nil {
		lp.mu.Lock()
		delete(lp.conns, lc.id)
		lp.mu.Unlock()
		o.onClose.Store(nil)
		return false
	}
	return true
}

func startLoops() {
	n := min(runtime.GOMAXPROCS(0), maxLoops)
	for range n {
		ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			loopsErr = err
			return
		}
		wfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			unix.Close(ep)
			loopsErr = err
			return
		}
		// The eventfd's id is the largest: connection ids count up from 0.
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1, Pad: -1}); err != nil {
			unix.Close(ep)
			unix.Close(wfd)
			loopsErr = err
			return
		}
		lp := &loop{ep: ep, conns: map[uint64]*loopConn{}, wakeFd: wfd}
		loops = append(loops, lp)
		go lp.run()
	}
}

// wakeID is the epoll data of a loop's eventfd.
const wakeID = ^uint64(0)

// closedNow queues lc, whose socket is being closed, for the loop to end.
func (lp *loop) closedNow(lc *loopConn) {
	lp.mu.Lock()
	lp.closed = append(lp.closed, lc)
	lp.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(lp.wakeFd, one[:])
}

func (lp *loop) run() {
	lastTick := time.Now()
	var drain [8]byte
	for {
		n, err := unix.EpollWait(lp.ep, lp.ev[:], int(loopTick/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for i := range max(n, 0) {
			e := &lp.ev[i]
			id := uint64(uint32(e.Fd)) | uint64(uint32(e.Pad))<<32
			if id == wakeID {
				_, _ = unix.Read(lp.wakeFd, drain[:])
				continue
			}
			lp.mu.Lock()
			lc := lp.conns[id]
			lp.mu.Unlock()
			if lc != nil && !lc.ended {
				lp.serve(lc)
			}
		}
		lp.mu.Lock()
		closed := lp.closed
		lp.closed = nil
		lp.mu.Unlock()
		for _, lc := range closed {
			lp.end(lc)
		}
		if now := time.Now(); now.Sub(lastTick) >= loopTick {
			lastTick = now
			lp.tick(now)
		}
	}
}

// end ends lc once: its socket leaves the loop and the connection is
// finished as its reader goroutine would finish it.
func (lp *loop) end(lc *loopConn) {
	if lc.ended {
		return
	}
	lc.ended = true
	lp.mu.Lock()
	delete(lp.conns, lc.id)
	lp.mu.Unlock()
	_ = lc.rc.Control(func(fd uintptr) { _ = unix.EpollCtl(lp.ep, unix.EPOLL_CTL_DEL, int(fd), nil) })
	lc.f.release()
	lc.c.Finish()
}

// tick enforces the connections' time limits and ends those whose socket
// was closed behind the loop's back.
func (lp *loop) tick(now time.Time) {
	lp.mu.Lock()
	all := make([]*loopConn, 0, len(lp.conns))
	for _, lc := range lp.conns {
		all = append(all, lc)
	}
	lp.mu.Unlock()
	for _, lc := range all {
		if lc.ended {
			continue
		}
		if lc.rc.Control(lc.nopFn) != nil {
			lp.end(lc)
			continue
		}
		if !lc.f.partial.IsZero() {
			if lim := lc.c.PartialFrameLimit(); lim > 0 && now.Sub(lc.f.partial) >= lim {
				lc.c.FrameClosed()
				lp.end(lc)
				continue
			}
		}
		if now.Sub(lc.last) >= lc.limit {
			if lc.c.Expired(lc.last) {
				lp.end(lc)
				continue
			}
			lc.limit = lc.c.IdleLimit()
		}
	}
}

// readFn makes one non-blocking read into the connection's buffer.
func (lc *loopConn) readFn(fd uintptr) bool {
	for {
		n, err := unix.Read(int(fd), (*lc.f.buf)[lc.f.w:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		lc.rn, lc.rerr = n, err
		return true
	}
}

// serve reads lc until EAGAIN (or loopReads reads), handles every whole
// frame and writes the replies at once.
func (lp *loop) serve(lc *loopConn) {
	f := &lc.f
	var fail error
	for reads := 0; reads < loopReads && fail == nil; reads++ {
		if f.buf == nil {
			f.buf = bufPools[0].Get().(*[]byte)
			f.class, f.r, f.w = 0, 0, 0
		}
		if err := lc.rc.Read(lc.rdFn); err != nil {
			fail = err
			break
		}
		n, err := lc.rn, lc.rerr
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) {
				fail = err
			}
			break
		}
		if n == 0 {
			fail = io.EOF
			break
		}
		room := len(*f.buf) - f.w
		f.w += n
		fail = lp.frames(lc)
		if n < room {
			// A short read took all the socket held: a read more would
			// only return EAGAIN, a system call per wake-up for nothing.
			// Bytes that arrive meanwhile keep the socket ready in the
			// level-triggered epoll set, so the next wake-up reads them.
			break
		}
	}
	if fail == nil && f.buf != nil && f.r == f.w {
		f.release() // nothing begun: a silent connection holds no buffer
	}
	if len(lc.out) > 0 {
		if _, err := lc.o.Write(lc.out); err != nil && fail == nil {
			fail = err
		}
		lc.out = lc.out[:0]
		if cap(lc.out) > queueKeepOut {
			lc.out = nil
		}
	}
	if fail == nil {
		return
	}
	if !errors.Is(fail, io.EOF) && !errors.Is(fail, net.ErrClosed) {
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

// queueKeepOut is the largest reply buffer a connection keeps.
const queueKeepOut = 64 << 10

// frames handles the whole frames in lc's buffer (frameReader.take); an
// error ends the connection.
func (lp *loop) frames(lc *loopConn) error {
	for {
		msg, err := lc.f.take(time.Now)
		if msg == nil {
			return err
		}
		lc.last = time.Now()
		if !lc.c.Handle(msg, &lc.res, lc) {
			return net.ErrClosed
		}
		lc.limit = lc.c.IdleLimit()
	}
}

// Reply implements core.Sink: the reply waits for the wake-up's one write.
func (lc *loopConn) Reply(msg []byte, _ netip.AddrPort) error {
	lc.c.CheckAllocation()
	if len(lc.out)+len(msg) > outBacklogMax {
		return errBacklog
	}
	lc.out = append(lc.out, msg...)
	return nil
}

// Forward implements core.Sink.
func (lc *loopConn) Forward(fd int, p []byte, peer netip.AddrPort) error {
	return lc.c.Forward(fd, p, peer)
}
