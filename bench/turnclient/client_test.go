package turnclient

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/bench/peer"
	"github.com/tern-gw/tern/bench/pionserver"
)

// TestAgainstPion runs the client against an independent TURN server
// (pion/turn) and relays through it both ways, in both data modes.
func TestAgainstPion(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	srv, err := pionserver.Start(pionserver.Config{
		Listen: netip.MustParseAddrPort("127.0.0.1:0"), Threads: 1, RelayIP: lo,
		MinPort: 41000, MaxPort: 41999, Realm: "test", Username: "user", Password: "pass",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	server := srv.Addr()
	echo, err := peer.Start(netip.AddrPortFrom(lo, 0), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()

	for _, tc := range []struct {
		name    string
		channel bool
	}{{"channel", true}, {"send indication", false}} {
		t.Run(tc.name, func(t *testing.T) {
			conn, _ := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			defer conn.Close()
			c := New(conn, server, Credentials{"user", "pass"})
			relayed, err := c.Allocate(0)
			if err != nil {
				t.Fatal(err)
			}
			if relayed.Port() < 41000 || relayed.Port() > 41999 {
				t.Fatalf("relayed %v outside the port range", relayed)
			}
			if c.Realm() != "test" || c.Nonce() == "" {
				t.Fatalf("realm %q nonce %q", c.Realm(), c.Nonce())
			}
			var frame []byte
			payload := []byte("0123456789")
			if tc.channel {
				if err := c.ChannelBind(echo.Addr(), 0x4000); err != nil {
					t.Fatal(err)
				}
				frame = ChannelData(0x4000, payload)
			} else {
				if err := c.CreatePermission(echo.Addr()); err != nil {
					t.Fatal(err)
				}
				var at int
				frame, at, err = SendIndication(echo.Addr(), payload)
				if err != nil || !bytes.Equal(frame[at:at+len(payload)], payload) {
					t.Fatalf("payload offset %d wrong (%v)", at, err)
				}
			}
			if _, err := conn.WriteToUDPAddrPort(frame, server); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 1500)
			n, _, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := Payload(buf[:n]); !ok || !bytes.Equal(got, payload) {
				t.Fatalf("relayed back %q (ok %v)", got, ok)
			}
			if err := c.Refresh(0); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		conn, _ := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		defer conn.Close()
		_, err := New(conn, server, Credentials{"user", "nope"}).Allocate(0)
		var er *ErrorResponse
		// RFC 8489 says 401; pion/turn answers a bad MESSAGE-INTEGRITY with 400.
		if !errors.As(err, &er) || (er.Code != stun.CodeUnauthorized && er.Code != stun.CodeBadRequest) {
			t.Fatalf("err = %v, want an authentication error", err)
		}
	})
}

func TestPayload(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
		ok   bool
	}{
		{"channel data", ChannelData(0x4001, []byte("abc")), "abc", true},
		{"short channel data", []byte{0x40, 0, 0, 9, 'a'}, "", false},
		{"garbage", []byte{1, 2, 3}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Payload(tc.b)
			if ok != tc.ok || string(got) != tc.want {
				t.Fatalf("Payload = %q, %v", got, ok)
			}
		})
	}
}

// TestResends checks the count a benchmark bounds its listener counters
// with: a server that never answers gets every send of the request, and
// Resends is the sends after the first.
func TestResends(t *testing.T) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var got atomic.Int64
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := srv.ReadFromUDP(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := New(conn, netip.MustParseAddrPort(srv.LocalAddr().String()), Credentials{Username: "u", Password: "p"})
	c.Timeout, c.Retries = 5*time.Millisecond, 3
	if _, err := c.Allocate(0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Allocate to a silent server: %v, want ErrTimeout", err)
	}
	if c.Resends != 2 {
		t.Errorf("Resends %d after 3 sends, want 2", c.Resends)
	}
	deadline := time.Now().Add(2 * time.Second)
	for got.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := got.Load(); n != 3 {
		t.Errorf("the server got %d requests, want 3", n)
	}
}
