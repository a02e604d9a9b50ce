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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config"
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
	lc := config.Listener{Name: "tls", Protocol: config.ProtoTURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"),
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
