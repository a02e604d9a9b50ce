//go:build linux

package udpbatch

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/udpio"
)

// udpSegment is UDP_SEGMENT (linux/udp.h): the control message, and
// socket option, that sets a send's segment size.
const udpSegment = 103

// gsoHalf is the preallocated state of WriteGSO: one msghdr with one iovec
// and a UDP_SEGMENT control message, and the callback RawConn.Write runs.
type gsoHalf struct {
	msg  unix.Msghdr
	iov  unix.Iovec
	ctrl [unix.SizeofCmsghdr + 8]byte
	err  error
	fn   func(fd uintptr) bool
}

// GSOSupported reports whether the kernel knows UDP_SEGMENT (Linux 4.18+).
func GSOSupported() bool { return udpio.GSOSupported() }

// WriteGSO sends p to the socket's connected address as datagrams of seg
// bytes each, back to back in p (the last may be shorter), with a single
// sendmsg carrying a UDP_SEGMENT control message: UDP generic segmentation
// offload (Linux 4.18+). The kernel builds one UDP packet of them and
// cuts it into the datagrams below the UDP layer — in software at the
// first device without tx-udp-segmentation, or on arrival at a local
// socket — so the send path's cost (system call, route, socket
// accounting) is paid once for all of them. The socket must be connected
// (net.DialUDP). It returns the datagrams sent: all of them or, with an
// error, none. p may hold at most GSOMaxSegments segments and 65,000 bytes
// (ErrGSO). A full socket buffer waits in the runtime poller.
func (c *Conn) WriteGSO(p []byte, seg int) (int, error) {
	n, err := gsoSegments(p, seg)
	if err != nil {
		return 0, err
	}
	g := c.gsoState()
	g.iov.Base = &p[0]
	g.iov.SetLen(len(p))
	*(*uint16)(unsafe.Pointer(&g.ctrl[unix.SizeofCmsghdr])) = uint16(seg)
	werr := c.rc.Write(g.fn)
	g.iov.Base = nil
	if werr != nil {
		return 0, werr
	}
	if g.err != nil {
		return 0, g.err
	}
	return n, nil
}

// gsoState returns c's WriteGSO state, made on first use.
func (c *Conn) gsoState() *gsoHalf {
	if c.gso != nil {
		return c.gso
	}
	g := &gsoHalf{}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&g.ctrl[0]))
	h.Level, h.Type = unix.SOL_UDP, udpSegment
	h.SetLen(unix.CmsgLen(2))
	g.msg.Iov = &g.iov
	g.msg.SetIovlen(1)
	g.msg.Control = &g.ctrl[0]
	g.msg.SetControllen(unix.CmsgSpace(2))
	block := c.block
	g.fn = func(fd uintptr) bool {
		for {
			var en unix.Errno
			if block {
				_, _, en = unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&g.msg)), 0)
			} else {
				_, _, en = unix.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&g.msg)), 0)
			}
			switch en {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait in the poller, then again
			case 0:
				g.err = nil
			default:
				g.err = en
			}
			return true
		}
	}
	c.gso = g
	return g
}
