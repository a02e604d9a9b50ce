package dataplane

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/listener/stream"
)

// TestTCPConnectionsShareEventLoops: on Linux, with the event loops on
// (stream.SetEventLoops, the default), TURN-TCP connections, and TURN-TLS
// ones once their handshake is done, are read by them, not by a goroutine
// each, and relay with no heap allocation either way (TLS's count is left
// out under -race, as in TestRelayAllocatesNothing): 64 clients that each hold
// an allocation with a channel, and have relayed through it, add far fewer
// than 64 goroutines to the process; and closing them ends their
// allocations (the loops finish them).
func TestTCPConnectionsShareEventLoops(t *testing.T) {
	for _, tc := range []struct {
		proto  protocol.Protocol
		budget float64
	}{{protocol.TURNTCP, 0}, {protocol.TURNTLS, 0}} {
		t.Run(string(tc.proto), func(t *testing.T) { testStreamsShareEventLoops(t, tc.proto, tc.budget) })
	}
}

func testStreamsShareEventLoops(t *testing.T, proto protocol.Protocol, budget float64) {
	s, lc := startStreamLoops(t, proto, 29830, 29929)
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peerAddr := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	pbuf := make([]byte, 2048)

	warm := dialRaw(t, lc, "user", "pass") // starts the loops
	wrelayed := warm.allocate(0x4001, peerAddr)
	up := channelData(0x4001, []byte("client to peer, 32 bytes of it.."), true)
	down := []byte("peer to client, 32 bytes of it..")
	toPeer := func() {
		warm.write(up)
		_ = peer.SetReadDeadline(time.Now().Add(3 * time.Second))
		if n, from, err := peer.ReadFromUDPAddrPort(pbuf); err != nil || n != 32 || from != wrelayed {
			t.Fatalf("peer got %d bytes from %v (relay %v): %v", n, from, wrelayed, err)
		}
	}
	toClient := func() {
		if _, err := peer.WriteToUDPAddrPort(down, wrelayed); err != nil {
			t.Fatal(err)
		}
		if m := warm.read(); len(m) != 36 {
			t.Fatalf("client got %d bytes, want 36", len(m))
		}
	}
	for range 50 {
		toPeer()
		toClient()
	}
	for _, dir := range []struct {
		name string
		f    func()
	}{{"client to peer", toPeer}, {"peer to client", toClient}} {
		allocs := testing.AllocsPerRun(300, dir.f)
		if raceEnabled && proto == protocol.TURNTLS {
			continue // as in TestRelayAllocatesNothing: pooled buffers are allocated again under -race
		}
		if allocs > budget {
			t.Errorf("%s: %v heap allocations per relayed message on an event loop, want %v at most", dir.name, allocs, budget)
		}
	}
	before := runtime.NumGoroutine()
	const n = 64
	clients := make([]*rawClient, n)
	for i := range clients {
		c := dialRaw(t, lc, "user", "pass")
		relayed := c.allocate(0x4001, peerAddr)
		c.write(channelData(0x4001, []byte("ping"), true))
		_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, from, err := peer.ReadFromUDPAddrPort(pbuf); err != nil || from != relayed {
			t.Fatalf("client %d: peer got a datagram from %v (relay %v): %v", i, from, relayed, err)
		}
		clients[i] = c
	}
	after := runtime.NumGoroutine()
	t.Logf("%d goroutines before %d %s clients, %d after", before, n, proto, after)
	if after-before >= n/4 {
		t.Errorf("%d %s clients added %d goroutines, want fewer than %d: connections are not on the event loops", n, proto, after-before, n/4)
	}
	for _, c := range clients {
		c.conn.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		open := s.StreamConnections()
		if open <= 1 && s.engine.Allocations() <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open 20 s after their clients closed", open)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startStreamLoops starts a dataplane with the event loops on and one
// TURN-TCP or TURN-TLS listener, relay ports first to last, and returns it
// and the listener.
func startStreamLoops(t *testing.T, proto protocol.Protocol, first, last int) (*Server, config.Listener) {
	t.Helper()
	stream.SetEventLoops(true)
	cfg := testConfig(t, first, last)
	lc := config.Listener{Name: "stream", Protocol: proto, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}}
	if proto == protocol.TURNTLS {
		lc.Cert, lc.Key = writeTestCert(t, t.TempDir(), "localhost")
	}
	cfg.Listeners = append(cfg.Listeners, lc)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startWith(t, cfg), lc
}

// TestStreamLoopBursts: a TURN-TCP or TURN-TLS connection on an event
// loop relays every message whatever way it arrives. 120 ChannelData
// messages, half of varied sizes and half of one size (which the loop's
// send batch coalesces into UDP_SEGMENT messages to the peer), are held by
// the client and written at once or in chunks of the sizes below; on TLS,
// one record each, so that crypto/tls holds whole records the socket no
// longer reports, or records cut at odd places across segments. The peer
// must receive all of them, each as it was sent. TLS runs twice: at TLS
// 1.3, whose records ternd seals and opens itself after the handshake
// (stream/tlsrecord), and at TLS 1.2, whose records stay with crypto/tls.
func TestStreamLoopBursts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		proto      protocol.Protocol
		maxVersion uint16
	}{
		{"TURN-TCP", protocol.TURNTCP, 0},
		{"TURN-TLS 1.3", protocol.TURNTLS, tls.VersionTLS13},
		{"TURN-TLS 1.2", protocol.TURNTLS, tls.VersionTLS12},
	} {
		t.Run(tc.name, func(t *testing.T) { testStreamLoopBursts(t, tc.proto, tc.maxVersion) })
	}
}

func testStreamLoopBursts(t *testing.T, proto protocol.Protocol, maxVersion uint16) {
	_, lc := startStreamLoops(t, proto, 29930, 29969)
	for _, chunk := range []int{1 << 20, 61, 1000, 4096} {
		t.Run(fmt.Sprintf("chunks of %d bytes", chunk), func(t *testing.T) {
			peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			_ = peer.SetReadBuffer(1 << 20)
			peerAddr := peer.LocalAddr().(*net.UDPAddr).AddrPort()
			tcp, err := net.Dial("tcp4", addrOf(lc))
			if err != nil {
				t.Fatal(err)
			}
			hc := &holdConn{Conn: tcp}
			var c net.Conn = hc
			if proto == protocol.TURNTLS {
				// A session cache makes the client offer resumption, as
				// browsers and OpenSSL do: a server that answered with a
				// session ticket would have used the keys ternd takes over.
				tc := tls.Client(hc, &tls.Config{InsecureSkipVerify: true, MaxVersion: maxVersion, //nolint:gosec // the test's self-signed certificate
					ClientSessionCache: tls.NewLRUClientSessionCache(1)})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				if v := tc.ConnectionState().Version; v != maxVersion {
					t.Fatalf("negotiated %s, want %s", tls.VersionName(v), tls.VersionName(maxVersion))
				}
				c = tc
			}
			defer c.Close()
			rc := &rawClient{t: t, conn: c, stream: true, buf: make([]byte, 0x10000), user: "user", pass: "pass"}
			rc.r = bufio.NewReader(c)
			relayed := rc.allocate(0x4001, peerAddr)
			const n = 120
			want := map[string]bool{}
			hc.hold(true)
			for i := range n {
				size := 100
				if i < n/2 {
					size = (i * 37) % 700
				}
				p := []byte(fmt.Sprintf("message %03d %s", i, strings.Repeat("x", size)))
				want[string(p)] = true
				rc.write(channelData(0x4001, p, true))
			}
			if err := hc.release(chunk); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 2048)
			for len(want) > 0 {
				_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
				k, from, err := peer.ReadFromUDPAddrPort(b)
				if err != nil {
					t.Fatalf("the peer got %d of %d messages: %v", n-len(want), n, err)
				}
				if from != relayed || !want[string(b[:k])] {
					t.Fatalf("the peer got %q from %v (relay %v)", b[:min(k, 16)], from, relayed)
				}
				delete(want, string(b[:k]))
			}
		})
	}
}

// holdConn is a client's TCP connection that can hold what is written
// (hold) and then write it in chunks of a given size (release), each
// chunk one write(2), a millisecond apart, so that the server reads them
// apart.
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	held bool
	buf  []byte
}

func (h *holdConn) hold(on bool) {
	h.mu.Lock()
	h.held = on
	h.mu.Unlock()
}

func (h *holdConn) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.buf = append(h.buf, b...)
		return len(b), nil
	}
	return h.Conn.Write(b)
}

func (h *holdConn) release(chunk int) error {
	h.mu.Lock()
	buf := h.buf
	h.buf, h.held = nil, false
	h.mu.Unlock()
	for len(buf) > 0 {
		k := min(chunk, len(buf))
		if _, err := h.Conn.Write(buf[:k]); err != nil {
			return err
		}
		buf = buf[k:]
		if len(buf) > 0 && chunk < 1<<20 {
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}
