package udpio

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAnswerFromDestination: a socket on a wildcard address learns each
// datagram's destination (SetPacketInfo, RecvDest, To), and answers sent
// with AddFrom leave from it, so a client that connect()ed its socket to
// that address takes them; with and without GSO, on a dual-stack socket
// and on an IPv4 one. 127.0.0.2 is the destination because the route back
// to a client on 127.0.0.1 picks 127.0.0.1 as the source: the last case
// shows that a plain Add is dropped by such a client, which is what the
// others guard against.
func TestAnswerFromDestination(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bind      netip.AddrPort
		dual      bool
		client    string // the client's address and the server address it connects to
		server    string
		gso       bool
		plainAdd  bool
		wantTaken bool
	}{
		{name: "dual-stack, IPv4 client", bind: netip.MustParseAddrPort("0.0.0.0:0"), dual: true, client: "127.0.0.1", server: "127.0.0.2", wantTaken: true},
		{name: "dual-stack, IPv4 client, GSO", bind: netip.MustParseAddrPort("0.0.0.0:0"), dual: true, client: "127.0.0.1", server: "127.0.0.2", gso: true, wantTaken: true},
		{name: "dual-stack, IPv6 client", bind: netip.MustParseAddrPort("[::]:0"), dual: true, client: "::1", server: "::1", wantTaken: true},
		{name: "dual-stack, IPv6 client, GSO", bind: netip.MustParseAddrPort("[::]:0"), dual: true, client: "::1", server: "::1", gso: true, wantTaken: true},
		{name: "IPv4 socket", bind: netip.MustParseAddrPort("0.0.0.0:0"), client: "127.0.0.1", server: "127.0.0.2", wantTaken: true},
		{name: "plain Add is dropped", bind: netip.MustParseAddrPort("0.0.0.0:0"), dual: true, client: "127.0.0.1", server: "127.0.0.2", plainAdd: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.gso && !GSOSupported() {
				t.Skip("no UDP GSO in this kernel")
			}
			fd, err := Socket(tc.bind, SocketOptions{DualStack: tc.dual, PacketInfo: true})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			local, err := LocalAddr(fd)
			if err != nil {
				t.Fatal(err)
			}
			to := netip.AddrPortFrom(netip.MustParseAddr(tc.server), local.Port())
			client, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(tc.client)}, net.UDPAddrFromAddrPort(to))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if _, err := client.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			rb := NewRecvBatch(4, 0, 1500, 0)
			defer rb.Free()
			rb.RecvDest()
			tv := unix.Timeval{Sec: 5}
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			n, err := rb.Recv(fd, unix.MSG_WAITFORONE, true)
			if err != nil || n != 1 {
				t.Fatalf("recvmmsg: %d, %v", n, err)
			}
			if got := rb.To(0); got != to.Addr() {
				t.Fatalf("destination %v, want %v", got, to.Addr())
			}
			from := rb.From(0)
			sb := NewSendBatch(4, tc.gso)
			const answers = 3
			for i := range answers {
				p := bytes.Repeat([]byte{byte('a' + i)}, 100)
				if tc.plainAdd {
					sb.Add(fd, p, from)
				} else {
					sb.AddFrom(fd, p, from, rb.To(0))
				}
			}
			if sent, _ := sb.Flush(); sent != answers {
				t.Fatalf("sent %d of %d", sent, answers)
			}
			buf := make([]byte, 2048)
			got := 0
			for got < answers {
				// Long enough for loopback by far; an answer from the wrong
				// source never arrives at all.
				_ = client.SetReadDeadline(time.Now().Add(time.Second))
				k, err := client.Read(buf)
				if err != nil {
					break
				}
				if k != 100 || buf[0] != byte('a'+got) {
					t.Fatalf("answer %d: %d bytes starting %q", got, k, buf[0])
				}
				got++
			}
			if tc.wantTaken && got != answers {
				t.Errorf("the connected client took %d of %d answers", got, answers)
			}
			if !tc.wantTaken && got != 0 {
				t.Errorf("the connected client took %d answers sent from the route's source; the test cannot tell", got)
			}
			// The slot is reused by a plain Add: no stale source.
			sb.Add(fd, []byte("x"), from)
			if sb.srcs[0].IsValid() || sb.hdrs[0].Hdr.Control != nil {
				t.Errorf("Add after AddFrom keeps source %v", sb.srcs[0])
			}
		})
	}
}

// TestToWithoutPacketInfo: a batch that was not asked for destinations, or
// a message without control data, reports none.
func TestToWithoutPacketInfo(t *testing.T) {
	rb := NewRecvBatch(2, 0, 100, 0)
	defer rb.Free()
	if got := rb.To(0); got.IsValid() {
		t.Errorf("To without RecvDest = %v", got)
	}
	rb.RecvDest()
	rb.hdrs[0].Hdr.SetControllen(0)
	if got := rb.To(0); got.IsValid() {
		t.Errorf("To of a message without control = %v", got)
	}
	// A truncated or nonsense header is ignored, not read past.
	rb.hdrs[1].Hdr.SetControllen(pktinfoSpace)
	for i := range pktinfoSpace {
		rb.rctl[pktinfoSpace+i] = 0xff
	}
	if got := rb.To(1); got.IsValid() {
		t.Errorf("To of garbage control = %v", got)
	}
}
