package dataplane

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/dataplane/config"
)

// bigBinding is a Binding request of n bytes in all (n a multiple of 4, at
// least 24), its body one comprehension-optional attribute the server
// ignores.
func bigBinding(n int) []byte {
	m := stun.MustBuild(stun.TransactionID, stun.BindingRequest).Raw
	b := make([]byte, n)
	copy(b, m[:20])
	binary.BigEndian.PutUint16(b[2:4], uint16(n-20))
	binary.BigEndian.PutUint16(b[20:22], 0x8fff) // unknown, comprehension-optional
	binary.BigEndian.PutUint16(b[22:24], uint16(n-24))
	return b
}

// TestHalfSentFrameMemory opens 2,000 TCP connections from four loopback
// addresses, each sending the header of a 65,000-byte Binding request and
// 8 bytes of its body, and bounds what they cost the process: heap and
// goroutine stacks in use, per connection, both ends of each connection
// included (issue 22, item 3: each used to take a 64 KiB frame buffer at
// the header, 134 MB for these 2,000).
func TestHalfSentFrameMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	const n = 2000
	// An idle connection costs under 12 KiB (TestIdleConnMemory); a
	// half-sent frame adds the 4 KiB read buffer its bytes went to.
	const bound = 16 << 10 // bytes per connection
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 2*n+200 {
		lim.Cur = min(lim.Max, 2*n+1000)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		if lim.Cur < 2*n+200 {
			t.Skipf("RLIMIT_NOFILE %d is too low for %d connections", lim.Cur, n)
		}
	}
	cfg := connConfig(t, 27260, 27269, func(l *config.Limits) {
		l.PartialFrameTimeout = 120 // held for the whole measurement
		l.ConnectionIdleTimeout = 120
	})
	startWith(t, cfg)
	lc := listenerNamed(t, cfg, "tcp")
	if c, ok := dialFrom(t, lc, "127.0.0.1"); !ok || !c.binding() { // warm the engine and pools
		t.Fatal("no Binding response")
	}
	before := inUse()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	half := bigBinding(65000)[:28]
	for i := range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.1." + strconv.Itoa(1+i%4))}, Timeout: 3 * time.Second}
		c, err := d.Dial("tcp4", addrOf(lc))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(half); err != nil {
			t.Fatal(err)
		}
	}
	// Each connection's reader has read its bytes long before this: a
	// reader that took a buffer of the declared length would hold it now.
	time.Sleep(1500 * time.Millisecond)
	after := inUse()
	per := (int64(after) - int64(before)) / n
	t.Logf("%d connections with a half-sent 65,000-byte frame: %d bytes each (heap and stacks, both ends)", n, per)
	if per > bound {
		t.Errorf("%d connections with a half-sent frame cost %d bytes each, want at most %d", n, per, bound)
	}
	// Still open: the limits here are far off, and no connection was
	// refused for its address.
	if closed, _ := (&rawClient{conn: conns[n-1]}).closedWithin(100 * time.Millisecond); closed {
		t.Fatal("a connection with a half-sent frame was closed before its limits")
	}
}

// TestPartialFrameTimeout: a TCP or TLS connection that sends the header
// and a few bytes of a frame and then nothing is closed once
// limits.partialFrameTimeout has passed, long before the first-message and
// idle limits, and counted (reason "frame").
func TestPartialFrameTimeout(t *testing.T) {
	cfg := connConfig(t, 27270, 27279, func(l *config.Limits) { l.PartialFrameTimeout = 1 })
	startWith(t, cfg)
	for _, name := range []string{"tcp", "tls"} {
		lc := listenerNamed(t, cfg, name)
		t.Run(name, func(t *testing.T) {
			c, ok := dialFrom(t, lc, "127.0.0.1")
			if !ok || !c.binding() {
				t.Fatal("no Binding response")
			}
			if _, err := c.conn.Write(bigBinding(65000)[:28]); err != nil {
				t.Fatal(err)
			}
			if closed, after := c.closedWithin(6 * time.Second); !closed {
				t.Fatalf("connection with a half-sent frame still open %v later; partial-frame limit 1 s, idle limit 30 s", after)
			} else if after < 500*time.Millisecond {
				t.Errorf("closed %v after the half-sent frame, before the 1 s limit", after)
			}
		})
	}
	if got := metric(t, cfg, `tern_listener_connections_closed_total{name="tcp",reason="frame"}`); got != "1" {
		t.Errorf("connections closed for a half-sent frame on tcp = %s, want 1", got)
	}
}

// TestSlowLargeFrame: a 65,000-byte Binding request sent in 5,000-byte
// pieces, with pauses between them, is answered on TCP and TLS: the
// buffer grows with the bytes, and the partial-frame limit counts from the
// frame's start, not from each piece.
func TestSlowLargeFrame(t *testing.T) {
	cfg := connConfig(t, 27280, 27289, func(l *config.Limits) { l.PartialFrameTimeout = 30 })
	startWith(t, cfg)
	for _, name := range []string{"tcp", "tls"} {
		lc := listenerNamed(t, cfg, name)
		t.Run(name, func(t *testing.T) {
			c, ok := dialFrom(t, lc, "127.0.0.1")
			if !ok {
				t.Fatal("refused")
			}
			msg := bigBinding(65000)
			for p := msg; len(p) > 0; {
				k := min(len(p), 5000)
				if _, err := c.conn.Write(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
				time.Sleep(50 * time.Millisecond)
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			hdr := make([]byte, 20)
			if _, err := io.ReadFull(c.conn, hdr); err != nil {
				t.Fatalf("no answer to the 65,000-byte Binding: %v", err)
			}
			if got := binary.BigEndian.Uint16(hdr[0:2]); got != 0x0101 {
				t.Fatalf("answer type %#04x, want a Binding success response (0x0101)", got)
			}
			if string(hdr[8:20]) != string(msg[8:20]) {
				t.Fatal("answer to another transaction")
			}
		})
	}
}
