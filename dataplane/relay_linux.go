package dataplane

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/sysblock"
	"github.com/tern-gw/tern/turn"
)

// relaySocket is a non-blocking UDP socket descriptor.
type relaySocket struct{ fd int }

func (s relaySocket) close() { _ = unix.Close(s.fd) }

// setDontFragment sets DF on everything the socket sends (RFC 8656 §7.2
// DONT-FRAGMENT) by turning path-MTU discovery to "do".
func (s relaySocket) setDontFragment(ipv6 bool) error {
	if ipv6 {
		return unix.SetsockoptInt(s.fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	}
	return unix.SetsockoptInt(s.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
}

// relayIO serves relay sockets with a few epoll workers: an allocation
// costs a socket and a small struct, not a goroutine and its stack.
type relayIO struct {
	pool *relayPool
	ws   []*relayWorker
	next atomic.Uint32
	wg   sync.WaitGroup
}

// relayWorker owns an epoll set of relay sockets. It alone closes them, so
// a descriptor it is reading is never reused under it.
type relayWorker struct {
	id    int
	io    *relayIO
	epfd  int
	evfd  int // wakes the worker for closes and stop
	stats workerStats
	// Poller mode: the epoll descriptor itself sits in the Go netpoller
	// (an epoll set is readable when any of its sockets is), so the worker
	// parks like any goroutine instead of blocking a thread in epoll_wait.
	epf *os.File
	erc syscall.RawConn

	mu sync.Mutex
	// relays is indexed by socket descriptor: descriptors are small and
	// dense, so a slice costs 8 bytes per descriptor where a map cost ~5
	// times that per relay.
	relays   []*relay
	closing  []*relay
	stopping bool
}

func newRelayIO(p *relayPool) (*relayIO, error) {
	io := &relayIO{pool: p}
	n := p.srv.opts.RelayThreads
	for i := 0; i < n; i++ {
		w, err := newRelayWorker(io, i)
		if err != nil {
			io.close()
			return nil, err
		}
		io.ws = append(io.ws, w)
	}
	for _, w := range io.ws {
		io.wg.Add(1)
		go func() {
			defer io.wg.Done()
			w.serve()
		}()
	}
	return io, nil
}

func newRelayWorker(io *relayIO, id int) (*relayWorker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	w := &relayWorker{id: id, io: io, epfd: epfd, evfd: evfd}
	if io.pool.srv.opts.IOMode != IOThreads {
		if err := unix.SetNonblock(epfd, true); err != nil {
			unix.Close(epfd)
			unix.Close(evfd)
			return nil, err
		}
		w.epf = os.NewFile(uintptr(epfd), "relay-epoll")
		if w.erc, err = w.epf.SyscallConn(); err != nil {
			w.epf.Close()
			unix.Close(evfd)
			return nil, err
		}
	}
	return w, nil
}

func (io *relayIO) workers() int { return len(io.ws) }

func (io *relayIO) foldStats(sum *statsSum) {
	for _, w := range io.ws {
		w.stats.addTo(sum)
	}
}

// bind opens a non-blocking relay socket on addr:port.
func (io *relayIO) bind(addr netip.Addr, port uint16) (relaySocket, error) {
	fd, err := socketFor(netip.AddrPortFrom(addr, port), true, false)
	if err != nil {
		return relaySocket{}, err
	}
	return relaySocket{fd: fd}, nil
}

// start adds r to a worker's epoll set, round robin.
func (io *relayIO) start(r *relay) error {
	w := io.ws[int(io.next.Add(1))%len(io.ws)]
	r.worker = w.id
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return errors.New("dataplane: relay workers stopped")
	}
	w.setRelay(r.sock.fd, r)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(r.sock.fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, r.sock.fd, &ev); err != nil {
		w.setRelay(r.sock.fd, nil)
		return err
	}
	return nil
}

// stop queues r for its worker to close. Only the first close queued
// since the worker last took the queue wakes it: under allocation churn one
// eventfd round trip then serves many closes.
func (io *relayIO) stop(r *relay) {
	w := io.ws[r.worker]
	w.mu.Lock()
	first := len(w.closing) == 0
	w.closing = append(w.closing, r)
	w.mu.Unlock()
	if first {
		w.wake()
	}
}

// close stops every worker, closing the sockets they serve.
func (io *relayIO) close() {
	for _, w := range io.ws {
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		w.wake()
	}
	io.wg.Wait()
}

// relay returns the relay whose socket is fd, or nil. The caller holds w.mu.
func (w *relayWorker) relay(fd int) *relay {
	if fd < 0 || fd >= len(w.relays) {
		return nil
	}
	return w.relays[fd]
}

// setRelay files r (nil to clear) under descriptor fd. The caller holds w.mu.
func (w *relayWorker) setRelay(fd int, r *relay) {
	if fd >= len(w.relays) {
		if r == nil {
			return
		}
		w.relays = append(w.relays, make([]*relay, fd+1-len(w.relays))...)
	}
	w.relays[fd] = r
}

func (w *relayWorker) wake() {
	one := [8]byte{1}
	_, _ = unix.Write(w.evfd, one[:])
}

// serve waits on the epoll set and drains each ready relay socket.
func (w *relayWorker) serve() {
	events := make([]unix.EpollEvent, 128)
	rb := newRecvBatch(batchSize, turn.PeerHeadroom, maxPeerPayload, turn.PeerTailroom)
	sb := newMsgBatch(batchSize)
	sb.gso = newSendGSO(w.io.pool.srv)
	var (
		n    int
		werr error
	)
	wait := func(uintptr) bool {
		n, werr = unix.EpollWait(w.epfd, events, 0)
		return n != 0 || (werr != nil && werr != unix.EINTR)
	}
	if w.erc == nil {
		defer sysblock.Enter()()
	}
	var y sysblock.Yielder
	for {
		if w.erc != nil {
			if err := w.erc.Read(wait); err != nil {
				return
			}
		} else {
			y.Maybe()
			n, werr = unix.EpollWait(w.epfd, events, -1)
		}
		if werr != nil && !errors.Is(werr, unix.EINTR) {
			return
		}
		for i := 0; i < n; i++ {
			fd := events[i].Fd
			if fd == int32(w.evfd) {
				if w.control() {
					return
				}
				continue
			}
			w.mu.Lock()
			r := w.relay(int(fd))
			w.mu.Unlock()
			if r != nil {
				w.drain(r, rb, sb)
			}
		}
	}
}

// control handles queued closes; it reports true when the worker must exit.
func (w *relayWorker) control() bool {
	var buf [8]byte
	_, _ = unix.Read(w.evfd, buf[:])
	w.mu.Lock()
	closing, stopping := w.closing, w.stopping
	w.closing = nil
	if stopping {
		for _, r := range w.relays {
			if r != nil {
				closing = append(closing, r)
			}
		}
	}
	for _, r := range closing {
		if w.relay(r.sock.fd) == r {
			w.setRelay(r.sock.fd, nil)
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, r.sock.fd, nil)
		}
	}
	w.mu.Unlock()
	for _, r := range closing {
		r.sock.close()
		w.io.pool.release(r)
	}
	if stopping {
		if w.epf != nil {
			w.epf.Close()
		} else {
			unix.Close(w.epfd)
		}
		unix.Close(w.evfd)
	}
	return stopping
}

// drain reads r's socket until it would block, frames each datagram for
// the client and sends the batch on the client's listener socket.
func (w *relayWorker) drain(r *relay, rb, sb *msgBatch) {
	eng := w.io.pool.srv.engine
	st := &w.stats
	a := r.alloc
	client := a.FiveTuple.Client
	ul, _ := a.Transport.(*udpListener)
	var out int
	if ul != nil {
		out = ul.socks[w.id%len(ul.socks)].fd
	}
	for {
		n, err := rb.recv(r.sock.fd, unix.MSG_DONTWAIT, false)
		if err != nil || n == 0 {
			return
		}
		var rxBytes, txBytes uint64
		for i := 0; i < n; i++ {
			size := int(rb.hdrs[i].Len)
			rxBytes += uint64(size)
			if rb.truncated(i) {
				st.drops[turn.DropMalformed].Add(1)
				continue
			}
			msg, ok := eng.HandlePeer(a, rb.from(i), rb.bufs[i], turn.PeerHeadroom, size)
			if !ok {
				st.drops[turn.DropNoPermission].Add(1)
				continue
			}
			if ul == nil {
				if cw, ok := a.Transport.(clientWriter); ok {
					cw.writeToClient(msg, client)
				}
				continue
			}
			sb.add(out, msg, client)
			txBytes += uint64(len(msg))
		}
		st.peerRx.Add(uint64(n))
		st.peerRxBytes.Add(rxBytes)
		if sb.n > 0 {
			sent, _ := sb.flush()
			ls := &ul.relayStats[w.id]
			ls.tx.Add(uint64(sent))
			ls.txBytes.Add(txBytes)
		}
		if n < len(rb.hdrs) {
			return
		}
	}
}

// send writes one datagram to a peer (the connection-oriented listeners'
// path; UDP listeners batch with sendmmsg instead).
func (s relaySocket) send(b []byte, to netip.AddrPort) error {
	return unix.Sendto(s.fd, b, 0, sockaddrOf(to))
}
