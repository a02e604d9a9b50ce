package relay

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/internal/pausegate"
	"github.com/tern-gw/tern/internal/sysblock"
	"github.com/tern-gw/tern/turn"
)

// relaySocket is a non-blocking UDP socket descriptor.
type relaySocket struct{ fd int }

func (s relaySocket) close() { _ = unix.Close(s.fd) }

// setDontFragment sets DF on everything the socket sends (RFC 8656 §7.2
// DONT-FRAGMENT).
func (s relaySocket) setDontFragment(ipv6 bool) error { return udpio.SetDontFragment(s.fd, ipv6) }

// relayIO serves relay sockets with a few epoll workers: an allocation
// costs a socket and a small struct, not a goroutine and its stack.
type relayIO struct {
	pool *Pool
	ws   []*worker
	next atomic.Uint32
	wg   sync.WaitGroup
	// gate parks the workers in control while a hand-over holds them
	// (Pool.Pause): they read no relay socket and close none.
	gate pausegate.Gate
}

// worker owns an epoll set of relay sockets. It alone closes them, so a
// descriptor it is reading is never reused under it.
type worker struct {
	id    int
	io    *relayIO
	epfd  int
	evfd  int // wakes the worker for closes and stop
	stats stats.Worker
	// Poller mode: the epoll descriptor itself sits in the Go netpoller
	// (an epoll set is readable when any of its sockets is), so the worker
	// parks like any goroutine instead of blocking a thread in epoll_wait.
	epf *os.File
	erc syscall.RawConn

	// relays is indexed by socket descriptor (descriptors are small and
	// dense: 8 bytes per descriptor, where a map cost ~5 times that per
	// relay). The worker reads it with one atomic load per ready socket and
	// no lock; writers (start, control) hold mu and replace the slice only
	// to grow it, storing entries atomically in place otherwise.
	relays atomic.Pointer[[]atomic.Pointer[Relay]]

	mu       sync.Mutex
	closing  []*Relay
	stopping bool
}

func newRelayIO(p *Pool) (*relayIO, error) {
	io := &relayIO{pool: p}
	for i := 0; i < p.opts.Workers; i++ {
		w, err := newWorker(io, i)
		if err != nil {
			io.closeFDs()
			return nil, err
		}
		io.ws = append(io.ws, w)
	}
	return io, nil
}

// run starts the workers.
func (io *relayIO) run() {
	for _, w := range io.ws {
		io.wg.Add(1)
		go func() {
			defer io.wg.Done()
			w.serve()
		}()
	}
}

func newWorker(io *relayIO, id int) (*worker, error) {
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
	w := &worker{id: id, io: io, epfd: epfd, evfd: evfd}
	w.relays.Store(new([]atomic.Pointer[Relay]))
	if io.pool.opts.Mode != udpio.Threads {
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

func (io *relayIO) foldStats(sum *stats.Sum) {
	for _, w := range io.ws {
		w.stats.AddTo(sum)
	}
}

// bind opens a non-blocking relay socket on addr:port.
func (io *relayIO) bind(addr netip.Addr, port uint16) (relaySocket, error) {
	fd, err := udpio.Socket(netip.AddrPortFrom(addr, port), udpio.SocketOptions{NonBlock: true})
	if err != nil {
		return relaySocket{}, err
	}
	return relaySocket{fd: fd}, nil
}

// start adds r to a worker's epoll set, round robin, and settles where the
// worker sends r's client-bound messages.
func (io *relayIO) start(r *Relay) error {
	w := io.ws[int(io.next.Add(1))%len(io.ws)]
	r.worker = w.id
	r.outFD, r.outStats, r.batch = r.client.BatchSocket(w.id)
	if ds, ok := r.client.(DestinationSource); ok && ds.FromDestination() && r.alloc != nil {
		r.fromDest = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return errors.New("relay: workers stopped")
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
func (io *relayIO) stop(r *Relay) {
	w := io.ws[r.worker]
	w.mu.Lock()
	first := len(w.closing) == 0
	w.closing = append(w.closing, r)
	w.mu.Unlock()
	if first {
		w.wake()
	}
}

// detach removes r from its worker's epoll set and table now, not at the
// worker's next wake-up as stop does, then closes this process's
// descriptor and releases the port: the workers are paused (Pool.Detach).
func (io *relayIO) detach(r *Relay) {
	w := io.ws[r.worker]
	w.mu.Lock()
	if w.relay(r.sock.fd) == r {
		w.setRelay(r.sock.fd, nil)
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, r.sock.fd, nil)
	}
	w.mu.Unlock()
	r.sock.close()
	io.pool.release(r)
}

// pause parks every worker; queued closes wait until resume.
func (io *relayIO) pause() {
	io.gate.Pause(len(io.ws), func() {
		for _, w := range io.ws {
			w.wake()
		}
	})
}

// resume lets the workers go on.
func (io *relayIO) resume() { io.gate.Resume() }

// adoptSocket takes fd, a relay socket another process bound, and returns
// it with its bound address. It is made non-blocking, as relay sockets are.
func (io *relayIO) adoptSocket(fd int) (relaySocket, netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return relaySocket{}, netip.AddrPort{}, err
	}
	var local netip.AddrPort
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		local = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	default:
		return relaySocket{}, netip.AddrPort{}, errors.New("not an IP socket")
	}
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_DGRAM {
		return relaySocket{}, netip.AddrPort{}, errors.New("not a UDP socket")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return relaySocket{}, netip.AddrPort{}, err
	}
	return relaySocket{fd: fd}, local, nil
}

// close stops every worker, closing the sockets they serve.
func (io *relayIO) close() {
	io.gate.Resume()
	for _, w := range io.ws {
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		w.wake()
	}
	io.wg.Wait()
}

// closeFDs releases the descriptors of workers that never ran.
func (io *relayIO) closeFDs() {
	for _, w := range io.ws {
		if w.epf != nil {
			w.epf.Close()
		} else {
			unix.Close(w.epfd)
		}
		unix.Close(w.evfd)
	}
}

// relay returns the relay whose socket is fd, or nil. Lock-free.
func (w *worker) relay(fd int) *Relay {
	t := *w.relays.Load()
	if fd < 0 || fd >= len(t) {
		return nil
	}
	return t[fd].Load()
}

// setRelay files r (nil to clear) under descriptor fd, growing the table
// by copy when fd is past its end. The caller holds w.mu.
func (w *worker) setRelay(fd int, r *Relay) {
	t := *w.relays.Load()
	if fd >= len(t) {
		if r == nil {
			return
		}
		grown := make([]atomic.Pointer[Relay], max(fd+1, 2*len(t)))
		for i := range t {
			grown[i].Store(t[i].Load())
		}
		w.relays.Store(&grown)
		t = grown
	}
	t[fd].Store(r)
}

func (w *worker) wake() {
	one := [8]byte{1}
	_, _ = unix.Write(w.evfd, one[:])
}

// outQueue is what a worker has framed for UDP clients and not yet sent:
// the first used messages of its receive batch, queued in its send batch
// for one listener socket, whose counters st are; and the connection
// clients (TCP, TLS, DTLS) it queued messages for during this wake-up,
// flushed after it (Client.QueueToClient).
type outQueue struct {
	used  int
	st    *stats.Worker
	conns []Client
}

// serve waits on the epoll set and drains each ready relay socket. What
// the ready sockets of one wake-up yield for UDP clients leaves in one
// Flush: their client-bound messages all go out through a listener socket,
// so under interleaved flows, where each socket holds one datagram, a
// wake-up costs one sendmmsg instead of one per socket.
func (w *worker) serve() {
	events := make([]unix.EpollEvent, 128)
	rb := udpio.NewRecvBatch(udpio.BatchSize, turn.PeerHeadroom, maxPeerPayload, turn.PeerTailroom)
	defer rb.Free()
	sb := udpio.NewSendBatch(udpio.BatchSize, w.io.pool.opts.GSO)
	var (
		n    int
		werr error
		out  = outQueue{conns: make([]Client, 0, 64)}
	)
	wait := func(uintptr) bool {
		n, werr = unix.EpollWait(w.epfd, events, 0)
		return n != 0 || (werr != nil && werr != unix.EINTR)
	}
	if w.erc == nil {
		defer sysblock.Enter()()
	}
	var y sysblock.Yielder
	linger := sysblock.Linger{Period: w.io.pool.opts.Linger}
	for {
		if w.erc != nil {
			if err := w.erc.Read(wait); err != nil {
				return
			}
		} else {
			y.Maybe()
			if linger.Wait() {
				n, werr = unix.EpollWait(w.epfd, events, 0)
				linger.Polled(n > 0)
			} else {
				n, werr = unix.EpollWait(w.epfd, events, -1)
				linger.Woke()
			}
		}
		if werr != nil && !errors.Is(werr, unix.EINTR) {
			return
		}
		for i := 0; i < n; i++ {
			fd := events[i].Fd
			if fd == int32(w.evfd) {
				// Closes release relays whose messages may be queued.
				w.flush(sb, &out)
				w.flushConns(&out)
				if w.control() {
					return
				}
				continue
			}
			if r := w.relay(int(fd)); r != nil {
				w.drain(r, rb, sb, &out)
			}
		}
		w.flush(sb, &out)
		w.flushConns(&out)
	}
}

// flushConns sends what the worker queued for connection clients during
// this wake-up: one write (or sendmmsg) per client or listener socket
// instead of one per message.
func (w *worker) flushConns(out *outQueue) {
	for i, c := range out.conns {
		c.FlushToClient(w.id)
		out.conns[i] = nil
	}
	out.conns = out.conns[:0]
}

// flush sends what out holds and counts it on the listener socket's
// counters.
func (w *worker) flush(sb *udpio.Batch, out *outQueue) {
	if sb.Queued() == 0 {
		out.used = 0
		return
	}
	sent, bytes := sb.Flush()
	if !w.io.pool.opts.NoCounters && sent > 0 {
		out.st.Tx.Add(uint64(sent))
		out.st.TxBytes.Add(uint64(bytes))
	}
	out.used = 0
}

// control handles queued closes; it reports true when the worker must exit.
func (w *worker) control() bool {
	var buf [8]byte
	_, _ = unix.Read(w.evfd, buf[:])
	w.mu.Lock()
	closing, stopping := w.closing, w.stopping
	w.closing = nil
	if stopping {
		t := *w.relays.Load()
		for i := range t {
			if r := t[i].Load(); r != nil {
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
		return true
	}
	if w.io.gate.Paused() {
		w.io.gate.Park()
	}
	return false
}

// drain reads r's socket until it would block and frames each datagram
// for the client: for a UDP client it queues the message in sb, received
// into the batch slots after those out already holds, so that serve sends
// what a whole wake-up yields together; a connection's client queues it
// too (Client.QueueToClient), and serve flushes it after the wake-up. It counts in the worker's own counters once per read
// (per run of same-cluster datagrams for the cluster counters).
func (w *worker) drain(r *Relay, rb, sb *udpio.Batch, out *outQueue) {
	eng := w.io.pool.engine
	st := &w.stats
	count := !w.io.pool.opts.NoCounters
	a := r.alloc
	client := a.FiveTuple.Client
	var src netip.Addr // the zero Addr: the listener socket's own
	if r.fromDest {
		src = a.FiveTuple.Server.Addr()
	}
	for {
		if r.batch && sb.Queued() > 0 && out.st != r.outStats {
			w.flush(sb, out) // another listener socket: one queue per socket
		}
		if out.used == rb.Cap() {
			w.flush(sb, out)
		}
		off := out.used
		want := rb.Cap() - off
		n, err := rb.RecvAt(r.sock.fd, off, want, unix.MSG_DONTWAIT, false)
		if err != nil || n == 0 {
			return
		}
		var (
			rxBytes uint64
			run     stats.ClusterRun
		)
		for i := off; i < off+n; i++ {
			size := rb.Size(i)
			rxBytes += uint64(size)
			if rb.Truncated(i) {
				st.Drops[turn.DropMalformed].Add(1)
				continue
			}
			msg, cluster, ok := eng.HandlePeer(a, rb.From(i), rb.Buf(i), turn.PeerHeadroom, size)
			if !ok {
				st.Drops[turn.DropNoPermission].Add(1)
				continue
			}
			run.Rx(st, cluster, size)
			if !r.batch {
				if r.client.QueueToClient(w.id, msg) {
					out.conns = append(out.conns, r.client)
				}
				continue
			}
			sb.AddFrom(r.outFD, msg, client, src)
		}
		if r.batch {
			out.used = off + n
			out.st = r.outStats
		}
		if count {
			st.PeerRx.Add(uint64(n))
			st.PeerRxBytes.Add(rxBytes)
			run.FlushRx(st)
		}
		if n < want {
			return
		}
	}
}
