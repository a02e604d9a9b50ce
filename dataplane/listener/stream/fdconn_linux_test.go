package stream

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawPair returns a raw non-blocking server socket, outside the netpoller
// as acceptLoop's are, and the client connected to it, whose receive
// buffer is small so that the server's writes soon find the socket full.
func rawPair(t *testing.T) (int, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	cc, err := d.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	sc, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if cerr := rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	sc.Close() // the duplicate, still non-blocking, leaves the netpoller
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	return fd, cc.(*net.TCPConn)
}

// TestFDConnBacklog: an event-loop connection whose client does not read
// keeps what the socket does not take in its backlog, arms EPOLLOUT for
// it, drops relayed messages past outBacklog (never a part of one), and
// once the client reads, the loop's EPOLLOUT writes deliver every message
// not dropped, in order and whole, and disarm EPOLLOUT. A non-droppable
// write past outBacklogMax fails the connection; after Close, writes
// fail and the descriptor is closed by the loop's end (closeFD).
func TestFDConnBacklog(t *testing.T) {
	fd, client := rawPair(t)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	wfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wfd)
	lp := &loop{ep: ep, conns: map[uint64]*loopConn{}, wakeFd: wfd}
	fc := newFDConn(fd, &net.TCPAddr{})
	lc := &loopConn{id: 7, fc: fc}
	fc.lp, fc.lc = lp, lc
	ev := loopEvent(lc.id, false)
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		t.Fatal(err)
	}

	// Numbered 100-byte ChannelData messages until the first is dropped.
	msg := make([]byte, 104)
	binary.BigEndian.PutUint16(msg[0:2], 0x4001)
	binary.BigEndian.PutUint16(msg[2:4], 100)
	var sent uint32
	for {
		binary.BigEndian.PutUint32(msg[4:8], sent)
		dropped, err := fc.WriteRelayed(msg)
		if err != nil {
			t.Fatal(err)
		}
		if dropped {
			break
		}
		sent++
		if sent > 1<<20 {
			t.Fatal("1 Mi messages taken without a drop: the backlog is unbounded")
		}
	}
	fc.mu.Lock()
	pend, armed := len(fc.pend), fc.outArmed
	fc.mu.Unlock()
	if pend == 0 || pend > outBacklog || !armed {
		t.Fatalf("after a drop: backlog %d bytes (want 1..%d), EPOLLOUT armed %v (want true)", pend, outBacklog, armed)
	}

	// The client reads everything not dropped while the test plays the
	// loop's EPOLLOUT part.
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 104)
		for i := range sent {
			if _, err := io.ReadFull(client, buf); err != nil {
				got <- err
				return
			}
			if binary.BigEndian.Uint16(buf[0:2]) != 0x4001 || binary.BigEndian.Uint32(buf[4:8]) != i {
				got <- errors.New("a message out of order or cut")
				return
			}
		}
		got <- nil
	}()
	events := make([]unix.EpollEvent, 4)
	deadline := time.Now().Add(20 * time.Second)
	for {
		fc.mu.Lock()
		pend, armed = len(fc.pend), fc.outArmed
		fc.mu.Unlock()
		if pend == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog of %d bytes not written in 20 s", pend)
		}
		n, _ := unix.EpollWait(ep, events, 100)
		for _, e := range events[:max(n, 0)] {
			if e.Fd == 7 && e.Events&unix.EPOLLOUT != 0 {
				if err := fc.flushPend(time.Now()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if armed {
		t.Error("EPOLLOUT still armed with an empty backlog")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not get every message in 20 s")
	}
	if fc.stalled(time.Now().Add(2 * writeTimeout)) {
		t.Error("stalled with an empty backlog")
	}

	fc.Close()
	lp.mu.Lock()
	queued := len(lp.closed) == 1 && lp.closed[0] == lc
	lp.mu.Unlock()
	if !queued {
		t.Fatal("Close did not queue the connection for its loop")
	}
	if _, err := fc.Write(msg); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a write after Close: %v, want net.ErrClosed", err)
	}
	fc.mu.Lock()
	fc.closeFD() // the loop's end
	open := fc.fdOpen
	fc.mu.Unlock()
	if open {
		t.Error("descriptor still open after the loop's end")
	}

	// Replies cannot be dropped: past outBacklogMax the connection fails
	// (a connection no loop serves yet: Close closes it at once).
	fd2, _ := rawPair(t)
	fc2 := newFDConn(fd2, &net.TCPAddr{})
	big := make([]byte, outBacklogMax/2)
	var werr error
	for range 8 {
		if _, werr = fc2.Write(big); werr != nil {
			break
		}
	}
	if !errors.Is(werr, errBacklog) {
		t.Errorf("writes past outBacklogMax to a client that does not read: %v, want errBacklog", werr)
	}
	fc2.Close()
	if fc2.fdOpen {
		t.Error("Close of a connection no loop serves left its descriptor open")
	}
}
