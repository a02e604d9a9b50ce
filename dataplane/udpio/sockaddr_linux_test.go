package udpio

import (
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSockaddrRoundTrip: what encodeSockaddr writes, decodeSockaddr reads
// back, for both families and the edge ports.
func TestSockaddrRoundTrip(t *testing.T) {
	for _, s := range []string{"127.0.0.1:3478", "10.1.2.3:0", "255.255.255.255:65535", "[::1]:3478", "[2001:db8::1]:65535"} {
		ap := netip.MustParseAddrPort(s)
		var sa unix.RawSockaddrInet6
		n := encodeSockaddr(&sa, ap)
		if want := uint32(unix.SizeofSockaddrInet6); ap.Addr().Is4() {
			want = unix.SizeofSockaddrInet4
			if n != want {
				t.Errorf("%s: length %d, want %d", s, n, want)
			}
		} else if n != want {
			t.Errorf("%s: length %d, want %d", s, n, want)
		}
		if got := decodeSockaddr(&sa); got != ap {
			t.Errorf("%s: decoded %v", s, got)
		}
	}
	// An IPv4-mapped address goes out as sockaddr_in, which an AF_INET
	// socket accepts, and so comes back as plain IPv4.
	mapped := netip.MustParseAddrPort("[::ffff:127.0.0.1]:3478")
	var sa unix.RawSockaddrInet6
	if n := encodeSockaddr(&sa, mapped); n != unix.SizeofSockaddrInet4 || sa.Family != unix.AF_INET {
		t.Errorf("%v: family %d length %d, want sockaddr_in", mapped, sa.Family, n)
	}
	if got, want := decodeSockaddr(&sa), netip.MustParseAddrPort("127.0.0.1:3478"); got != want {
		t.Errorf("%v: decoded %v, want %v", mapped, got, want)
	}
}

// TestLocalAddr: LocalAddr reports the bound address of either family, as
// unix.Getsockname does, without allocating.
func TestLocalAddr(t *testing.T) {
	for _, s := range []string{"127.0.0.1:0", "[::1]:0"} {
		fd, err := Socket(netip.MustParseAddrPort(s), SocketOptions{})
		if err != nil {
			t.Skipf("%s: %v", s, err) // a host without IPv6 loopback
		}
		defer unix.Close(fd)
		got, err := LocalAddr(fd)
		if err != nil {
			t.Fatal(err)
		}
		var want netip.AddrPort
		switch sa, _ := unix.Getsockname(fd); sa := sa.(type) {
		case *unix.SockaddrInet4:
			want = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		case *unix.SockaddrInet6:
			want = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
		}
		if got != want || got.Port() == 0 {
			t.Errorf("%s: LocalAddr = %v, getsockname says %v", s, got, want)
		}
		if allocs := testing.AllocsPerRun(100, func() { _, _ = LocalAddr(fd) }); allocs != 0 {
			t.Errorf("%s: %v allocations per LocalAddr", s, allocs)
		}
	}
}

// TestLentBuffers: a batch that owns no buffers sends with Send and
// receives into buffers lent with SetRecv; RecvN fills only the messages
// it is given; and a round trip of a whole batch allocates nothing.
func TestLentBuffers(t *testing.T) {
	rxfd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rxfd)
	tv := unix.Timeval{Sec: 2}
	_ = unix.SetsockoptTimeval(rxfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	to, err := LocalAddr(rxfd)
	if err != nil {
		t.Fatal(err)
	}
	txfd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(txfd)
	from, _ := LocalAddr(txfd)

	const n = 4
	sb := NewSendBatch(n, false)
	rb := NewRecvBatch(n, 0, 0, 0)
	out := make([][]byte, n)
	in := make([][]byte, n)
	for i := range n {
		out[i] = []byte{byte(i), 'x', 'y'}
		in[i] = make([]byte, 2) // one byte short: each datagram is cut
		rb.SetRecv(i, in[i])
		sb.Add(txfd, out[i], to)
	}
	if sent, err := sb.Send(txfd, 0, true); sent != n || err != nil {
		t.Fatalf("Send = %d, %v; want %d", sent, err, n)
	}
	if sb.Queued() != n {
		t.Fatalf("Send left %d queued, want %d until Reset", sb.Queued(), n)
	}
	sb.Reset()
	if got, err := rb.RecvN(rxfd, 1, unix.MSG_WAITFORONE, true); got != 1 || err != nil {
		t.Fatalf("RecvN(1) = %d, %v", got, err)
	}
	for got := 1; got < n; {
		k, err := rb.Recv(rxfd, unix.MSG_WAITFORONE, true)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	// The first datagram went to in[0] alone; the other three followed
	// into in[0..2] with the second call.
	for i := range n - 1 {
		if &rb.Buf(i)[0] != &in[i][0] || rb.Size(i) != 2 || !rb.Truncated(i) || rb.From(i) != from || in[i][0] != byte(i+1) {
			t.Errorf("message %d: %d bytes (truncated %v) %q from %v", i, rb.Size(i), rb.Truncated(i), in[i], rb.From(i))
		}
	}

	allocs := testing.AllocsPerRun(50, func() {
		for i := range n {
			sb.Add(txfd, out[i], to)
		}
		if sent, err := sb.Send(txfd, 0, true); sent != n || err != nil {
			t.Fatalf("Send = %d, %v", sent, err)
		}
		sb.Reset()
		for got := 0; got < n; {
			k, err := rb.Recv(rxfd, unix.MSG_WAITFORONE, true)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch round trip", allocs)
	}
}

// TestSendToAllocatesNothing: the single-datagram send paths (SendTo, of
// stream listeners; RawSendTo, of the DTLS listener's reader) build their
// socket address on the stack and deliver the datagram.
func TestSendToAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(fd int, p []byte, to netip.AddrPort) error
	}{
		{"SendTo", SendTo},
		{"RawSendTo", RawSendTo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			fd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
			p := []byte("hello")
			buf := make([]byte, 64)
			allocs := testing.AllocsPerRun(200, func() {
				if err := tc.send(fd, p, to); err != nil {
					t.Fatal(err)
				}
				_ = rx.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, _, err := rx.ReadFromUDPAddrPort(buf); err != nil || string(buf[:n]) != "hello" {
					t.Fatalf("read %q, %v", buf[:n], err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per send", allocs)
			}
		})
	}
}

// TestBatchRoundTrip: datagrams queued on a send batch arrive in a receive
// batch with their sources, sizes and payloads.
func TestBatchRoundTrip(t *testing.T) {
	rxfd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rxfd)
	sa, err := unix.Getsockname(rxfd)
	if err != nil {
		t.Fatal(err)
	}
	to := netip.AddrPortFrom(netip.AddrFrom4(sa.(*unix.SockaddrInet4).Addr), uint16(sa.(*unix.SockaddrInet4).Port))
	txfd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(txfd)
	sb := NewSendBatch(8, false)
	for i := range 5 {
		sb.Add(txfd, make([]byte, 10+i), to)
	}
	if sent, bytes := sb.Flush(); sent != 5 || bytes != 10+11+12+13+14 {
		t.Fatalf("flush: %d datagrams, %d bytes", sent, bytes)
	}
	rb := NewRecvBatch(8, 4, 12, 4)
	got := 0
	for got < 5 {
		tv := unix.Timeval{Sec: 2}
		_ = unix.SetsockoptTimeval(rxfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, err := rb.Recv(rxfd, unix.MSG_WAITFORONE, true)
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		for i := range n {
			size := 10 + got // a datagram over the 12-byte slot is cut and flagged
			if rb.Size(i) != min(size, 12) || rb.Truncated(i) != (size > 12) || len(rb.Buf(i)) != 20 || !rb.From(i).Addr().IsLoopback() {
				t.Errorf("datagram %d: size %d truncated %v buf %d from %v", got, rb.Size(i), rb.Truncated(i), len(rb.Buf(i)), rb.From(i))
			}
			got++
		}
	}
	rb.Free()
	rb.Free() // a second Free is harmless
	if rb.Buf(0) != nil || rb.slab != nil {
		t.Error("Free left the buffers in place")
	}
}

// TestRecvAt: receives into later messages leave the earlier ones as they
// were, so that one batch can collect datagrams from several sockets.
func TestRecvAt(t *testing.T) {
	var fds [2]int
	var addrs [2]netip.AddrPort
	for i := range fds {
		fd, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{NonBlock: true})
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		fds[i] = fd
		addrs[i], _ = LocalAddr(fd)
	}
	tx, err := Socket(netip.MustParseAddrPort("127.0.0.1:0"), SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tx)
	from, _ := LocalAddr(tx)
	sb := NewSendBatch(4, false)
	sb.Add(tx, []byte("a0"), addrs[0])
	sb.Add(tx, []byte("b0"), addrs[1])
	sb.Add(tx, []byte("b1"), addrs[1])
	if sent, _ := sb.Flush(); sent != 3 {
		t.Fatalf("sent %d, want 3", sent)
	}
	rb := NewRecvBatch(4, 2, 16, 0)
	defer rb.Free()
	recv := func(fd, off, want int) {
		t.Helper()
		for range 100 { // loopback delivers at once; allow a scheduler hiccup
			if n, err := rb.RecvAt(fd, off, 4-off, unix.MSG_DONTWAIT, false); err == nil {
				if n != want {
					t.Fatalf("RecvAt(off %d) = %d, want %d", off, n, want)
				}
				return
			}
			runtime.Gosched()
		}
		t.Fatal("nothing arrived")
	}
	recv(fds[0], 0, 1)
	recv(fds[1], 1, 2)
	for i, want := range []string{"a0", "b0", "b1"} {
		if got := string(rb.Buf(i)[2 : 2+rb.Size(i)]); got != want || rb.From(i) != from {
			t.Errorf("message %d: %q from %v, want %q from %v", i, got, rb.From(i), want, from)
		}
	}
}
