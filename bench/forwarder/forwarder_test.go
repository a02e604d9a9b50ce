package forwarder

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/tern-gw/tern/bench/peer"
	"github.com/tern-gw/tern/internal/testenv"
)

func TestControlRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"bind", Control(OpBind, netip.MustParseAddrPort("127.0.0.5:4000")), true},
		{"unbind", Control(OpUnbind, netip.AddrPort{}), true},
		{"data", []byte("hello world"), false},
		{"bad op", append([]byte("TFWDX"), 0, 0, 0, 0, 0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, addr, ok := ParseControl(tc.b)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && op == OpBind && addr != netip.MustParseAddrPort("127.0.0.5:4000") {
				t.Fatalf("addr = %v", addr)
			}
		})
	}
}

// TestForwardsBothWays runs each way of waiting for listener packets.
func TestForwardsBothWays(t *testing.T) {
	for _, poller := range []bool{false, true} {
		name := "blocking"
		if poller {
			name = "poller"
		}
		t.Run(name, func(t *testing.T) { testForwardsBothWays(t, poller) })
	}
}

func testForwardsBothWays(t *testing.T, poller bool) {
	lo := netip.MustParseAddr("127.0.0.1")
	echo, err := peer.Start(netip.AddrPortFrom(lo, 0), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	f, err := Start(Config{Listen: netip.AddrPortFrom(lo, 0), RelayIP: lo, Poller: poller})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, _ := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)

	if _, err := c.WriteToUDPAddrPort(Control(OpBind, echo.Addr()), f.Addr()); err != nil {
		t.Fatal(err)
	}
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if op, relay, ok := ParseControl(buf[:n]); !ok || op != OpBind || relay.Port() == 0 {
		t.Fatalf("bind reply %q", buf[:n])
	}
	if _, err := c.WriteToUDPAddrPort([]byte("ping"), f.Addr()); err != nil {
		t.Fatal(err)
	}
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "ping" || from != f.Addr() {
		t.Fatalf("echo through forwarder: %q from %v, %v", buf[:n], from, err)
	}
	if _, err := c.WriteToUDPAddrPort(Control(OpUnbind, netip.AddrPort{}), f.Addr()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Second, func() error {
		if n := f.Relays(); n != 0 {
			return fmt.Errorf("%d relays after unbind", n)
		}
		return nil
	})
}
