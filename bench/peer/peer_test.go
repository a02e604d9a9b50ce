package peer

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
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
			testenv.Eventually(t, time.Second, func() error {
				if p.Packets() != 3 || p.Bytes() != 15 {
					return fmt.Errorf("counted %d packets, %d bytes; want 3, 15", p.Packets(), p.Bytes())
				}
				return nil
			})
			buf := make([]byte, 64)
			if tc.echo {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, _, err := c.ReadFromUDPAddrPort(buf); err != nil || string(buf[:n]) != "hello" {
					t.Fatalf("echo: %q, %v", buf[:n], err)
				}
				return
			}
			// Close returns once the peer's loop has, so a reply the sink sent for the
			// packets it counted would already be queued on c.
			p.Close()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if n, _, err := c.ReadFromUDPAddrPort(buf); err == nil {
				t.Fatalf("sink replied %q", buf[:n])
			}
		})
	}
}
