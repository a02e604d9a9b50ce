package udpio

import (
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sends queues datagrams, each for a descriptor of its own, until Flush
// sends them, one raw sendto each (RawSendTo). A socket reader that relays
// what one recvmmsg batch carries queues while it handles the batch and
// flushes after it, so its writes follow its reads. A raw system call
// spares the runtime's syscall bookkeeping, which wakes sysmon on every
// call when the reader is the only busy goroutine (perf: sysmon took a
// quarter of the TURN-DTLS listener's samples with Batch.Flush at 20k
// packets/s); the descriptors must be non-blocking, as relay sockets are.
// A datagram a socket buffer cannot take is dropped, as UDP may. Not safe
// for concurrent use.
type Sends struct{ q []queuedSend }

type queuedSend struct {
	fd int
	p  []byte
	to netip.AddrPort
}

// NewSends returns a queue with room for n datagrams before it grows.
func NewSends(n int) *Sends { return &Sends{q: make([]queuedSend, 0, n)} }

// Add queues p for `to` on fd; p must stay unchanged until Flush.
func (s *Sends) Add(fd int, p []byte, to netip.AddrPort) {
	s.q = append(s.q, queuedSend{fd, p, to})
}

// Flush sends every queued datagram and empties the queue.
func (s *Sends) Flush() {
	for i := range s.q {
		d := &s.q[i]
		_ = RawSendTo(d.fd, d.p, d.to)
		d.p = nil
	}
	s.q = s.q[:0]
}

// ConnSender sends on a net.UDPConn's socket from any goroutine with a raw
// sendto under RawConn.Control, which keeps the descriptor from being
// closed (and its number reused) meanwhile, without the runtime's write
// path. It does not wait for room: a datagram the socket buffer cannot
// take is dropped, as UDP may.
type ConnSender struct{ rc syscall.RawConn }

// NewConnSender returns a sender on c's socket, or the error of
// c.SyscallConn.
func NewConnSender(c *net.UDPConn) (*ConnSender, error) {
	rc, err := c.SyscallConn()
	return &ConnSender{rc}, err
}

// SendTo sends p to `to`; its error is RawConn.Control's (the socket is
// closed), never the send's.
func (s *ConnSender) SendTo(p []byte, to netip.AddrPort) error {
	return s.SendFrom(p, to, netip.Addr{})
}

// SendFrom is SendTo from src, the address the client sent to, on a socket
// bound to a wildcard address that asked for packet info (SetPacketInfo);
// the zero Addr leaves the source to the kernel, as SendTo.
func (s *ConnSender) SendFrom(p []byte, to netip.AddrPort, src netip.Addr) error {
	r := rawSendPool.Get().(*rawSend)
	r.p, r.to, r.src = p, to, src
	err := s.rc.Control(r.fn)
	r.p = nil
	rawSendPool.Put(r)
	return err
}

// rawSend carries a send's arguments into RawConn.Control through a
// function made once, so that a send allocates no closure.
type rawSend struct {
	p   []byte
	to  netip.AddrPort
	src netip.Addr
	fn  func(fd uintptr)
}

var rawSendPool = sync.Pool{New: func() any {
	s := &rawSend{}
	s.fn = func(fd uintptr) { _ = sendFrom(unix.RawSyscall6, int(fd), s.p, s.to, s.src) }
	return s
}}

// SetConnBuffers sets c's SO_RCVBUF and SO_SNDBUF to size bytes, past
// net.core.[rw]mem_max where the process may (SetBuffers).
func SetConnBuffers(c *net.UDPConn, size int) {
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { SetBuffers(int(fd), size) })
	}
}
