package dataplane

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHandoverInProcess hands a server's TURN-UDP allocations to a second
// server in the same process: a successor whose relay config lacks the
// relay addresses fails before it confirms and the first server relays on;
// a successor with the same config takes over, and the allocations relay
// through it while the first reports HandedOver.
func TestHandoverInProcess(t *testing.T) {
	for i, mode := range []string{IOThreads, IOPoller} {
		t.Run(mode, func(t *testing.T) { testHandover(t, mode, 26700+20*i) })
	}
}

func testHandover(t *testing.T, mode string, ports int) {
	cfg := testConfig(t, ports, ports+9)
	sock := filepath.Join(t.TempDir(), "run", "ternd.sock")
	cfg.Admin.HandoverSocket = sock
	opts := Options{UDPThreads: 2, RelayThreads: 2, IOMode: mode, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	old := startOpts(t, cfg, opts)
	if err := old.ServeHandover(sock); err != nil {
		t.Fatal(err)
	}
	peer := startEchoPeer(t, "127.0.0.1")
	var relays []net.PacketConn
	for range 3 {
		c := pionClient(t, cfg, "user", "pass")
		r, err := c.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		relays = append(relays, r)
	}
	relayAll := func(when string) {
		t.Helper()
		for i, r := range relays {
			for k := range 3 {
				if !echo(r, peer.addr(), []byte(when+strings.Repeat("x", k)), 5*time.Second) {
					t.Fatalf("%s: allocation %d did not relay", when, i)
				}
			}
		}
	}
	relayAll("before")

	other := testConfig(t, ports+10, ports+19)
	other.Listeners, other.Admin = cfg.Listeners, cfg.Admin
	if _, err := Takeover(other, opts, sock, nil); err == nil || !strings.Contains(err.Error(), "relay config") {
		t.Fatalf("takeover with other relay ports: %v, want an error naming the relay config", err)
	}
	select {
	case <-old.HandedOver():
		t.Fatal("the old server handed over to a successor that failed")
	default:
	}
	relayAll("after a failed takeover")

	next, err := Takeover(cfg, opts, sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(next.Close)
	select {
	case <-old.HandedOver():
	case <-time.After(10 * time.Second):
		t.Fatal("the old server did not report HandedOver")
	}
	if n := next.Engine().Allocations(); n != len(relays) {
		t.Errorf("the successor has %d allocations, want %d", n, len(relays))
	}
	relayAll("after the takeover")
	if !next.Ready() {
		t.Error("the successor is not ready")
	}
}
