package dataplane

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
)

// TestTCPConnectionsShareEventLoops: on Linux, TURN-TCP connections are
// read by the listener package's event loops, not by a goroutine each:
// 64 clients that each hold an allocation with a channel, and have
// relayed through it, add far fewer than 64 goroutines to the process;
// and closing them ends their allocations (the loops finish them).
func TestTCPConnectionsShareEventLoops(t *testing.T) {
	cfg := testConfig(t, 29830, 29929)
	lc := config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}}
	cfg.Listeners = append(cfg.Listeners, lc)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startWith(t, cfg)
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peerAddr := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	pbuf := make([]byte, 2048)

	warm := dialRaw(t, lc, "user", "pass") // starts the loops
	warm.allocate(0x4001, peerAddr)
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
	t.Logf("%d goroutines before %d TCP clients, %d after", before, n, after)
	if after-before >= n/4 {
		t.Errorf("%d TCP clients added %d goroutines, want fewer than %d: connections are not on the event loops", n, after-before, n/4)
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
