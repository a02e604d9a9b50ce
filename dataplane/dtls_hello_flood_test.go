package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// floodHello is a DTLS 1.2 ClientHello without a cookie (RFC 6347
// §4.2.1), random and record sequence number from i: what a flood of
// handshakes from forged sources sends.
func floodHello(i int) []byte {
	var body []byte
	body = append(body, 0xfe, 0xfd)
	body = binary.BigEndian.AppendUint32(body, uint32(i))
	body = append(body, make([]byte, 28)...)       // rest of the random
	body = append(body, 0, 0)                      // session_id, cookie
	body = append(body, 0, 2, 0xc0, 0x2b, 1, 0)    // one cipher suite, null compression
	body = append(body, 0, 4, 0x00, 0x17, 0x00, 0) // extended_master_secret
	n := len(body)
	d := []byte{22, 0xfe, 0xff, 0, 0}
	d = binary.BigEndian.AppendUint32(d, 0)
	d = binary.BigEndian.AppendUint16(d, uint16(i))
	d = binary.BigEndian.AppendUint16(d, uint16(12+n))
	d = append(d, 1, 0, byte(n>>8), byte(n), 0, 0, 0, 0, 0, 0, byte(n>>8), byte(n))
	return append(d, body...)
}

// dtlsUnverifiedMax is the listener's cap on open unverified associations
// (package dtls, unverifiedMax); dtlsPerUnverified the goroutines of one
// (dtls.TestUnverifiedCost).
const dtlsUnverifiedMax, dtlsPerUnverified = 256, 4

// TestDTLSAllocateDuringHelloFlood: 20,000 cookieless ClientHellos and
// 20,000 datagrams of 14 bytes starting with 22, each ClientHello from a
// source port of its own (issue 22, item 4: each datagram used to take an
// association and four goroutines for 10 s, up to the listener's cap,
// shedding real handshakes). The garbage is dropped and counted; the
// ClientHellos keep at most dtlsUnverifiedMax associations open and twice
// that with goroutines, and none counts as a connection; a pion/turn
// client allocated before the flood keeps its association and allocation,
// and another does its handshake and allocates during it. The flood is
// paced by the listener's drop counter, a window at a time; while the new
// client's handshake is unverified, it sends fewer than dtlsUnverifiedMax
// ClientHellos (the number a client's cookie round trip must fit in), then
// waits for the handshake.
func TestDTLSAllocateDuringHelloFlood(t *testing.T) {
	const batches, sockets = 20, 1000
	cfg := testConfig(t, 28500, 28599)
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	lc := config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: freePort(t, "udp"),
		Routes: []string{"local"}, Cert: cert, Key: key}
	cfg.Listeners = append(cfg.Listeners, lc)
	startWith(t, cfg)
	raddr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: lc.Port}
	const drops = `tern_dropped_packets_total{reason="unexpected"}`
	base, err := strconv.Atoi(metric(t, cfg, drops))
	if err != nil {
		t.Fatal(err)
	}

	before := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
	held, err := before.Allocate()
	if err != nil {
		t.Fatalf("allocate before the flood: %v", err)
	}
	t.Cleanup(func() { held.Close() })
	baseG := runtime.NumGoroutine()

	type result struct {
		cl    *turn.Client
		relay net.PacketConn
		err   error
	}
	during := make(chan result, 1)
	handshook := make(chan struct{})
	maxG, garbage := baseG, 0
	for b := 0; b < batches; b++ {
		// A source address per batch, so that no 5-tuple comes back.
		src := &net.UDPAddr{IP: net.IPv4(127, 0, 2, byte(b+1))}
		conns := make([]*net.UDPConn, sockets)
		for i := range conns {
			c, err := net.DialUDP("udp4", src, raddr)
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		if b == batches/2 {
			go func() {
				var r result
				defer func() { during <- r }()
				dc, err := dtls.Dial("udp4", raddr, &dtls.Config{InsecureSkipVerify: true, //nolint:gosec // test certificate
					ExtendedMasterSecret: dtls.RequireExtendedMasterSecret})
				close(handshook)
				if r.err = err; err != nil {
					return
				}
				if r.cl, r.err = turn.NewClient(&turn.ClientConfig{STUNServerAddr: addrOf(lc), TURNServerAddr: addrOf(lc),
					Username: "user", Password: "pass", Realm: cfg.Auth.Realm, Conn: dtlsPacketConn{dc},
					RTO: 200 * time.Millisecond}); r.err != nil {
					return
				}
				if r.err = r.cl.Listen(); r.err == nil {
					r.relay, r.err = r.cl.Allocate()
				}
			}()
		}
		const window = 100
		for i, c := range conns {
			if _, err := c.Write(floodHello(b*sockets + i)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(append([]byte{22}, bytes.Repeat([]byte{byte(i)}, 13)...)); err != nil {
				t.Fatal(err)
			}
			garbage++
			if garbage%window != 0 {
				continue
			}
			testenv.Eventually(t, 30*time.Second, func() error {
				if n, _ := strconv.Atoi(metric(t, cfg, drops)); n < base+garbage {
					return fmt.Errorf("%d of %d garbage datagrams dropped", n-base, garbage)
				}
				return nil
			})
			maxG = max(maxG, runtime.NumGoroutine())
			if b == batches/2 && i+window >= dtlsUnverifiedMax-1 {
				select {
				case <-handshook:
				case <-time.After(30 * time.Second):
					t.Fatal("the client's handshake did not end")
				}
			}
		}
		for _, c := range conns {
			c.Close()
		}
	}
	r := <-during
	if r.err != nil {
		t.Fatalf("a pion/turn client over DTLS during the flood: %v", r.err)
	}
	t.Cleanup(func() { r.relay.Close(); r.cl.Close() })
	dropped, _ := strconv.Atoi(metric(t, cfg, drops))
	dropped -= base
	if dropped < batches*sockets {
		t.Errorf("%d datagrams dropped, want at least the %d garbage ones", dropped, batches*sockets)
	}
	// Every ClientHello of the flood but the last dtlsUnverifiedMax made an
	// unverified association closed for a newer one (or past its
	// lifetime), or was dropped.
	closed, _ := strconv.Atoi(metric(t, cfg, `tern_listener_connections_closed_total{name="dtls",reason="unverified"}`))
	if closed+dropped-batches*sockets < batches*sockets-dtlsUnverifiedMax {
		t.Errorf("%d unverified associations closed and %d ClientHellos dropped, want at least %d together",
			closed, dropped-batches*sockets, batches*sockets-dtlsUnverifiedMax)
	}
	if got := metric(t, cfg, `tern_listener_connections{name="dtls"}`); got != "2" {
		t.Errorf("%s DTLS associations counted, want 2: the clients'", got)
	}
	if bound := baseG + 2*dtlsUnverifiedMax*dtlsPerUnverified + 50; maxG > bound {
		t.Errorf("goroutines grew from %d to %d during the flood, bound %d", baseG, maxG, bound)
	}
	// The client from before the flood still holds its association and
	// allocation: a CreatePermission over it succeeds.
	if err := before.CreatePermission(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}); err != nil {
		t.Errorf("the client allocated before the flood: %v", err)
	}
	t.Logf("%d ClientHellos and %d garbage datagrams: goroutines %d before, at most %d during",
		batches*sockets, garbage, baseG, maxG)
}

// TestDTLSPerIPAtCookie: a DTLS association takes its address's share of
// limits.connectionsPerIP as soon as its client returns the cookie of
// pion's HelloVerifyRequest, before the rest of the handshake runs; one
// over the share is closed at once and leaves nothing behind, so the same
// client address and port gets in once the share has room again.
func TestDTLSPerIPAtCookie(t *testing.T) {
	cfg := connConfig(t, 27200, 27249, func(l *config.Limits) { l.ConnectionsPerIP = 1 })
	startWith(t, cfg)
	lc := listenerNamed(t, cfg, "dtls")
	dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addrOf(lc)))
	handshake := func(uc *net.UDPConn) (*dtls.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return dtls.ClientWithContext(ctx, &connectedUDP{uc, dst},
			&dtls.Config{InsecureSkipVerify: true, ExtendedMasterSecret: dtls.RequireExtendedMasterSecret}) //nolint:gosec // test certificate
	}
	listen := func(port int) *net.UDPConn {
		uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 30), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		return uc
	}
	first, err := handshake(listen(0))
	if err != nil {
		t.Fatalf("first association: %v", err)
	}
	second := listen(0)
	port := second.LocalAddr().(*net.UDPAddr).Port
	if c, err := handshake(second); err == nil {
		c.Close()
		t.Fatal("a second association from the address completed its handshake, limit 1")
	}
	second.Close()
	if got := metric(t, cfg, `tern_listener_connections_refused_total{name="dtls",reason="per_ip"}`); got == "0" {
		t.Fatal("no per-address refusal counted")
	}
	if got := metric(t, cfg, `tern_listener_connections{name="dtls"}`); got != "1" {
		t.Fatalf("%s associations, want the first alone", got)
	}
	first.Close()
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := metric(t, cfg, `tern_listener_connections{name="dtls"}`); got != "0" {
			return fmt.Errorf("%s associations after the first closed", got)
		}
		return nil
	})
	again, err := handshake(listen(port))
	if err != nil {
		t.Fatalf("the refused client address and port, once the share has room: %v", err)
	}
	again.Close()
}
