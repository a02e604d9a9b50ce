package dtls

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/dtls/v2"
	"github.com/pion/dtls/v2/pkg/crypto/selfsign"

	"github.com/tern-gw/tern/dataplane/listener/dtls/hello"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/internal/testenv"
)

// testServer is a dtlsMux on 127.0.0.1 whose associations each run
// pion/dtls's server handshake, as Listener.serveConn does: admitted when
// the reader verifies them (admitVerified), closed once the handshake
// ends, held until the client closes a completed one.
type testServer struct {
	m        *dtlsMux
	addr     *net.UDPAddr
	accepted atomic.Int64 // associations made (unverified)
	verified atomic.Int64 // associations admitted at the cookie
	done     atomic.Int64 // handshakes that completed
	// refuse makes admitVerified refuse, as connectionsPerIP would.
	refuse atomic.Bool
	// completed gets each association whose handshake completed.
	completed chan *assoc
}

func startTestServer(t *testing.T) *testServer {
	t.Helper()
	cert, err := selfsign.GenerateSelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	// Room for the floods' windows of datagrams whatever the host's
	// default buffer.
	udpio.SetConnBuffers(uc, 4<<20)
	m, err := newDTLSMux(uc, dtlsBacklog)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{m: m, addr: uc.LocalAddr().(*net.UDPAddr), completed: make(chan *assoc, 16)}
	m.admit = func(*assoc) bool {
		if s.refuse.Load() {
			return false
		}
		s.verified.Add(1)
		return true
	}
	l := &Listener{conf: &dtls.Config{
		Certificates:         []tls.Certificate{cert},
		ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
	}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for a := range m.accept {
			s.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				dc, err := dtls.ServerWithContext(ctx, a, l.assocConfig(a))
				if err == nil {
					s.done.Add(1)
					select {
					case s.completed <- a:
					default:
					}
					// Hold the association until the client closes it.
					_, _ = dc.Read(make([]byte, 1500))
					dc.Close()
				}
				a.ended()
				a.Close()
			}()
		}
	}()
	go m.run()
	t.Cleanup(func() {
		m.close()
		wg.Wait()
	})
	return s
}

// associations is how many associations the reader holds, and how many
// of them are unverified.
func (s *testServer) associations() (all, unverified int) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return len(s.m.m), s.m.unv.Len()
}

// settle waits until the reader has handled n datagrams from addresses
// without an association: each made an association or was dropped.
func (s *testServer) settle(t *testing.T, n int64) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := s.accepted.Load() + int64(s.m.drops.Load()); got < n {
			return fmt.Errorf("%d of %d datagrams handled", got, n)
		}
		return nil
	})
}

// dialMany opens n UDP sockets connected to addr, each its own 5-tuple,
// from source address from (nil: the kernel's choice).
func dialMany(t *testing.T, addr *net.UDPAddr, n int, from net.IP) []*net.UDPConn {
	t.Helper()
	cs := make([]*net.UDPConn, n)
	var laddr *net.UDPAddr
	if from != nil {
		laddr = &net.UDPAddr{IP: from}
	}
	for i := range cs {
		c, err := net.DialUDP("udp", laddr, addr)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

func closeAll(cs []*net.UDPConn) {
	for _, c := range cs {
		c.Close()
	}
}

// TestGarbageFloodKeepsNothing: 20,000 datagrams of 14 bytes starting with
// 22 (a handshake record's type), from 1,000 source ports (issue 22, item
// 4: each used to make an association and four goroutines for 10 s), make
// no association and no goroutine; each is dropped and counted. Paced a
// window at a time, so that no socket buffer overflows.
func TestGarbageFloodKeepsNothing(t *testing.T) {
	const sockets, rounds = 1000, 20
	s := startTestServer(t)
	before := runtime.NumGoroutine()
	conns := dialMany(t, s.addr, sockets, nil)
	defer closeAll(conns)
	maxG := before
	for r := 0; r < rounds; r++ {
		for i, c := range conns {
			garbage := append([]byte{22}, bytes.Repeat([]byte{byte(r + i)}, 13)...)
			if _, err := c.Write(garbage); err != nil {
				t.Fatal(err)
			}
		}
		s.settle(t, int64((r+1)*sockets))
		maxG = max(maxG, runtime.NumGoroutine())
	}
	if a, d := s.accepted.Load(), s.m.drops.Load(); a != 0 || d != sockets*rounds {
		t.Errorf("%d associations made, %d datagrams dropped; want 0 and %d", a, d, sockets*rounds)
	}
	if n, _ := s.associations(); n != 0 {
		t.Errorf("%d associations held", n)
	}
	if maxG > before+5 {
		t.Errorf("goroutines grew from %d to %d during the flood", before, maxG)
	}
	t.Logf("%d datagrams: %d goroutines before, at most %d during", sockets*rounds, before, maxG)
}

// perUnverified bounds the goroutines of one unverified association, as
// measured by TestUnverifiedCost: the listener's handshake goroutine and
// pion's two handshake loops (its flight state machine and its reader);
// one spare for a deadline timer of pion's.
const perUnverified = 4

// TestUnverifiedCost measures what an unverified association costs, the
// figure the cap unverifiedMax is chosen by (docs/security.md), and how
// soon its goroutines end once it is closed: 200 first ClientHellos from
// 200 ports, each answered by pion's HelloVerifyRequest.
func TestUnverifiedCost(t *testing.T) {
	const n = 200
	s := startTestServer(t)
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	before := runtime.NumGoroutine()
	conns := dialMany(t, s.addr, n, nil)
	defer closeAll(conns)
	buf := make([]byte, 2048)
	for i, c := range conns {
		h := hello.Default()
		h.Random = byte(i)
		if _, err := c.Write(hello.AppendClientHello(nil, h)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 { // within the accept backlog
			s.settle(t, int64(i+1))
		}
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("socket %d: no HelloVerifyRequest: %v", i, err)
		}
		if _, ok := hello.ParseHelloVerifyRequest(buf[:m]); !ok {
			t.Fatalf("socket %d: answer % x is no HelloVerifyRequest", i, buf[:m])
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	g := runtime.NumGoroutine() - before
	if _, u := s.associations(); u != n {
		t.Fatalf("%d unverified associations, want %d", u, n)
	}
	perG := float64(g) / n
	perB := (float64(ms1.HeapInuse) - float64(ms0.HeapInuse) + float64(ms1.StackInuse) - float64(ms0.StackInuse)) / n
	t.Logf("an unverified association: %.2f goroutines, %.1f KiB of heap and stack", perG, perB/1024)
	if g > n*perUnverified {
		t.Errorf("%d goroutines for %d unverified associations, more than %d each", g, n, perUnverified)
	}
	// Closing them ends their goroutines at once (pion's reader gets
	// io.EOF and stops the handshake).
	s.m.mu.Lock()
	as := make([]*assoc, 0, n)
	for _, a := range s.m.m {
		as = append(as, a)
	}
	s.m.mu.Unlock()
	start := time.Now()
	for _, a := range as {
		a.Close()
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if g := runtime.NumGoroutine(); g > before+2 {
			return fmt.Errorf("%d goroutines left, %d before", g, before)
		}
		return nil
	})
	t.Logf("their goroutines ended within %v of closing them", time.Since(start).Round(time.Millisecond))
}

// TestHelloFloodBoundsUnverified: 20,000 first ClientHellos without a
// cookie, each from its own source port (a flood from forged sources),
// keep at most unverifiedMax associations open, 2 × unverifiedMax with
// goroutines (closed ones' end in a few milliseconds); the oldest
// unverified is closed for each new one past the cap, never a verified
// one: a pion/dtls client verified before the flood keeps its association,
// and one that starts in the middle of it completes its handshake within
// the next unverifiedMax-1 ClientHellos of the flood. Paced
// by the reader's counts, a window at a time; 1,000 sockets at a time, each
// thousand from its own source address in 127.0.1.0/24.
func TestHelloFloodBoundsUnverified(t *testing.T) {
	const batches, sockets, window = 20, 1000, 100
	s := startTestServer(t)
	before := runtime.NumGoroutine()

	// A client verified and done before the flood, held open.
	held, err := pionClient(s.addr)
	if err != nil {
		t.Fatalf("client before the flood: %v", err)
	}
	defer held.Close()
	heldAssoc := <-s.completed
	base := s.accepted.Load() + int64(s.m.drops.Load())
	baseG := runtime.NumGoroutine()

	client := make(chan error, 1)
	var clientAddr netip.AddrPort // set once the mid-flood client starts
	clientSeen := int64(-1)       // flood ClientHellos sent when its association was first seen
	maxG, maxUnv, maxPending := baseG, 0, 0
	sent := int64(0)
	for b := 0; b < batches; b++ {
		// A source address per batch: a port of a closed batch may come
		// back, and its 5-tuple still have an association.
		conns := dialMany(t, s.addr, sockets, net.IPv4(127, 0, 1, byte(b+1)))
		for i, c := range conns {
			h := hello.Default()
			h.Random, h.RecordSeq = byte(i), uint64(b)
			if _, err := c.Write(hello.AppendClientHello(nil, h)); err != nil {
				t.Fatal(err)
			}
			sent++
			if sent%window != 0 {
				continue
			}
			s.settle(t, base+sent)
			maxG = max(maxG, runtime.NumGoroutine())
			s.m.mu.Lock()
			maxUnv, maxPending = max(maxUnv, s.m.unv.Len()), max(maxPending, s.m.pending)
			a := s.m.m[clientAddr]
			s.m.mu.Unlock()
			// The design lets an unverified association outlive the next
			// unverifiedMax-1 new ones: that, not the machine's speed,
			// is what a client must do its cookie round trip within, so
			// the flood waits at that point for the client to verify.
			if clientAddr.IsValid() && s.verified.Load() < 2 && a != nil {
				if clientSeen < 0 {
					clientSeen = sent
				}
				// It was made at most a window before it was seen, and
				// another window goes out before the next look.
				if sent-clientSeen+2*window >= unverifiedMax {
					testenv.Eventually(t, 30*time.Second, func() error {
						if s.verified.Load() < 2 {
							return fmt.Errorf("the client's association is not verified")
						}
						return nil
					})
				}
			}
		}
		if b == batches/2 {
			raw, err := net.DialUDP("udp", nil, s.addr)
			if err != nil {
				t.Fatal(err)
			}
			clientAddr = raw.LocalAddr().(*net.UDPAddr).AddrPort()
			go func() {
				c, err := pionClientOn(raw)
				if err == nil {
					c.Close()
				}
				client <- err
			}()
		}
		closeAll(conns)
	}
	if err := <-client; err != nil {
		t.Fatalf("a pion/dtls client during the flood: %v", err)
	}
	if maxUnv > unverifiedMax {
		t.Errorf("%d unverified associations, cap %d", maxUnv, unverifiedMax)
	}
	if maxPending > 2*unverifiedMax {
		t.Errorf("%d unverified associations with goroutines, bound %d", maxPending, 2*unverifiedMax)
	}
	if e, d := s.m.evicted.Load(), s.m.drops.Load(); e+d < batches*sockets-unverifiedMax {
		t.Errorf("%d unverified associations evicted and %d ClientHellos dropped, want at least %d together", e, d, batches*sockets-unverifiedMax)
	}
	// Each unverified association with goroutines costs perUnverified
	// of them; the pion client's handshake adds a few on each side.
	const slack = 20
	if bound := baseG + 2*unverifiedMax*perUnverified + slack; maxG > bound {
		t.Errorf("goroutines grew from %d to %d during the flood, bound %d", baseG, maxG, bound)
	}
	select {
	case <-heldAssoc.done:
		t.Error("the flood closed a verified association")
	default:
	}
	s.m.mu.Lock()
	kept := s.m.m[heldAssoc.remote] == heldAssoc
	s.m.mu.Unlock()
	if !kept {
		t.Error("the verified association left the address map")
	}
	if v := s.verified.Load(); v != 2 {
		t.Errorf("%d associations verified, want 2, the pion clients'", v)
	}
	t.Logf("%d ClientHellos: goroutines %d before, %d with one client, at most %d during; at most %d unverified open, %d with goroutines; %d evicted, %d dropped",
		sent, before, baseG, maxG, maxUnv, maxPending, s.m.evicted.Load(), s.m.drops.Load())
}

// pionClient runs a pion/dtls client handshake with addr.
func pionClient(addr *net.UDPAddr) (*dtls.Conn, error) {
	raw, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		return nil, err
	}
	return pionClientOn(raw)
}

// pionClientOn runs a pion/dtls client handshake on the connected socket
// raw, which it closes if the handshake fails.
func pionClientOn(raw *net.UDPConn) (*dtls.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := dtls.ClientWithContext(ctx, raw, &dtls.Config{
		InsecureSkipVerify:   true, //nolint:gosec // the test's self-signed certificate
		ExtendedMasterSecret: dtls.RequireExtendedMasterSecret,
	})
	if err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

// TestHelloCookie: a ClientHello with a cookie from an address with no
// association makes none (pion cannot take a handshake up there); one with
// a wrong cookie on an unverified association is dropped and verifies
// nothing; the cookie of pion's HelloVerifyRequest verifies it, and a
// refused association (over connectionsPerIP) is closed and forgotten.
func TestHelloCookie(t *testing.T) {
	s := startTestServer(t)
	c := dialMany(t, s.addr, 1, nil)[0]
	defer c.Close()
	buf := make([]byte, 2048)
	h := hello.Default()
	h.Extensions = []byte{0x00, 0x17, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x1d}
	withCookie := h
	withCookie.MessageSeq, withCookie.RecordSeq, withCookie.Cookie = 1, 1, bytes.Repeat([]byte{1}, 20)
	if _, err := c.Write(hello.AppendClientHello(nil, withCookie)); err != nil {
		t.Fatal(err)
	}
	s.settle(t, 1)
	if a := s.accepted.Load(); a != 0 {
		t.Fatalf("a ClientHello with a cookie from a new address made %d associations", a)
	}
	first := hello.AppendClientHello(nil, h)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	cookie, ok := hello.ParseHelloVerifyRequest(buf[:n])
	if !ok {
		t.Fatalf("answer % x is no HelloVerifyRequest", buf[:n])
	}
	cookie = bytes.Clone(cookie)
	wrong := withCookie
	wrong.Cookie = append(bytes.Clone(cookie[:len(cookie)-1]), cookie[len(cookie)-1]^0x80)
	drops := s.m.drops.Load()
	if _, err := c.Write(hello.AppendClientHello(nil, wrong)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if s.m.drops.Load() == drops {
			return fmt.Errorf("the wrong cookie not dropped yet")
		}
		return nil
	})
	if _, u := s.associations(); s.verified.Load() != 0 || u != 1 {
		t.Fatalf("a wrong cookie: %d verified, %d unverified; want 0 and 1", s.verified.Load(), u)
	}
	s.refuse.Store(true)
	right := withCookie
	right.Cookie = cookie
	if _, err := c.Write(hello.AppendClientHello(nil, right)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if all, _ := s.associations(); all != 0 {
			return fmt.Errorf("%d associations after the refusal", all)
		}
		return nil
	})
	s.refuse.Store(false)
	cl, err := pionClient(s.addr)
	if err != nil {
		t.Fatalf("a client after the refusal: %v", err)
	}
	cl.Close()
	if v := s.verified.Load(); v != 1 {
		t.Fatalf("%d verified, want 1", v)
	}
}

// TestUnverifiedExpires: an unverified association whose client never
// returns the cookie is closed after unverifiedLifetime, and its
// goroutines end.
func TestUnverifiedExpires(t *testing.T) {
	s := startTestServer(t)
	before := runtime.NumGoroutine()
	c := dialMany(t, s.addr, 1, nil)[0]
	defer c.Close()
	if _, err := c.Write(hello.AppendClientHello(nil, hello.Default())); err != nil {
		t.Fatal(err)
	}
	s.settle(t, 1)
	start := time.Now()
	testenv.Eventually(t, unverifiedLifetime+20*time.Second, func() error {
		if all, _ := s.associations(); all != 0 || s.m.expired.Load() != 1 {
			return fmt.Errorf("%d associations, %d expired", all, s.m.expired.Load())
		}
		return nil
	})
	if d := time.Since(start); d < unverifiedLifetime-time.Second {
		t.Fatalf("closed after %v, before its lifetime %v", d, unverifiedLifetime)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if g := runtime.NumGoroutine(); g > before+2 {
			return fmt.Errorf("%d goroutines, %d before", g, before)
		}
		return nil
	})
}
