//go:build !linux

package udpbatch

import (
	"errors"
	"net"
	"net/netip"
)

// sys is empty off Linux: the portable fallback moves one datagram per
// system call, which is enough to build and test the harness there.
type sys struct{}

func (c *Conn) init(int) error { return nil }

// ListenBlocking is Listen and New off Linux: reads wait in the runtime
// poller.
func ListenBlocking(addr netip.AddrPort, o Options, batch int) (*Conn, error) {
	uc, err := Listen(addr, o)
	if err != nil {
		return nil, err
	}
	return New(uc, batch)
}

// LocalAddr is the address the socket is bound to.
func (c *Conn) LocalAddr() netip.AddrPort {
	return c.uc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Writer returns a Conn on the same socket; closing it leaves the socket
// open.
func (c *Conn) Writer(int) *Conn { return &Conn{uc: c.uc, shared: true} }

func (c *Conn) shutdown() {}

// ReadBatch blocks until one datagram arrives and returns 1.
func (c *Conn) ReadBatch(ms []Message) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	n, addr, err := c.uc.ReadFromUDPAddrPort(ms[0].Buf)
	if err != nil {
		return 0, err
	}
	ms[0].N, ms[0].Addr, ms[0].Segs = n, addr, 1
	return 1, nil
}

// WriteBatch sends every message of ms, one system call each.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	for i := range ms {
		if _, err := c.uc.WriteToUDPAddrPort(ms[i].Buf, ms[i].Addr); err != nil {
			return i, err
		}
	}
	return len(ms), nil
}

// GSOSupported is false off Linux: WriteGSO sends datagram by datagram.
func GSOSupported() bool { return false }

// WriteGSO sends p as datagrams of seg bytes (the last may be shorter) to
// the socket's connected address, one system call each off Linux. It
// returns the datagrams sent.
func (c *Conn) WriteGSO(p []byte, seg int) (int, error) {
	n, err := gsoSegments(p, seg)
	if err != nil {
		return 0, err
	}
	for i := range n {
		if _, err := c.uc.Write(p[i*seg : min((i+1)*seg, len(p))]); err != nil {
			return i, err
		}
	}
	return n, nil
}

// EnableGRO is unsupported off Linux.
func (c *Conn) EnableGRO() error { return errors.ErrUnsupported }
