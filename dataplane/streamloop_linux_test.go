package dataplane

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/listener/stream"
)

// TestTCPConnectionsShareEventLoops: on Linux, with the event loops on
// (stream.SetEventLoops, the default), TURN-TCP connections are read by them, not by a
// goroutine each, and relay with no heap allocation either way:
// 64 clients that each hold an allocation with a channel, and have
// relayed through it, add far fewer than 64 goroutines to the process;
// and closing them ends their allocations (the loops finish them).
func TestTCPConnectionsShareEventLoops(t *testing.T) {
	stream.SetEventLoops(true)
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
		if allocs := testing.AllocsPerRun(300, dir.f); allocs != 0 {
			t.Errorf("%s: %v heap allocations per relayed message on an event loop, want 0", dir.name, allocs)
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
