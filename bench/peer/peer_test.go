package peer

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestPeer(t *testing.T) {
	for _, tc := range []struct {
		name string
		echo bool
	}{{"sink", false}, {"echo", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(netip.MustParseAddrPort("127.0.0.1:0"), tc.echo, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := 0; i < 3; i++ {
				if _, err := c.WriteToUDPAddrPort([]byte("hello"), p.Addr()); err != nil {
					t.Fatal(err)
				}
			}
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 64)
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if tc.echo && (err != nil || string(buf[:n]) != "hello") {
				t.Fatalf("echo: %q, %v", buf[:n], err)
			}
			if !tc.echo && err == nil {
				t.Fatalf("sink replied %q", buf[:n])
			}
			for end := time.Now().Add(time.Second); p.Packets() < 3 && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			if p.Packets() != 3 || p.Bytes() != 15 {
				t.Fatalf("counted %d packets, %d bytes; want 3, 15", p.Packets(), p.Bytes())
			}
		})
	}
}
