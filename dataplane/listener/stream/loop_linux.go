package stream

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/listener/admission"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/internal/sysblock"
	"github.com/tern-gw/tern/turn"
)

// Event loops for plain TURN-TCP connections (Linux). Rather than one
// reader goroutine per connection, a small fixed set of loops, one per CPU
// up to maxLoops, each waits in its own epoll set on the raw sockets of
// the connections assigned to it (round robin at accept). The sockets are
// accepted with accept4(2) on the listening socket's descriptor and never
// enter the Go netpoller (fdConn), so an arrival wakes one thread: the
// loop's, blocked in epoll_wait like a relay worker (package sysblock).
//
// On a wake-up a loop reads each ready connection until it is drained:
// until EAGAIN, or a read that did not fill the buffer, which took all the
// socket held (at most loopReads reads, so that one busy client cannot
// starve the others; the epoll set is level-triggered, so the rest comes
// at the next wake-up), splits the bytes into frames in the connection's
// read buffer (frameSize: RFC 8656 §3.1 framing, ChannelData padded per
// §12.5), runs the engine on each, and writes every reply the wake-up
// produced for the client with one write (fdConn.Write). A socket with a
// write backlog has EPOLLOUT armed, and the loop writes the backlog when
// the client makes room.
//
// A Close from another goroutine (CloseAll, a relay worker whose write
// failed, an admission victim's Abort) tells the loop through an eventfd;
// the loop alone closes the descriptors it serves (fdConn), then ends the
// connections as a reader goroutine would (Finish).
//
// A tick (every loopTick) enforces the time limits the reader goroutine
// enforced with read deadlines: the handshake and idle limits
// (core.Conn.IdleLimit, Expired), the partial-frame limit, and the write
// limit (a client that takes none of its backlog for writeTimeout). Limits
// are thus checked to within loopTick (core.DeadlineSlack), as deadlines
// were.
//
// Locks: loop.mu guards the connection table and the closed list; it is
// taken alone, never while fdConn.mu or core locks are held by the loop
// (the loop releases it before it serves a connection). fdConn.Close
// takes loop.mu after releasing fdConn.mu.

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

	// snd queues what one connection's wake-up sends to peers, copied into
	// sbuf (the frames it comes from may move in their read buffer before
	// the send), and sends it when the connection has been served: a run
	// to one relay socket in one sendmmsg, same-size datagrams to one peer
	// coalesced into one UDP_SEGMENT message (udpio.Batch). Only the loop
	// uses them.
	snd  *udpio.Batch
	sbuf []byte
	// one is the only datagram queued, while it is the only one: it
	// leaves with one sendto, which costs less than a sendmmsg of one.
	one struct {
		fd int
		p  []byte
		to netip.AddrPort
	}

	mu     sync.Mutex
	conns  map[uint64]*loopConn
	next   uint64      // id of the next connection; never reused
	closed []*loopConn // closed through fdConn.Close, to end at once
	kicked []*loopConn // to serve at once, whether or not epoll reports them
	wakeFd int         // eventfd that wakes the loop for closed
}

// loopConn is one connection served by a loop; only the loop touches it
// after it has been added.
type loopConn struct {
	lp  *loop // the loop serving it
	id  uint64
	c   *core.Conn
	fc  *fdConn
	log *slog.Logger
	f   frameReader // buf, class, r, w and partial only
	res turn.Result
	// last is when the client last sent a whole frame; limit how long it
	// may stay silent after it.
	last  time.Time
	limit time.Duration
	// out collects the replies of one wake-up (Reply), written at once.
	out   []byte
	ended bool
	// tls and tsock are a TURN-TLS connection's session and the socket
	// under it (tlsloop_linux.go); nil for TURN-TCP.
	tls   *tlsSession
	tsock *tlsSocket
}

// acceptLoop accepts one connection with accept4(2) on the listening
// socket, waiting through the netpoller for the listening socket only,
// admits it and hands it to an event loop.
func (l *Listener) acceptLoop() acceptResult {
	loopsOnce.Do(startLoops)
	if loopsErr != nil {
		return acceptNoLoop
	}
	lrc, ok := l.acceptConn()
	if !ok {
		if l.stopped() {
			return acceptStop
		}
		return acceptNoLoop // no descriptor to wait on: Accept through the netpoller
	}
	var (
		fd  = -1
		sa  unix.Sockaddr
		aer error
	)
	err := lrc.Read(func(lfd uintptr) bool {
		for {
			fd, sa, aer = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			switch aer {
			case unix.EINTR, unix.ECONNABORTED:
				continue
			case unix.EAGAIN:
				return false // wait for the next connection
			}
			return true
		}
	})
	if err != nil {
		if l.Closed.Load() || l.stopped() {
			return acceptStop
		}
		time.Sleep(10 * time.Millisecond)
		return acceptNext
	}
	if aer != nil {
		time.Sleep(10 * time.Millisecond) // EMFILE and the like: back off
		return acceptNext
	}
	if readerGoroutines.Load() {
		// The loops were turned off while this goroutine waited.
		f := os.NewFile(uintptr(fd), "turn-tcp")
		c, err := net.FileConn(f) // a duplicate, in the netpoller
		f.Close()
		if err != nil {
			return acceptNext
		}
		if !l.serveAccepted(c.(*net.TCPConn)) {
			return acceptStop
		}
		return acceptNext
	}
	return l.loopAccepted(fd, tcpAddrOf(sa))
}

// adopt moves tc, accepted through the netpoller, to an event loop: its
// descriptor is duplicated and tc closed, which takes it out of the
// netpoller.
func (l *Listener) adopt(tc *net.TCPConn) acceptResult {
	loopsOnce.Do(startLoops)
	if loopsErr != nil {
		return acceptNoLoop
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return acceptNoLoop
	}
	fd := -1
	if cerr := rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil || err != nil {
		return acceptNoLoop
	}
	remote, _ := tc.RemoteAddr().(*net.TCPAddr)
	tc.Close()
	if remote == nil {
		remote = &net.TCPAddr{}
	}
	return l.loopAccepted(fd, remote)
}

// loopAccepted admits fd, a non-blocking TCP socket from remote, and hands
// it to an event loop.
func (l *Listener) loopAccepted(fd int, remote *net.TCPAddr) acceptResult {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	fc := newFDConn(fd, remote)
	cc := l.NewConn(fc)
	cc.Relay = fc
	switch l.Admit(cc, true) {
	case admission.Refused:
		cc.Abort()
		return acceptNext
	case admission.Closing:
		fc.Close()
		return acceptStop
	}
	if !startLoop(cc, fc, l.Env.Log) {
		cc.Finish()
	}
	return acceptNext
}

// acceptConn returns the RawConn that acceptLoop waits on: a listening
// socket's own RawConn cannot wait (its Read fails), so it is that of a
// duplicate of the listening descriptor, registered with the netpoller
// through an os.File (closed by StopAccepting and Close, stopAccept). It
// returns false once the listener stopped accepting, or when the
// duplicate cannot be made.
func (l *Listener) acceptConn() (syscall.RawConn, bool) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if l.lstop {
		return nil, false
	}
	if l.lrc != nil {
		return l.lrc, true
	}
	tl, ok := l.ln.(*net.TCPListener)
	if !ok {
		return nil, false
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return nil, false
	}
	dup := -1
	if cerr := rc.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, false
	}
	// The duplicate shares the listening socket's O_NONBLOCK, so the
	// os.File is a pollable one.
	f := os.NewFile(uintptr(dup), "turn-tcp-listener")
	if l.lrc, err = f.SyscallConn(); err != nil {
		f.Close()
		return nil, false
	}
	l.lfile = f
	return l.lrc, true
}

// stopAccept closes the listening descriptor's duplicate (acceptConn), so
// that the listening socket closes with the listener and acceptLoop ends.
func (l *Listener) stopAccept() {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	l.lstop = true
	if l.lfile != nil {
		l.lfile.Close()
	}
}

func (l *Listener) stopped() bool {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	return l.lstop
}

// startLoop serves c from an event loop; it returns false when the
// connection could not join one (it was closed meanwhile, or epoll
// refused it): the caller then finishes it.
func startLoop(c *core.Conn, fc *fdConn, log *slog.Logger) bool {
	return startLoopConn(c, fc, nil, nil, log)
}

// startLoopConn is startLoop for a TURN-TCP connection (tc nil) or a
// TURN-TLS one whose session is tc over s. A TLS connection is served
// once at once: its session may hold records read with the handshake's
// last flight, which no epoll event would report.
func startLoopConn(c *core.Conn, fc *fdConn, tc *tlsSession, s *tlsSocket, log *slog.Logger) bool {
	loopsMu.Lock()
	lp := loops[loopNext%uint32(len(loops))]
	loopNext++
	loopsMu.Unlock()
	lc := &loopConn{lp: lp, c: c, fc: fc, log: log, last: time.Now(), limit: core.HandshakeTimeout, tls: tc, tsock: s}
	lp.mu.Lock()
	lc.id = lp.next
	lp.next++
	lp.conns[lc.id] = lc
	lp.mu.Unlock()
	fc.mu.Lock()
	ok := !fc.closed && fc.fdOpen
	if ok {
		ev := loopEvent(lc.id, len(fc.pend) > 0)
		ok = unix.EpollCtl(lp.ep, unix.EPOLL_CTL_ADD, fc.fd, &ev) == nil
		if ok {
			fc.lp, fc.lc, fc.outArmed = lp, lc, len(fc.pend) > 0
		}
	}
	fc.mu.Unlock()
	if !ok {
		lp.mu.Lock()
		delete(lp.conns, lc.id)
		lp.mu.Unlock()
		return false
	}
	if tc != nil {
		lp.mu.Lock()
		lp.kicked = append(lp.kicked, lc)
		lp.mu.Unlock()
		lp.wake()
	}
	return true
}

func startLoops() {
	n := min(runtime.NumCPU(), maxLoops)
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
		lp := &loop{ep: ep, conns: map[uint64]*loopConn{}, wakeFd: wfd,
			snd: udpio.NewSendBatch(udpio.BatchSize, true), sbuf: make([]byte, 0, loopSendBytes)}
		loops = append(loops, lp)
		go lp.run()
	}
}

// wakeID is the epoll data of a loop's eventfd.
const wakeID = ^uint64(0)

// closedNow queues lc, whose connection was closed, for the loop to end.
func (lp *loop) closedNow(lc *loopConn) {
	lp.mu.Lock()
	lp.closed = append(lp.closed, lc)
	lp.mu.Unlock()
	lp.wake()
}

// wake makes the loop's epoll_wait return (its eventfd).
func (lp *loop) wake() {
	var one = [8]byte{1}
	_, _ = unix.Write(lp.wakeFd, one[:])
}

// run waits in epoll_wait in a thread of its own, as relay workers do in
// their default mode (sysblock: a P of headroom, and a reschedule now and
// then so that the runtime's monitor leaves the thread alone).
func (lp *loop) run() {
	defer sysblock.Enter()()
	var y sysblock.Yielder
	lastTick := time.Now()
	var drain [8]byte
	for {
		y.Maybe()
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
			if lc == nil || lc.ended {
				continue
			}
			if e.Events&unix.EPOLLOUT != 0 {
				if err := lc.fc.flushPend(time.Now()); err != nil {
					lc.log.Debug("closing connection", "client", lc.c.FT.String(), "error", err)
					lp.end(lc)
					continue
				}
			}
			if e.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				lp.serve(lc)
			}
		}
		lp.mu.Lock()
		closed, kicked := lp.closed, lp.kicked
		lp.closed, lp.kicked = nil, nil
		lp.mu.Unlock()
		for _, lc := range kicked {
			if !lc.ended {
				lp.serve(lc)
			}
		}
		for _, lc := range closed {
			lp.end(lc)
		}
		if now := time.Now(); now.Sub(lastTick) >= loopTick {
			lastTick = now
			lp.tick(now)
		}
	}
}

// end ends lc once: its socket leaves the loop and is closed, and the
// connection is finished as its reader goroutine would finish it.
func (lp *loop) end(lc *loopConn) {
	if lc.ended {
		return
	}
	lc.ended = true
	lp.mu.Lock()
	delete(lp.conns, lc.id)
	lp.mu.Unlock()
	fc := lc.fc
	fc.mu.Lock()
	fc.closed = true
	fc.closeFD()
	fc.mu.Unlock()
	lc.f.release()
	lc.c.Finish()
}

// tick enforces the connections' time limits.
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
		if lc.fc.stalled(now) {
			lc.log.Debug("closing connection", "client", lc.c.FT.String(), "error", "client does not read")
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

// readNB makes one non-blocking read.
func readNB(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// serve reads lc until EAGAIN (or loopReads reads), handles every whole
// frame and writes the replies at once.
func (lp *loop) serve(lc *loopConn) {
	if lc.tls != nil {
		lp.serveTLS(lc)
		return
	}
	f := &lc.f
	var fail error
	for reads := 0; reads < loopReads && fail == nil; reads++ {
		if f.buf == nil {
			f.buf = bufPools[0].Get().(*[]byte)
			f.class, f.r, f.w = 0, 0, 0
		}
		room := len(*f.buf) - f.w
		n, err := readNB(lc.fc.fd, (*f.buf)[f.w:])
		if err != nil {
			if err != unix.EAGAIN {
				fail = err
			}
			break
		}
		if n == 0 {
			fail = io.EOF
			break
		}
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
	lp.served(lc, lc.fc, fail)
}

// served ends a connection's wake-up: it gives back a read buffer holding
// nothing begun (a silent connection holds none), sends what the wake-up
// relayed to peers, writes the replies through w at once (the fdConn, or
// the TLS session, which seals them as one record), and ends the
// connection after fail, or a failed write.
func (lp *loop) served(lc *loopConn, w io.Writer, fail error) {
	f := &lc.f
	if fail == nil && f.buf != nil && f.r == f.w {
		f.release()
	}
	lp.sendPeers()
	if len(lc.out) > 0 {
		if _, err := w.Write(lc.out); err != nil && fail == nil {
			fail = err
		}
		lc.out = lc.out[:0]
		if cap(lc.out) > queueKeepOut {
			lc.out = nil
		}
	}
	if fail != nil {
		lp.failed(lc, fail)
	}
}

// queueKeepOut is the largest reply or backlog buffer a connection keeps.
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

// loopSendBytes is the room for the payloads a loop queues for peers
// before it must send them.
const loopSendBytes = 64 << 10

// Forward implements core.Sink: p is queued in the loop's batch, which
// leaves when the connection has been served (sendPeers). A send the kernel
// then refuses is lost as any UDP datagram may be.
func (lc *loopConn) Forward(fd int, p []byte, peer netip.AddrPort) error {
	lp := lc.lp
	if len(p) > cap(lp.sbuf) {
		return lc.c.Forward(fd, p, peer)
	}
	if lp.snd.Full() || cap(lp.sbuf)-len(lp.sbuf) < len(p) {
		lp.sendPeers()
	}
	n := len(lp.sbuf)
	lp.sbuf = append(lp.sbuf, p...)
	q := lp.sbuf[n : n+len(p) : n+len(p)]
	switch {
	case lp.one.p == nil && lp.snd.Queued() == 0:
		lp.one.fd, lp.one.p, lp.one.to = fd, q, peer
	default:
		if lp.one.p != nil {
			lp.snd.Add(lp.one.fd, lp.one.p, lp.one.to)
			lp.one.p = nil
		}
		lp.snd.Add(fd, q, peer)
	}
	return nil
}

// sendPeers sends what the connections served since the last call queued
// for peers.
func (lp *loop) sendPeers() {
	if lp.one.p != nil {
		_ = udpio.RawSendTo(lp.one.fd, lp.one.p, lp.one.to)
		lp.one.p = nil
	} else if lp.snd.Queued() > 0 {
		lp.snd.Flush()
	}
	lp.sbuf = lp.sbuf[:0]
}
