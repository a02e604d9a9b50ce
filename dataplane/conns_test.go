package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/stun/v2"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// connConfig is testConfig plus a TURN-TCP, a TURN-TLS and a TURN-DTLS
// listener on loopback (TLS and DTLS on one port number), with the limits
// lim sets.
func connConfig(t *testing.T, min, max int, lim func(*config.Limits)) *config.Config {
	t.Helper()
	cfg := testConfig(t, min, max)
	cert, key := writeTestCert(t, t.TempDir(), "localhost")
	tlsPort := freePort(t, "tcp")
	cfg.Listeners = append(cfg.Listeners,
		config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}},
		config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: tlsPort, Routes: []string{"local"}, Cert: cert, Key: key},
		config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: tlsPort, Routes: []string{"local"}, Cert: cert, Key: key},
	)
	if lim != nil {
		lim(&cfg.Limits)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// dialFrom connects to lc (TCP, TLS or DTLS) from the loopback address src
// and returns a raw client for it; ok is false when the server closed the
// connection before it was established (TCP) or during the TLS or DTLS
// handshake.
func dialFrom(t *testing.T, lc config.Listener, src string) (c *rawClient, ok bool) {
	t.Helper()
	dst := netip.MustParseAddrPort(addrOf(lc))
	var conn net.Conn
	switch lc.Protocol {
	case protocol.TURNTCP, protocol.TURNTLS:
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 3 * time.Second}
		tc, err := d.Dial("tcp4", dst.String())
		if err != nil { // a refused connection may be reset before connect returns
			return nil, false
		}
		conn = tc
		if lc.Protocol == protocol.TURNTLS {
			tl := tls.Client(tc, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's self-signed certificate
			_ = tl.SetDeadline(time.Now().Add(3 * time.Second))
			if err := tl.Handshake(); err != nil {
				tc.Close()
				return nil, false
			}
			_ = tl.SetDeadline(time.Time{})
			conn = tl
		}
	case protocol.TURNDTLS:
		uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		dc, err := dtls.ClientWithContext(ctx, &connectedUDP{uc, net.UDPAddrFromAddrPort(dst)},
			&dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec // test certificate
		if err != nil {
			uc.Close()
			return nil, false
		}
		conn = dc
	default:
		t.Fatalf("no client for %s", lc.Protocol)
	}
	t.Cleanup(func() { conn.Close() })
	stream := lc.Protocol != protocol.TURNDTLS
	return &rawClient{t: t, conn: conn, stream: stream, r: bufio.NewReader(conn), buf: make([]byte, 0x10000),
		user: "user", pass: "pass"}, true
}

// connectedUDP is an unconnected UDP socket bound to one source address,
// talking to one server, as pion/dtls wants a net.Conn.
type connectedUDP struct {
	*net.UDPConn
	to *net.UDPAddr
}

func (c *connectedUDP) Read(b []byte) (int, error) {
	for {
		n, from, err := c.ReadFromUDP(b)
		if err != nil || from.AddrPort() == c.to.AddrPort() {
			return n, err
		}
	}
}
func (c *connectedUDP) Write(b []byte) (int, error) { return c.WriteToUDP(b, c.to) }
func (c *connectedUDP) RemoteAddr() net.Addr        { return c.to }

// binding sends a STUN Binding request and reports whether a success
// response came back within 2 s.
func (c *rawClient) binding() bool {
	m := stun.MustBuild(stun.TransactionID, stun.BindingRequest)
	if _, err := c.conn.Write(m.Raw); err != nil {
		return false
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b []byte
	if c.stream {
		hdr, err := c.r.Peek(20)
		if err != nil {
			return false
		}
		b = c.buf[:20+(int(hdr[2])<<8|int(hdr[3]))]
		if _, err := io.ReadFull(c.r, b); err != nil {
			return false
		}
	} else {
		n, err := c.conn.Read(c.buf)
		if err != nil {
			return false
		}
		b = c.buf[:n]
	}
	resp := &stun.Message{Raw: b}
	return resp.Decode() == nil && resp.Type == stun.BindingSuccess
}

// closedWithin reports whether the server closes the connection within d,
// and when.
func (c *rawClient) closedWithin(d time.Duration) (bool, time.Duration) {
	start := time.Now()
	_ = c.conn.SetReadDeadline(start.Add(d))
	buf := make([]byte, 2048)
	for {
		_, err := c.conn.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false, time.Since(start)
		}
		return true, time.Since(start)
	}
}

// refresh sends a signed Refresh and fails the test unless it succeeds: the
// connection and its allocation are alive.
func (c *rawClient) refresh() {
	c.t.Helper()
	c.request(stun.MethodRefresh, stun.RawAttribute{Type: stun.AttrLifetime, Value: []byte{0, 0, 2, 88}})
}

func listenerNamed(t *testing.T, cfg *config.Config, name string) config.Listener {
	t.Helper()
	for _, l := range cfg.Listeners {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no listener %q", name)
	return config.Listener{}
}

// TestUnallocatedConnIdleTimeout: a connection that sent one Binding and
// holds no allocation is closed after limits.connectionIdleTimeout, on
// TCP, TLS and DTLS alike, while one that holds an allocation stays open
// past it.
func TestUnallocatedConnIdleTimeout(t *testing.T) {
	cfg := connConfig(t, 27100, 27149, func(l *config.Limits) { l.ConnectionIdleTimeout = 1 })
	startWith(t, cfg)
	peer := netip.MustParseAddrPort("127.0.0.1:9")
	for _, name := range []string{"tcp", "tls", "dtls"} {
		lc := listenerNamed(t, cfg, name)
		t.Run(name, func(t *testing.T) {
			idle, ok := dialFrom(t, lc, "127.0.0.1")
			if !ok || !idle.binding() {
				t.Fatal("no Binding response")
			}
			held, ok := dialFrom(t, lc, "127.0.0.1")
			if !ok {
				t.Fatal("second connection refused")
			}
			held.allocate(0x4001, peer)
			if closed, after := idle.closedWithin(3 * time.Second); !closed {
				t.Fatalf("connection without an allocation still open %v after its Binding, idle limit 1 s", after)
			} else if after < 500*time.Millisecond {
				t.Errorf("closed %v after its Binding, before the 1 s idle limit", after)
			}
			if closed, _ := held.closedWithin(500 * time.Millisecond); closed {
				t.Fatal("connection with an allocation closed by the short idle limit")
			}
			held.refresh()
		})
	}
}

// TestConnectionsPerIP: the connection above limits.connectionsPerIP from
// one address is closed at once, while another address still connects and
// allocates.
func TestConnectionsPerIP(t *testing.T) {
	const perIP = 3
	cfg := connConfig(t, 27150, 27199, func(l *config.Limits) { l.ConnectionsPerIP = perIP })
	startWith(t, cfg)
	peer := netip.MustParseAddrPort("127.0.0.1:9")
	for i, name := range []string{"tcp", "tls", "dtls"} {
		lc := listenerNamed(t, cfg, name)
		t.Run(name, func(t *testing.T) {
			crowd := "127.0.0." + strconv.Itoa(10+i)
			for k := range perIP {
				if c, ok := dialFrom(t, lc, crowd); !ok || !c.binding() {
					t.Fatalf("connection %d of %d from %s refused", k+1, perIP, crowd)
				}
			}
			if c, ok := dialFrom(t, lc, crowd); ok && c.binding() {
				t.Fatalf("connection %d from %s answered, limit %d per address", perIP+1, crowd, perIP)
			}
			other, ok := dialFrom(t, lc, "127.0.0."+strconv.Itoa(20+i))
			if !ok {
				t.Fatal("another address refused")
			}
			other.allocate(0x4001, peer)
		})
	}
	if got := metric(t, cfg, `tern_listener_connections_refused_total{name="tcp",reason="per_ip"}`); got != "1" {
		t.Errorf("per-IP refusals on tcp = %s, want 1", got)
	}
}

// TestMaxConnections: at limits.maxConnections a new connection closes the
// oldest one that holds no allocation; when every connection holds one,
// the new connection is closed instead.
func TestMaxConnections(t *testing.T) {
	const max = 3
	cfg := connConfig(t, 27200, 27249, func(l *config.Limits) { l.MaxConnections = max })
	startWith(t, cfg)
	peer := netip.MustParseAddrPort("127.0.0.1:9")
	for i, name := range []string{"tcp", "tls", "dtls"} {
		lc := listenerNamed(t, cfg, name)
		t.Run(name, func(t *testing.T) {
			src := func(k int) string { return "127.0.0." + strconv.Itoa(30+10*i+k) }
			a, ok := dialFrom(t, lc, src(0)) // the oldest, with an allocation
			if !ok {
				t.Fatal("refused")
			}
			a.allocate(0x4001, peer)
			b, ok1 := dialFrom(t, lc, src(1))
			c, ok2 := dialFrom(t, lc, src(2))
			if !ok1 || !ok2 || !b.binding() || !c.binding() {
				t.Fatal("connections under the limit refused")
			}
			d, ok := dialFrom(t, lc, src(3))
			if !ok || !d.binding() {
				t.Fatal("connection at the limit refused while unallocated ones could be shed")
			}
			if closed, _ := b.closedWithin(2 * time.Second); !closed {
				t.Fatal("the oldest connection without an allocation was not shed")
			}
			if closed, _ := c.closedWithin(200 * time.Millisecond); closed {
				t.Fatal("a newer connection was shed too")
			}
			a.refresh()
			c.allocate(0x4001, peer)
			d.allocate(0x4001, peer)
			if e, ok := dialFrom(t, lc, src(4)); ok && e.binding() {
				t.Fatal("connection answered while every slot holds an allocation")
			}
			a.refresh()
		})
	}
	if got := metric(t, cfg, `tern_listener_connections_closed_total{name="tcp",reason="shed"}`); got != "1" {
		t.Errorf("shed connections on tcp = %s, want 1", got)
	}
	if got := metric(t, cfg, `tern_listener_connections_refused_total{name="tcp",reason="total"}`); got != "1" {
		t.Errorf("refusals at the total on tcp = %s, want 1", got)
	}
}

// TestIdleConnMemory opens 2,000 TCP connections that each send one Binding
// and then stay silent, and bounds what they cost the process: heap and
// goroutine stacks in use, per connection, both ends of each connection
// (the test's client sockets are in the same process) included.
func TestIdleConnMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	const n = 2000
	const bound = 12 << 10 // bytes per connection
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 2*n+200 {
		lim.Cur = min(lim.Max, 2*n+1000)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		if lim.Cur < 2*n+200 {
			t.Skipf("RLIMIT_NOFILE %d is too low for %d connections", lim.Cur, n)
		}
	}
	cfg := connConfig(t, 27250, 27259, func(l *config.Limits) { l.ConnectionsPerIP = n + 10 })
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
	req := stun.MustBuild(stun.TransactionID, stun.BindingRequest).Raw
	buf := make([]byte, 256)
	for range n {
		c, err := net.Dial("tcp4", addrOf(lc))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.ReadFull(c, buf[:20]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:int(buf[2])<<8|int(buf[3])]); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // longer than a silent connection keeps its read buffer
	after := inUse()
	per := (int64(after) - int64(before)) / n
	t.Logf("%d idle TCP connections: %d bytes each (heap and stacks, both ends)", n, per)
	if per > bound {
		t.Errorf("%d idle TCP connections cost %d bytes each, want at most %d", n, per, bound)
	}
}

// inUse is the heap and goroutine stacks in use after two collections.
func inUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// TestConnLimitsReconfigure: a new limits.connectionsPerIP applies in
// place to new connections; the open ones stay.
func TestConnLimitsReconfigure(t *testing.T) {
	cfg := connConfig(t, 27260, 27269, nil)
	srv := startWith(t, cfg)
	lc := listenerNamed(t, cfg, "tcp")
	var open []*rawClient
	for range 2 {
		c, ok := dialFrom(t, lc, "127.0.0.50")
		if !ok || !c.binding() {
			t.Fatal("refused under the default limits")
		}
		open = append(open, c)
	}
	next := cloneConfig(cfg)
	next.Limits.ConnectionsPerIP = 1
	if err := srv.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	if c, ok := dialFrom(t, lc, "127.0.0.50"); ok && c.binding() {
		t.Fatal("connection over the lowered per-address limit answered")
	}
	for i, c := range open {
		if !c.binding() {
			t.Fatalf("open connection %d closed by the lower limit", i)
		}
	}
}
