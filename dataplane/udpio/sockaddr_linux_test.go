package udpio

import (
	"net"
	"net/netip"
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
}

// TestSendToAllocatesNothing: the single-datagram send path of stream
// listeners builds its socket address on the stack.
func TestSendToAllocatesNothing(t *testing.T) {
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
		if err := SendTo(fd, p, to); err != nil {
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
}
