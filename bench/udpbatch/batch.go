// Package udpbatch sends and receives UDP datagrams in batches, so that the
// load generator spends its CPU on packets rather than on system calls: on
// Linux one recvmmsg or sendmmsg moves up to a whole batch.
//
// A Conn keeps separate, preallocated state for reading and for writing, so
// one goroutine may read while another writes; neither path allocates per
// datagram.
//
// On Linux the batches, the socket address codec and the socket options
// are dataplane/udpio's, so the harness makes the system calls the
// dataplane makes; this package adds what a load generator needs on top:
// waiting in the runtime poller on a full or empty socket, a Close that
// wakes a reader blocked in the kernel, and Messages with buffers of the
// caller's. Elsewhere it falls back to one datagram per system call.
package udpbatch

import (
	"net"
	"net/netip"
	"os"
)

// Message is one datagram of a batch.
type Message struct {
	// Buf holds the payload to send, or receives one datagram; a datagram
	// longer than len(Buf) is truncated.
	Buf []byte
	// N is the number of bytes received into Buf (reads only).
	N int
	// Addr is the destination (writes) or the source (reads).
	Addr netip.AddrPort
	// Segs is how many datagrams a read message carries: 1, or more on a
	// socket with EnableGRO where the kernel joined a run of same-size
	// datagrams of one flow (Buf then holds them back to back).
	Segs int
}

// Conn batches I/O on one UDP socket.
type Conn struct {
	uc     *net.UDPConn // nil for ListenBlocking sockets
	file   *os.File     // ListenBlocking sockets
	shared bool         // a Writer: Close leaves the socket open
	sys
}

// New wraps uc; batch is the largest number of datagrams one call moves.
func New(uc *net.UDPConn, batch int) (*Conn, error) {
	if batch < 1 {
		batch = 1
	}
	c := &Conn{uc: uc}
	if err := c.init(batch); err != nil {
		return nil, err
	}
	return c, nil
}

// UDPConn returns the underlying socket, or nil for a ListenBlocking one.
func (c *Conn) UDPConn() *net.UDPConn { return c.uc }

// Close closes the socket (unless c is a Writer); a blocked ReadBatch
// returns an error.
func (c *Conn) Close() error {
	if c.shared {
		return nil
	}
	c.shutdown()
	if c.file != nil {
		return c.file.Close()
	}
	return c.uc.Close()
}
