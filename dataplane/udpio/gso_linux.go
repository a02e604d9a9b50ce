package udpio

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UDP generic segmentation offload (Linux 4.18+): one sendmsg carries up to
// gsoMaxSegments datagrams of one size to one destination, and the kernel
// cuts them apart below the UDP layer, so the per-datagram cost of the send
// path (route, socket accounting, skb setup) is paid once per run.
const (
	gsoMaxSegments = 64    // the kernel's UDP_MAX_SEGMENTS
	gsoMaxBytes    = 65000 // payload bytes of one GSO send, under the 64 KiB IP limit
	udpSegment     = 103   // UDP_SEGMENT, in linux/udp.h
)

// gsoCtrl is the control space of one coalesced message in bytes: a
// UDP_SEGMENT message (a cmsghdr and a uint16, aligned to 8) and room for
// the packet info of a datagram with a source address (pktinfoSpace).
const gsoCtrl = unix.SizeofCmsghdr + 8 + unix.SizeofCmsghdr + 24

// gsoState is what a send batch needs for segmentation: a buffer the runs
// are copied into and one control message per batch slot.
type gsoState struct {
	buf  []byte
	ctrl [][gsoCtrl]byte
	segs []int // datagrams carried by each queued message after coalesce
}

// newGSOState returns the state for a batch of n. The copy buffer (127 KiB)
// comes with the first flush, so that a worker that never sends holds none.
func newGSOState(n int) *gsoState {
	return &gsoState{ctrl: make([][gsoCtrl]byte, n), segs: make([]int, n)}
}

// coalesce rewrites b's queued messages so that each run of consecutive
// datagrams on one socket to one destination from one source, all of one size (the last
// may be shorter, as GSO allows), becomes one message with a UDP_SEGMENT
// control message. Payloads of runs are copied into g.buf (a copy of ~100
// bytes is far cheaper than a trip down the send path). Messages that do
// not join a run are left as they are.
func (b *Batch) coalesce(g *gsoState) {
	if g.buf == nil {
		g.buf = make([]byte, 0, gsoMaxBytes*2)
	}
	g.buf = g.buf[:0]
	w := 0
	for i := 0; i < b.n; {
		size := int(b.iovs[i].Len)
		j := i + 1
		total := size
		for j < b.n && j-i < gsoMaxSegments && b.fds[j] == b.fds[i] &&
			b.hdrs[j].Hdr.Namelen == b.hdrs[i].Hdr.Namelen && b.names[j] == b.names[i] && b.srcs[j] == b.srcs[i] &&
			total+int(b.iovs[j].Len) <= gsoMaxBytes && len(g.buf)+total+int(b.iovs[j].Len) <= cap(g.buf) {
			l := int(b.iovs[j].Len)
			if l > size {
				break
			}
			total += l
			j++
			if l < size {
				break // a shorter datagram ends the run
			}
		}
		if j-i < 2 || size == 0 {
			b.move(w, i)
			g.segs[w] = 1
			w++
			i++
			continue
		}
		off := len(g.buf)
		for k := i; k < j; k++ {
			g.buf = append(g.buf, unsafe.Slice(b.iovs[k].Base, b.iovs[k].Len)...)
		}
		b.move(w, i)
		b.iovs[w].Base = &g.buf[off]
		b.iovs[w].SetLen(total)
		c := &g.ctrl[w]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		h.Level, h.Type = unix.SOL_UDP, udpSegment
		h.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafe.Pointer(&c[unix.SizeofCmsghdr])) = uint16(size)
		cl := unix.CmsgSpace(2)
		if b.srcs[w].IsValid() {
			cl += putPktinfo(c[cl:], b.srcs[w])
		}
		b.hdrs[w].Hdr.Control = &c[0]
		b.hdrs[w].Hdr.SetControllen(cl)
		g.segs[w] = j - i
		w++
		i = j
	}
	b.n = w
}

// move copies queued message i to slot w (w <= i) with no control message
// but its packet info, if it has a source address.
func (b *Batch) move(w, i int) {
	if w != i {
		b.iovs[w] = b.iovs[i]
		b.names[w] = b.names[i]
		b.fds[w] = b.fds[i]
		b.srcs[w] = b.srcs[i]
		b.hdrs[w].Hdr.Namelen = b.hdrs[i].Hdr.Namelen
	}
	b.setSourceControl(w)
}

// sendSegments sends the datagrams of GSO message i one by one: the
// fallback for a socket or route that refuses UDP_SEGMENT. It returns the
// datagrams and bytes sent.
func (b *Batch) sendSegments(i, segs int) (sent, bytes int) {
	size := int(*(*uint16)(unsafe.Pointer(uintptr(unsafe.Pointer(b.hdrs[i].Hdr.Control)) + unix.SizeofCmsghdr)))
	all := unsafe.Slice(b.iovs[i].Base, b.iovs[i].Len)
	to := decodeSockaddr(&b.names[i])
	for k := 0; k < segs && len(all) > 0; k++ {
		p := all[:min(size, len(all))]
		all = all[len(p):]
		if sendFrom(unix.Syscall6, b.fds[i], p, to, b.srcs[i]) == nil {
			sent++
			bytes += len(p)
		}
	}
	return sent, bytes
}

// GSOSupported reports whether the kernel knows UDP_SEGMENT. It probes
// once per process.
var GSOSupported = sync.OnceValue(gsoSupported)

func gsoSupported() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	_, err = unix.GetsockoptInt(fd, unix.SOL_UDP, udpSegment)
	return err == nil
}
