package admin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
)

// bound is how long a read may wait for what must come (a response, the
// server's close) before the test fails: a bound, not a measure of speed.
const bound = 10 * time.Second

var testHandlers = Handlers{Ready: func() bool { return true }, Metrics: func(w io.Writer) { fmt.Fprintln(w, "tern_test_metric 1") }}

// dialFrom connects to addr from the loopback address 127.0.0.<host>.
func dialFrom(t *testing.T, host byte, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, host)}, Timeout: bound}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from 127.0.0.%d: %v", host, err)
	}
	return c
}

// request sends a keep-alive GET of path on c and reads the response; it
// reports whether one came.
func request(c net.Conn, br *bufio.Reader, path string) (int, error) {
	_ = c.SetDeadline(time.Now().Add(bound))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: tern\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// closedByServer reports whether the server closes c (EOF or reset) within
// bound, rather than the read timing out.
func closedByServer(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(bound))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitHeld waits (within bound) until the endpoint holds want connections.
func waitHeld(t *testing.T, ln *limitListener, want int) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		now, _ := ln.held()
		if now == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint holds %d connections, want %d", now, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleKeepAlivesDoNotStay is issue 22's item 2: 3,000 keep-alive
// connections to /metrics, from 375 addresses, each asking once and then
// idle. The endpoint never holds more than its cap (64), each one it takes
// is answered and then closed when idle (a 300 ms idle timeout here; 30 s
// by default), each past the cap is closed as accepted, and in the end it
// holds none.
func TestIdleKeepAlivesDoNotStay(t *testing.T) {
	const n = 3000
	lim := DefaultLimits
	lim.IdleTimeout = 300 * time.Millisecond
	addr := freeAddr(t)
	e, err := StartLimited(config.Admin{HealthAddress: addr, MetricsAddress: addr}, testHandlers, slog.Default(), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ln := e.listeners[0]

	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	clients := make([]client, 0, n)
	defer func() {
		for _, cl := range clients {
			cl.c.Close()
		}
	}()
	for i := range n {
		// 8 connections from each of 127.0.1.0 onwards.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/8/256), byte(i/8%256))}, Timeout: bound}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		_ = c.SetWriteDeadline(time.Now().Add(bound))
		// A refused connection may be closed before this is written.
		_, _ = fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: tern\r\n\r\n")
		clients = append(clients, client{c, bufio.NewReader(c)})
	}
	served := 0
	for i, cl := range clients {
		_ = cl.c.SetReadDeadline(time.Now().Add(bound))
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection %d: neither answered nor closed: %v", i, err)
			}
			continue // closed past the cap
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		served++
		if !closedByServer(cl.c, cl.br) {
			t.Fatalf("connection %d: still open after its idle timeout", i)
		}
	}
	waitHeld(t, ln, 0)
	_, peak := ln.held()
	t.Logf("%d connections: %d answered, the rest closed as accepted; at most %d held at once", n, served, peak)
	if peak > lim.MaxConns {
		t.Errorf("held %d connections at once, cap %d", peak, lim.MaxConns)
	}
	if served == 0 {
		t.Error("no connection answered")
	}
}

// TestConnectionCaps: with long timeouts, so that only the caps act, a
// connection past one address's cap is closed at once while /live still
// answers a new client from another address; past the endpoint's cap,
// every new connection is closed at once, and a freed slot is taken again.
func TestConnectionCaps(t *testing.T) {
	lim := Limits{MaxConns: 16, MaxConnsPerIP: 8, ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: time.Minute}
	addr := freeAddr(t)
	e, err := StartLimited(config.Admin{HealthAddress: addr, MetricsAddress: addr}, testHandlers, slog.Default(), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ln := e.listeners[0]

	hold := func(host byte) []net.Conn {
		var cs []net.Conn
		for range lim.MaxConnsPerIP {
			c := dialFrom(t, host, addr)
			if code, err := request(c, bufio.NewReader(c), "/metrics"); err != nil || code != 200 {
				t.Fatalf("held connection from 127.0.0.%d: %d, %v", host, code, err)
			}
			cs = append(cs, c)
		}
		return cs
	}
	refused := func(host byte) bool {
		c := dialFrom(t, host, addr)
		defer c.Close()
		return closedByServer(c, bufio.NewReader(c))
	}

	a := hold(2)
	defer func() {
		for _, c := range a {
			c.Close()
		}
	}()
	if !refused(2) {
		t.Error("a connection past 127.0.0.2's cap was not closed")
	}
	c := dialFrom(t, 3, addr)
	if code, err := request(c, bufio.NewReader(c), "/live"); err != nil || code != 200 {
		t.Errorf("/live from 127.0.0.3 while 127.0.0.2 holds its cap: %d, %v", code, err)
	}
	c.Close()
	waitHeld(t, ln, lim.MaxConnsPerIP)

	b := hold(3)
	defer func() {
		for _, c := range b {
			c.Close()
		}
	}()
	if !refused(4) {
		t.Error("a connection past the endpoint's cap was not closed")
	}
	a[0].Close()
	waitHeld(t, ln, lim.MaxConns-1)
	c = dialFrom(t, 4, addr)
	defer c.Close()
	if code, err := request(c, bufio.NewReader(c), "/live"); err != nil || code != 200 {
		t.Errorf("/live after a slot was freed: %d, %v", code, err)
	}
}

// TestDefaultLimits: the endpoints' defaults leave the descriptors to the
// TURN listeners: three endpoints (health, metrics, pprof) hold at most
// 3×64, and every timeout is set.
func TestDefaultLimits(t *testing.T) {
	for _, l := range []Limits{DefaultLimits, pprofLimits} {
		if l.MaxConns != 64 || l.MaxConnsPerIP != 8 || l.ReadHeaderTimeout <= 0 || l.ReadTimeout <= 0 || l.WriteTimeout <= 0 || l.IdleTimeout <= 0 {
			t.Errorf("limits %+v", l)
		}
	}
}
