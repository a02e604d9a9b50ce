package udpio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpGRO is UDP_GRO (linux/udp.h): the socket option that lets a socket
// receive a run of same-size datagrams of one flow as one message, and the
// control message that reports their size.
const udpGRO = 104

// SetGRO turns UDP generic receive offload on for socket fd (Linux 5.0+):
// runs of datagrams of one flow that GRO joined on the way in (a device
// with rx-gro on), and UDP GSO packets that arrive whole, reach the socket
// as one message, back to back, instead of being cut apart, and Segments
// reports how many each carries. Receive batches need RecvDest's control
// buffers for it.
func SetGRO(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_UDP, udpGRO, 1) }

// Segments returns how many datagrams received message i carries: with
// UDP_GRO on (SetGRO) and a UDP_GRO control message of segment size s,
// its size divided by s rounded up (the last may be shorter); otherwise 1.
// It needs RecvDest's control buffers; without them it returns 1.
func (b *Batch) Segments(i int) int {
	if b.rctl == nil {
		return 1
	}
	n := int(b.hdrs[i].Hdr.Controllen)
	c := b.rctl[i*pktinfoSpace : i*pktinfoSpace+min(n, pktinfoSpace)]
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			break
		}
		data := c[unix.SizeofCmsghdr:l]
		if h.Level == unix.SOL_UDP && h.Type == udpGRO && len(data) >= 4 {
			seg := int(*(*int32)(unsafe.Pointer(&data[0])))
			if size := b.Size(i); seg > 0 && size > seg {
				return (size + seg - 1) / seg
			}
			return 1
		}
		next := unix.CmsgSpace(l - unix.SizeofCmsghdr)
		if next >= len(c) {
			break
		}
		c = c[next:]
	}
	return 1
}
