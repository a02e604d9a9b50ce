package udpio

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Batch is a preallocated vector of mmsghdrs for recvmmsg or sendmmsg, with
// one iovec and one socket address per message, so batch I/O allocates
// nothing per datagram. A Batch belongs to one goroutine.
type Batch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	bufs  [][]byte  // receive buffers (receive batches only)
	fds   []int     // destination socket per message (send batches only)
	n     int       // messages queued (send batches only)
	gso   *gsoState // send batches with UDP GSO on; nil sends datagram by datagram
	slab  []byte    // the mapping receive buffers live in; nil for heap or lent buffers
	// Packet info (pktinfo_linux.go): rctl holds each received message's
	// control (receive batches after RecvDest); srcs and sctl each queued
	// message's source address and the control that names it (send
	// batches; the zero Addr leaves the source to the kernel).
	rctl []byte
	srcs []netip.Addr
	sctl []byte
}

func newBatch(n int) *Batch {
	b := &Batch{
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n),
		fds:   make([]int, n),
		srcs:  make([]netip.Addr, n),
		sctl:  make([]byte, n*pktinfoSpace),
	}
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.SetIovlen(1)
	}
	return b
}

// NewSendBatch returns a batch that queues up to n datagrams for Flush. With
// gso, runs of same-size datagrams to one destination leave as one
// UDP_SEGMENT message when the kernel supports it (Linux 4.18+); otherwise,
// or without gso, each datagram is its own message.
func NewSendBatch(n int, gso bool) *Batch {
	b := newBatch(n)
	if gso && GSOSupported() {
		b.gso = newGSOState(n)
	}
	return b
}

// NewRecvBatch returns a batch that receives up to n datagrams, message i
// into Buf(i)[headroom:headroom+size]. The headroom and tailroom around each
// payload let a relay worker frame the datagram in place. With all three 0
// the batch has no buffers of its own: the caller lends them with SetRecv.
//
// The buffers are one anonymous mapping outside the Go heap, released by
// Free. Its pages become resident only when the kernel writes a datagram
// into them: recvmmsg fills slots in order, so an idle or lightly loaded
// worker holds a page or two of its ~600 KB, where heap buffers (zeroed by
// the allocator, often on pages init already touched) would be resident
// from the start. Where the mapping fails the buffers come from the heap.
func NewRecvBatch(n, headroom, size, tailroom int) *Batch {
	b := newBatch(n)
	b.bufs = make([][]byte, n)
	slot := headroom + size + tailroom
	if slot == 0 {
		return b
	}
	slab, err := unix.Mmap(-1, 0, n*slot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err == nil {
		b.slab = slab
	} else {
		slab = make([]byte, n*slot)
	}
	for i := range b.bufs {
		b.bufs[i] = slab[i*slot : (i+1)*slot : (i+1)*slot]
		b.iovs[i].Base = &b.bufs[i][headroom]
		b.iovs[i].SetLen(size)
	}
	return b
}

// Free releases the buffers NewRecvBatch made. Nothing may use a slice
// that Buf returned afterwards, so a worker frees its batch only once it
// has stopped. Free is safe to call more than once, and on any batch.
func (b *Batch) Free() {
	if b.slab != nil {
		_ = unix.Munmap(b.slab)
		b.slab = nil
	}
	for i := range b.bufs {
		b.bufs[i] = nil
		b.iovs[i].Base = nil
	}
}

// Cap returns how many datagrams the batch holds.
func (b *Batch) Cap() int { return len(b.hdrs) }

// GSO reports whether Flush uses UDP generic segmentation offload.
func (b *Batch) GSO() bool { return b.gso != nil }

// Recv reads up to Cap datagrams from fd with recvmmsg and returns how many
// it read, or the errno (unix.EAGAIN on an empty non-blocking socket).
// blocking selects a system call that may park the thread (blocking
// listener sockets) over a raw one for non-blocking sockets, which saves
// the scheduler hand-off around it.
func (b *Batch) Recv(fd int, flags int, blocking bool) (int, error) {
	return b.RecvN(fd, len(b.hdrs), flags, blocking)
}

// RecvN is Recv into the first n messages only (1 <= n <= Cap), for a
// caller that lent fewer buffers than the batch holds.
func (b *Batch) RecvN(fd, n, flags int, blocking bool) (int, error) {
	return b.RecvAt(fd, 0, n, flags, blocking)
}

// RecvAt is Recv into messages off to off+n-1 only (0 <= off, 1 <= n,
// off+n <= Cap), leaving the others as they are: a relay worker receives
// from several sockets into one batch, so that what it frames in place from
// each stays intact until one Flush sends them all. The datagrams read are
// messages off, off+1, ... of Buf, Size, From and Truncated.
func (b *Batch) RecvAt(fd, off, n, flags int, blocking bool) (int, error) {
	for i := off; i < off+n; i++ {
		b.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		b.hdrs[i].Hdr.Flags = 0
		if b.rctl != nil {
			b.hdrs[i].Hdr.SetControllen(pktinfoSpace)
		}
	}
	return b.mmsgAt(unix.SYS_RECVMMSG, fd, off, n, flags, blocking)
}

// SetRecv lends p to message i of a receive batch: the next Recv writes
// that datagram to p[0:], at most len(p) bytes, and Buf(i) returns p. The
// batch keeps p until the next SetRecv of i.
func (b *Batch) SetRecv(i int, p []byte) {
	b.bufs[i] = p
	b.setIov(i, p)
}

// Send sends the queued datagrams on socket fd (whatever socket Add named)
// with one sendmmsg call, without GSO, and returns how many the kernel
// took, always the first ones, or the errno (unix.EAGAIN when a
// non-blocking socket's buffer is full, unix.EINTR). Unlike Flush it leaves
// the queue as it is, so that the caller can retry after EAGAIN or queue
// again what was not sent; Reset empties it. blocking is as for Recv.
func (b *Batch) Send(fd, flags int, blocking bool) (int, error) {
	if b.n == 0 {
		return 0, nil
	}
	if b.gso != nil {
		// Slots an earlier Flush coalesced still carry UDP_SEGMENT.
		for i := range b.n {
			b.setSourceControl(i)
		}
	}
	return b.mmsg(unix.SYS_SENDMMSG, fd, b.n, flags, blocking)
}

// SendAt is Send of the queued datagrams from message off on (0 <= off <
// Queued), with a raw system call (the socket must be non-blocking), for
// a caller that goes on past a datagram the kernel refused. It returns how
// many the kernel took, from off on, or the errno.
func (b *Batch) SendAt(fd, off, flags int) (int, error) {
	if off >= b.n {
		return 0, nil
	}
	return b.mmsgAt(unix.SYS_SENDMMSG, fd, off, b.n-off, flags, false)
}

// Reset empties the queue without sending, and drops the batch's
// references to the queued payloads.
func (b *Batch) Reset() {
	for k := range b.n {
		b.iovs[k].Base = nil // do not keep replies alive
	}
	b.n = 0
}

// mmsg runs one recvmmsg or sendmmsg (trap) over the first n messages.
func (b *Batch) mmsg(trap uintptr, fd, n, flags int, blocking bool) (int, error) {
	return b.mmsgAt(trap, fd, 0, n, flags, blocking)
}

// mmsgAt runs one recvmmsg or sendmmsg (trap) over messages off to off+n-1.
func (b *Batch) mmsgAt(trap uintptr, fd, off, n, flags int, blocking bool) (int, error) {
	var (
		r  uintptr
		en unix.Errno
	)
	h := uintptr(unsafe.Pointer(&b.hdrs[off]))
	if blocking {
		r, _, en = unix.Syscall6(trap, uintptr(fd), h, uintptr(n), uintptr(flags), 0, 0)
	} else {
		r, _, en = unix.RawSyscall6(trap, uintptr(fd), h, uintptr(n), uintptr(flags), 0, 0)
	}
	if en != 0 {
		return 0, en
	}
	return int(r), nil
}

// setIov points message i's iovec at p; an empty p is a zero-length one.
func (b *Batch) setIov(i int, p []byte) {
	if len(p) == 0 {
		b.iovs[i].Base = nil
	} else {
		b.iovs[i].Base = &p[0]
	}
	b.iovs[i].SetLen(len(p))
}

// Buf returns the whole buffer of received message i, headroom and
// tailroom included.
func (b *Batch) Buf(i int) []byte { return b.bufs[i] }

// Size returns the length of received message i in bytes.
func (b *Batch) Size(i int) int { return int(b.hdrs[i].Len) }

// From returns the source address of received message i.
func (b *Batch) From(i int) netip.AddrPort { return decodeSockaddr(&b.names[i]) }

// Truncated reports whether received message i did not fit its buffer.
func (b *Batch) Truncated(i int) bool { return b.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// Queued returns how many datagrams wait for Flush.
func (b *Batch) Queued() int { return b.n }

// Full reports whether no more datagrams can be queued before Flush.
func (b *Batch) Full() bool { return b.n == len(b.hdrs) }

// Add queues p for to on socket fd, from the address the kernel picks. p
// must stay unchanged until Flush. The caller flushes before the batch is
// full.
func (b *Batch) Add(fd int, p []byte, to netip.AddrPort) {
	i := b.n
	b.setIov(i, p)
	b.hdrs[i].Hdr.Namelen = encodeSockaddr(&b.names[i], to)
	b.fds[i] = fd
	if b.srcs[i].IsValid() {
		// The slot's last datagram named its source (AddFrom).
		b.srcs[i] = netip.Addr{}
		b.hdrs[i].Hdr.Control = nil
		b.hdrs[i].Hdr.SetControllen(0)
	}
	b.n++
}

// Flush sends the queued datagrams, one sendmmsg per run of messages to the
// same socket, and returns how many datagrams were sent and their bytes. A
// datagram the kernel refuses (no route, buffer full on a non-blocking relay
// socket) is skipped: UDP promises no delivery anyway.
func (b *Batch) Flush() (sent, bytes int) {
	queued := b.n
	if b.gso != nil {
		b.coalesce(b.gso)
	}
	for i := 0; i < b.n; {
		j := i + 1
		for j < b.n && b.fds[j] == b.fds[i] {
			j++
		}
		for i < j {
			r, _, en := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(b.fds[i]), uintptr(unsafe.Pointer(&b.hdrs[i])), uintptr(j-i), 0, 0, 0)
			if en == unix.EINTR {
				continue
			}
			if en != 0 || r == 0 {
				if b.gso != nil && b.gso.segs[i] > 1 {
					s, n := b.sendSegments(i, b.gso.segs[i])
					sent, bytes = sent+s, bytes+n
				}
				i++ // skip the message that failed
				continue
			}
			for k := i; k < i+int(r); k++ {
				bytes += int(b.iovs[k].Len)
				if b.gso != nil {
					sent += b.gso.segs[k]
				} else {
					sent++
				}
			}
			i += int(r)
		}
	}
	b.n = queued // coalesce may have shrunk the queue: clear all it used
	b.Reset()
	return sent, bytes
}
