package dataplane

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// dtlsPacketConn lets the pion/turn client speak over a DTLS session: each
// record is one TURN message.
type dtlsPacketConn struct{ *dtls.Conn }

func (c dtlsPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.Read(b)
	return n, c.RemoteAddr(), err
}
func (c dtlsPacketConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.Write(b) }

// dialClient returns a pion/turn client over lc's protocol.
func dialClient(t *testing.T, lc config.Listener, realm, user, pass string) *turn.Client {
	t.Helper()
	addr := addrOf(lc)
	var pc net.PacketConn
	switch lc.Protocol {
	case protocol.TURNUDP:
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc = c
	case protocol.TURNTCP:
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		pc = turn.NewSTUNConn(c)
	case protocol.TURNTLS:
		c, err := tls.Dial("tcp4", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test certificate
		if err != nil {
			t.Fatal(err)
		}
		pc = turn.NewSTUNConn(c)
	case protocol.TURNDTLS:
		raddr, _ := net.ResolveUDPAddr("udp4", addr)
		c, err := dtls.Dial("udp4", raddr, &dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec
		if err != nil {
			t.Fatal(err)
		}
		pc = dtlsPacketConn{c}
	}
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Username: user, Password: pass,
		Realm: realm, Conn: pc, RTO: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); pc.Close() })
	return cl
}

func TestStreamAndDTLSListeners(t *testing.T) {
	cfg := testConfig(t, 28000, 28099)
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	tlsPort := freePort(t, "tcp")
	cfg.Listeners = append(cfg.Listeners,
		config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}},
		config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: tlsPort, Routes: []string{"local"}, Cert: cert, Key: key},
		// TLS and DTLS share a port number, as on 5349 (TCP and UDP).
		config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: tlsPort, Routes: []string{"local"}, Cert: cert, Key: key},
	)
	srv := startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	for _, lc := range cfg.Listeners[1:] {
		t.Run(string(lc.Protocol), func(t *testing.T) {
			cl := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
			relay, err := cl.Allocate()
			if err != nil {
				t.Fatalf("allocate: %v", err)
			}
			// Several round trips: the first go as Send/Data indications,
			// later ones over the channel pion binds.
			for i := 0; i < 20; i++ {
				if !echo(relay, peer.addr(), []byte{byte(i), 1, 2, 3, 4}, 2*time.Second) {
					t.Fatalf("round trip %d through %s failed", i, lc.Protocol)
				}
			}
			relay.Close()
		})
	}
	// Closing a connection deletes its allocations.
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := srv.Engine().Allocations(); n != 0 {
			return fmt.Errorf("%d allocations left after every client closed", n)
		}
		return nil
	})
}

func TestBadCertificateFailsOnlyItsListener(t *testing.T) {
	cfg := testConfig(t, 28100, 28199)
	cfg.Listeners = append(cfg.Listeners,
		config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"},
			Cert: "/nonexistent/tls.crt", Key: "/nonexistent/tls.key"})
	srv, err := New(cfg, Options{UDPThreads: 1, RelayThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	err = srv.Start()
	if err == nil || !containsAll(err.Error(), `listener "tls"`, "cert", "/nonexistent/tls.crt") {
		t.Fatalf("start error %v does not name the listener and the file", err)
	}
	if !srv.Ready() {
		t.Fatal("the UDP listener did not start")
	}
	cl := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass")
	if _, err := cl.Allocate(); err != nil {
		t.Fatalf("UDP listener does not serve: %v", err)
	}
}

// TestStalledTCPClientDoesNotBlockOthers opens a TCP connection that sends
// half a message and stops, and shows other clients are served meanwhile.
func TestStalledTCPClientDoesNotBlockOthers(t *testing.T) {
	cfg := testConfig(t, 28200, 28299)
	tcp := config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}}
	cfg.Listeners = append(cfg.Listeners, tcp)
	startWith(t, cfg)
	stalled, err := net.Dial("tcp4", addrOf(tcp))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := stalled.Write([]byte{0x00, 0x03, 0x00, 0x40, 0x21, 0x12}); err != nil { // a header cut short
		t.Fatal(err)
	}
	peer := startEchoPeer(t, "127.0.0.1")
	cl := dialClient(t, tcp, cfg.Auth.Realm, "user", "pass")
	relay, err := cl.Allocate()
	if err != nil {
		t.Fatalf("allocate next to a stalled client: %v", err)
	}
	if !echo(relay, peer.addr(), []byte("through"), 2*time.Second) {
		t.Fatal("relaying stalled behind another client")
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestIOModes relays through each Linux I/O mode (and the portable one
// elsewhere, where both names select it).
func TestIOModes(t *testing.T) {
	for _, mode := range []string{IOPoller, IOThreads} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t, 28500, 28599)
			srv, err := New(cfg, Options{UDPThreads: 2, RelayThreads: 2, IOMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			peer := startEchoPeer(t, "127.0.0.1")
			relay, err := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate()
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20; i++ {
				if !echo(relay, peer.addr(), []byte{byte(i), 9}, 2*time.Second) {
					t.Fatalf("round trip %d failed", i)
				}
			}
			relay.Close()
		})
	}
	if _, err := New(testConfig(t, 28500, 28599), Options{IOMode: "bogus"}); err == nil {
		t.Error("unknown I/O mode accepted")
	}
}
