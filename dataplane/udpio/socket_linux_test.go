package udpio

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDualStackSocket: a DualStack socket on an unspecified address
// receives from IPv4 and IPv6 sources, reports the IPv4 ones unmapped,
// and answers both, the IPv4 one through a sockaddr_in on its AF_INET6
// socket. Without DualStack, 0.0.0.0 stays IPv4 only.
func TestDualStackSocket(t *testing.T) {
	for _, bind := range []string{"0.0.0.0:0", "[::]:0"} {
		t.Run(bind, func(t *testing.T) {
			fd, err := Socket(netip.MustParseAddrPort(bind), SocketOptions{DualStack: true})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			tv := unix.Timeval{Sec: 2}
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			local, err := LocalAddr(fd)
			if err != nil || local.Addr() != netip.IPv6Unspecified() {
				t.Fatalf("bound to %v (%v), want [::]", local, err)
			}
			rb := NewRecvBatch(4, 0, 1500, 0)
			defer rb.Free()
			for _, src := range []string{"127.0.0.1", "::1"} {
				network := "udp4"
				if src == "::1" {
					network = "udp6"
				}
				c, err := net.ListenUDP(network, &net.UDPAddr{IP: net.ParseIP(src)})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				to := netip.AddrPortFrom(netip.MustParseAddr(src), local.Port())
				if _, err := c.WriteToUDPAddrPort([]byte("ping"), to); err != nil {
					t.Fatal(err)
				}
				n, err := rb.Recv(fd, unix.MSG_WAITFORONE, true)
				if err != nil || n != 1 {
					t.Fatalf("from %s: %d datagrams, %v", src, n, err)
				}
				from := rb.From(0)
				if want := c.LocalAddr().(*net.UDPAddr).AddrPort(); from != want || from.Addr().Is4In6() {
					t.Errorf("source %v, want %v (never IPv4-mapped)", from, want)
				}
				if err := SendTo(fd, []byte("pong"), from); err != nil {
					t.Fatalf("reply to %v: %v", from, err)
				}
				buf := make([]byte, 16)
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, err := c.Read(buf); err != nil || string(buf[:n]) != "pong" {
					t.Errorf("%s: no reply (%q, %v)", src, buf[:n], err)
				}
			}
		})
	}
	fd, err := Socket(netip.MustParseAddrPort("0.0.0.0:0"), SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if local, _ := LocalAddr(fd); !local.Addr().Is4() {
		t.Errorf("0.0.0.0 without DualStack bound to %v, want IPv4", local)
	}
}
