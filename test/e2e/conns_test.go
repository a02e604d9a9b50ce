package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/internal/testenv"
)

// TestIdleConnections floods ternd's TURN-TCP listener with connections
// that each send one Binding and then stay silent, as an attacker without
// credentials would, from many loopback addresses. It checks that ternd's
// resident memory per connection stays bounded, that connections beyond
// limits.maxConnections shed the oldest idle ones, that a client with
// credentials still allocates and relays over TCP meanwhile, and that the
// idle limit closes them all. TERN_SOAK_CONNS sets the number of
// connections (default 1,000) and TERN_SOAK_IDLE the idle limit in seconds
// (default 3); docs/security.md has the figures of a 10,000-connection run.
func TestIdleConnections(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's connection limits")
	}
	n := envInt(t, "TERN_SOAK_CONNS", 1000)
	if n > 250*400 {
		t.Fatalf("TERN_SOAK_CONNS=%d: at most %d from 127.0.0.2-251", n, 250*400)
	}
	idle := envInt(t, "TERN_SOAK_IDLE", 3)
	const perAddr = 400 // under the default limits.connectionsPerIP
	maxConns := n       // the listener's cap: the flood fills it
	extra := n / 10     // connections beyond the cap, which shed as many
	tcpPort, release := freePort(t, "tcp4")
	release()
	s := startTernd(t, func(c *config) {
		c.Admin.LogLevel = "info"
		c.Listeners = append(c.Listeners, listener{Name: "tcp", Protocol: "TURN-TCP", Address: "127.0.0.1", Port: tcpPort, Routes: []string{"local"}})
		c.Limits.ConnectionIdleTimeout = idle
		c.Limits.MaxConnections = maxConns + 1 // room for the client with credentials
	})
	addr := "127.0.0.1:" + strconv.Itoa(tcpPort)
	before := rssKB(t, s.cmd.Process.Pid)

	start := time.Now()
	conns := flood(t, addr, 0, n, perAddr)
	opened := time.Since(start)
	s.waitMetric(t, `tern_listener_connections{name="tcp"}`, float64(n), 10*time.Second)
	held := rssKB(t, s.cmd.Process.Pid)
	perConn := float64(held-before) * 1024 / float64(n)
	t.Logf("%d idle TCP connections opened in %v: ternd RSS %d -> %d KB, %.0f bytes per connection",
		n, opened.Round(time.Millisecond), before, held, perConn)
	if perConn > 24<<10 {
		t.Errorf("%.0f bytes of RSS per idle connection, want at most %d", perConn, 24<<10)
	}

	// A client with credentials gets in (the spare slot) and relays.
	legit := relayOverTCP(t, addr)

	// Beyond the cap, each new connection sheds the oldest idle one.
	start = time.Now()
	more := flood(t, addr, n, extra, perAddr)
	s.waitMetric(t, `tern_listener_connections_closed_total{name="tcp",reason="shed"}`, float64(extra), 10*time.Second)
	t.Logf("%d more connections at the cap shed %d idle ones in %v", extra, extra, time.Since(start).Round(time.Millisecond))
	lastOpened := time.Now()
	// The shed ones are old ones: none of the newest is closed. (Which of
	// the old ones go first depends on the order eight parallel dialers
	// were accepted in, so it is not checked here; the admission package's
	// tests check oldest-first on a known order.)
	for i, c := range more {
		if closedBy(c, time.Millisecond) {
			t.Fatalf("connection %d of the %d newest was shed", i, extra)
		}
	}
	legit.check(t)

	// Then the idle limit closes every connection without an allocation.
	s.waitMetric(t, `tern_listener_connections{name="tcp"}`, 1, time.Duration(idle+10)*time.Second)
	t.Logf("idle limit %d s: all %d closed %v after the last was opened; ternd RSS %d KB",
		idle, n, time.Since(lastOpened).Round(100*time.Millisecond), rssKB(t, s.cmd.Process.Pid))
	legit.check(t)
	for _, c := range append(conns, more...) {
		c.Close()
	}
}

// flood opens n TCP connections to addr, perAddr from each loopback source
// address starting after the first-th connection's, sends a Binding on each
// and reads its answer. The connections close when the test ends.
func flood(t *testing.T, addr string, first, n, perAddr int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	req := stun.MustBuild(stun.TransactionID, stun.BindingRequest).Raw
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256)
			for i := w; i < n; i += 8 {
				k := first + i
				src := net.IPv4(127, 0, 0, byte(2+k/perAddr))
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp4", addr)
				if err == nil {
					_, err = c.Write(req)
				}
				if err == nil {
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					_, err = io.ReadFull(c, buf[:20])
				}
				if err == nil {
					_, err = io.ReadFull(c, buf[:int(buf[2])<<8|int(buf[3])])
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d from %v: %w", k, src, err)
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return conns
}

// closedBy reports whether the server has closed c, waiting at most d.
func closedBy(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 64))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// tcpRelay is a pion/turn client with an allocation over TURN-TCP, relaying
// to an echo peer.
type tcpRelay struct {
	relay net.PacketConn
	peer  *peer
}

func relayOverTCP(t *testing.T, addr string) *tcpRelay {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Username: testUser,
		Password: testPassword, Realm: testRealm, Conn: turn.NewSTUNConn(c)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); c.Close() })
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := cl.Allocate()
	if err != nil {
		t.Fatalf("Allocate over TCP: %v", err)
	}
	r := &tcpRelay{relay: relay, peer: startEchoPeer(t, "127.0.0.1:0")}
	r.check(t)
	return r
}

// check relays 20 datagrams to the echo peer and back; all must return.
func (r *tcpRelay) check(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1500)
	for i := range 20 {
		msg := []byte("ping " + strconv.Itoa(i))
		if _, err := r.relay.WriteTo(msg, r.peer.addr); err != nil {
			t.Fatal(err)
		}
		_ = r.relay.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, _, err := r.relay.ReadFrom(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("datagram %d over TCP: got %q, %v", i, buf[:n], err)
		}
	}
}

// rssKB is the resident set of process pid, KB (VmRSS).
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	var kb int
	testenv.Eventually(t, time.Second, func() error {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return err
			}
		}
		return fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	})
	return kb
}

// envInt is the integer in environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
