package dataplane

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestTURNTLSBesideHTTPS runs TURN-TLS and HTTPS on one port: a TURN-TLS
// listener whose upstream is an HTTPS server with HTTP/2 and its own
// certificate. The pion client over TLS with ALPN stun.turn (and an SNI
// that is not a TURN name) relays through ternd; curl --http2 fetches the
// upstream's page through the same port over HTTP/2; a ClientHello that
// stalls after a few bytes and one cut short are closed without reaching
// the upstream or the TURN engine.
func TestTURNTLSBesideHTTPS(t *testing.T) {
	curl, err := exec.LookPath("curl")
	testenv.Require(t, "curl (Debian package curl)", err)

	var upstreamConns atomic.Int64
	web := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the upstream over %s\n", r.Proto)
	}))
	web.EnableHTTP2 = true
	web.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			upstreamConns.Add(1)
		}
	}
	web.StartTLS()
	t.Cleanup(web.Close)

	cfg := testConfig(t, 27500, 27519)
	cert, key := writeTestCert(t, t.TempDir(), "turn.example.com")
	lc := config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"),
		Routes: []string{"local"}, Cert: cert, Key: key,
		Upstream: &config.TLSUpstream{Address: web.Listener.Addr().String(), TURNServerNames: []string{"turn.example.com"}, ClientHelloTimeout: 1}}
	cfg.Listeners = append(cfg.Listeners, lc)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv := startWith(t, cfg)
	addr := addrOf(lc)
	routed := func(route string) string {
		return metric(t, cfg, fmt.Sprintf(`tern_listener_tls_routed_total{name="tls",route=%q}`, route))
	}

	// TURN-TLS, routed by ALPN alone.
	tc, err := tls.Dial("tcp4", addr, &tls.Config{ServerName: "www.example.com", NextProtos: []string{"stun.turn"}, InsecureSkipVerify: true}) //nolint:gosec // test certificate
	if err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "turn.example.com" {
		t.Fatalf("the TURN client got the certificate of %q, want ternd's", got)
	}
	pc := turn.NewSTUNConn(tc)
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Username: "user", Password: "pass",
		Realm: cfg.Auth.Realm, Conn: pc, RTO: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); pc.Close() })
	relay, err := cl.Allocate()
	if err != nil {
		t.Fatalf("allocate over TURN-TLS beside HTTPS: %v", err)
	}
	peer := startEchoPeer(t, "127.0.0.1")
	for i := range 10 {
		if !echo(relay, peer.addr(), []byte{byte(i), 1, 2, 3, 4}, 2*time.Second) {
			t.Fatalf("round trip %d through TURN-TLS failed", i)
		}
	}

	// HTTPS through the same port, with the upstream's certificate and HTTP/2.
	_, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(curl, "--http2", "-k", "-sS", "--max-time", "30",
		"--resolve", "www.example.com:"+port+":127.0.0.1", "--write-out", "\n%{http_version}",
		"https://www.example.com:"+port+"/").CombinedOutput()
	if err != nil {
		t.Fatalf("curl through the shared port: %v\n%s", err, out)
	}
	if want := "hello from the upstream over HTTP/2.0\n\n2"; string(out) != want {
		t.Fatalf("curl got %q, want %q", out, want)
	}
	if n := upstreamConns.Load(); n != 1 {
		t.Fatalf("the upstream accepted %d connections after curl's, want 1", n)
	}

	// A ClientHello that stalls after its first bytes, and one cut short:
	// each is closed (within clientHelloTimeout), reaching neither side.
	hello := clientHelloOf(t)
	for _, tc := range []struct {
		name string
		send []byte
		eof  bool
	}{
		{"slow", hello[:3], false},
		{"truncated", hello[:len(hello)/2], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.eof {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			// A generous bound, far past the 1 s deadline: the test
			// asserts that ternd closes the connection, not how fast.
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := c.Read(make([]byte, 64))
			var ne net.Error
			if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("read %d bytes, %v: want the connection closed by ternd", n, err)
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := routed("bad_hello"); got != "2" {
			return fmt.Errorf("bad_hello %s, want 2", got)
		}
		return nil
	})
	if n := upstreamConns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want only curl's", n)
	}
	for route, want := range map[string]string{"turn": "1", "upstream": "1", "upstream_unreachable": "0"} {
		if got := routed(route); got != want {
			t.Errorf("route %s: %s connections, want %s", route, got, want)
		}
	}
	if n := srv.Engine().Allocations(); n != 1 {
		t.Errorf("%d allocations, want the pion client's one", n)
	}
}

// clientHelloOf returns the ClientHello an HTTPS client sends.
func clientHelloOf(t *testing.T) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		_ = tls.Client(c, &tls.Config{ServerName: "www.example.com", NextProtos: []string{"h2"}}).Handshake()
		c.Close()
	}()
	var buf bytes.Buffer
	b := make([]byte, 4096)
	n, err := s.Read(b) // crypto/tls writes its ClientHello in one Write
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	buf.Write(b[:n])
	if !strings.HasPrefix(buf.String(), "\x16\x03") || buf.Len() < 100 {
		t.Fatalf("not a ClientHello: % x", buf.Bytes())
	}
	return buf.Bytes()
}

// TestTLSUpstreamLimitsAndReload: a TURN-TLS listener without an upstream
// terminates every TLS connection itself, as before upstreams existed; an
// upstream added by a reconfiguration applies to the next connection, which
// reaches the upstream byte for byte; a spliced connection holds its
// client address's slot of limits.connectionsPerIP; an upstream that
// refuses connections closes the client's.
func TestTLSUpstreamLimitsAndReload(t *testing.T) {
	// The upstream: a TCP server that records what each connection sends
	// until EOF, then closes it.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				got <- b
			}()
		}
	}()

	cfg := testConfig(t, 27520, 27529)
	cert, key := writeTestCert(t, t.TempDir(), "turn.example.com")
	lc := config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"),
		Routes: []string{"local"}, Cert: cert, Key: key}
	cfg.Listeners = append(cfg.Listeners, lc)
	cfg.Limits.ConnectionsPerIP = 1
	srv := startWith(t, cfg)
	addr := addrOf(lc)
	dialErr := func(src string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp4", addr)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	dial := func(src string) net.Conn {
		c, err := dialErr(src)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// closed reports whether ternd closed c (within a generous bound).
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}

	// No upstream: an HTTPS client gets ternd's own TLS.
	hc := tls.Client(dial("127.0.0.61"), &tls.Config{ServerName: "www.example.com", NextProtos: []string{"h2"}, InsecureSkipVerify: true}) //nolint:gosec // test certificate
	if err := hc.Handshake(); err != nil {
		t.Fatalf("TLS without an upstream: %v", err)
	}
	if cn := hc.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "turn.example.com" {
		t.Fatalf("certificate of %q without an upstream, want ternd's", cn)
	}

	next := cloneConfig(cfg)
	next.Listeners[1].Upstream = &config.TLSUpstream{Address: ln.Addr().String()}
	if err := srv.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	hello := clientHelloOf(t)
	c := dial("127.0.0.62")
	if _, err := c.Write(append(slices.Clone(hello), "and then some"...)); err != nil {
		t.Fatal(err)
	}
	// The spliced connection holds 127.0.0.62's one slot.
	// (The reset may come before the dial returns.)
	if c2, err := dialErr("127.0.0.62"); err == nil && !closed(c2) {
		t.Fatal("a second connection from the address of a spliced one was not closed")
	}
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case b := <-got:
		if !bytes.Equal(b, append(slices.Clone(hello), "and then some"...)) {
			t.Fatalf("the upstream got %d bytes, not the client's %d", len(b), len(hello)+13)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing reached the upstream in 30 s\n%s", scrape(t, cfg))
	}
	if !closed(c) {
		t.Fatal("the spliced connection stayed open after the upstream closed it")
	}
	if got := metric(t, cfg, `tern_listener_connections_refused_total{name="tls",reason="per_ip"}`); got != "1" {
		t.Errorf("per-IP refusals %s, want 1", got)
	}

	// An upstream that refuses: the client's connection is closed.
	ln.Close()
	c = dial("127.0.0.63")
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	if !closed(c) {
		t.Fatal("connection for an unreachable upstream not closed")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := metric(t, cfg, `tern_listener_tls_routed_total{name="tls",route="upstream_unreachable"}`); got != "1" {
			return fmt.Errorf("upstream_unreachable %s, want 1", got)
		}
		return nil
	})
}
