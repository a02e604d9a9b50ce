package dataplane

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	dtlslistener "github.com/tern-gw/tern/dataplane/listener/dtls"
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
)

// TestTakeoverDTLS hands TURN-DTLS associations and their allocations to a
// successor, beside a TURN-UDP one: real pion/dtls sessions with the
// pion/turn client keep relaying on the channels they bound before, create
// a permission and bind a channel to a new peer on the successor, refresh
// (a Refresh of lifetime 0 deletes the allocation there), and a client's
// close_notify ends its association on the successor, whose record layer
// alone (no pion session) opens and seals their records.
func TestTakeoverDTLS(t *testing.T) {
	const ports = 26800
	cfg := testConfig(t, ports, ports+19)
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1",
		Port: freePort(t, "udp"), Routes: []string{"local"}, Cert: cert, Key: key})
	sock := filepath.Join(t.TempDir(), "run", "ternd.sock")
	cfg.Admin.HandoverSocket = sock
	opts := Options{UDPThreads: 2, RelayThreads: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	old := startOpts(t, cfg, opts)
	if err := old.ServeHandover(sock); err != nil {
		t.Fatal(err)
	}
	peer, peer2 := startEchoPeer(t, "127.0.0.1"), startEchoPeer(t, "127.0.0.1")
	// Two bare DTLS sessions, without allocations, for the close path:
	// one the client ends (its close_notify), one the successor ends.
	// Their records are the test's own (dialRawDTLS, record.NewClient):
	// pion/dtls v2.2.12's Conn.Close ends its reader before it sends
	// close_notify, and that reader closes the socket on its way out, so
	// about one Close in ten under -race sent no alert at all.
	bare := []*rawClient{dialRaw(t, cfg.Listeners[1], "user", "pass"), dialRaw(t, cfg.Listeners[1], "user", "pass")}
	var relays []net.PacketConn
	for i := range 4 {
		lc := cfg.Listeners[1] // DTLS
		if i == 3 {
			lc = cfg.Listeners[0] // and one TURN-UDP allocation
		}
		c := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
		r, err := c.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		relays = append(relays, r)
	}
	relayAll := func(when string, to net.Addr) {
		t.Helper()
		for i, r := range relays {
			for k := range 3 {
				// The first echo to a peer creates its permission, the
				// pion client binds a channel after it.
				if !echo(r, to, []byte(fmt.Sprintf("%s %d", when, k)), 5*time.Second) {
					t.Fatalf("%s: allocation %d did not relay to %s", when, i, to)
				}
			}
		}
	}
	relayAll("before", peer.addr())

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
		t.Fatalf("the successor has %d allocations, want %d", n, len(relays))
	}
	if n := old.Engine().Allocations(); n != 0 {
		t.Errorf("the old server still has %d allocations", n)
	}
	relayAll("after", peer.addr())
	relayAll("new peer after", peer2.addr())

	// A Refresh of lifetime 0 (Close) reaches the successor over the
	// moved association and deletes the allocation there.
	relays[0].Close()
	waitFor(t, func() bool { return next.Engine().Allocations() == len(relays)-1 }, "the refresh of lifetime 0 to delete the allocation")
	relayAll2 := relays[1:]
	for i, r := range relayAll2 {
		if !echo(r, peer2.addr(), []byte("after refresh"), 5*time.Second) {
			t.Fatalf("allocation %d did not relay after another's refresh", i+1)
		}
	}

	// The close path of moved associations: a client's close_notify
	// (opened by the successor's reader) ends its association there, and
	// the successor's own close_notify, sealed with the moved keys and
	// sequence numbers, reaches the other client and opens there.
	dl, _ := next.listeners["dtls"].(*dtlslistener.Listener)
	if dl == nil {
		t.Fatal("the successor has no TURN-DTLS listener")
	}
	active := func() int { cs, _ := dl.ConnStats(); return cs.Active }
	before := active()
	alert, err := bare[0].rec.SealType(nil, record.ContentAlert, record.CloseNotify)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare[0].conn.Write(alert); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return active() == before-1 }, "the client's close_notify to end its association")
	next.Close()
	_ = bare[1].conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 1500)
	n, err := bare[1].conn.Read(b)
	if err != nil {
		t.Fatalf("client Read after the successor closed: %v, want its close_notify", err)
	}
	if p, ok := bare[1].rec.Open(b[:n]); !ok || b[0] != record.ContentAlert || !bytes.Equal(p, record.CloseNotify) {
		t.Errorf("after the successor closed the client got type %d (opens: %v), want a close_notify alert", b[0], ok)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
