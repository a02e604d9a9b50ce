package dataplane

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/turn"
)

// listenerSum folds the counters of srv's listener name.
func listenerSum(t *testing.T, srv *Server, name string) stats.Sum {
	t.Helper()
	srv.listenersMu.Lock()
	l := srv.listeners[name]
	srv.listenersMu.Unlock()
	if l == nil {
		t.Fatalf("no listener %q", name)
	}
	var sum stats.Sum
	l.FoldStats(&sum)
	return sum
}

// TestDeliveryCountsPerTransport sends, over each transport, packets that
// the engine answers (Allocate), forwards (a Send indication) and drops
// (ChannelData on a channel never bound), and checks that the listener
// counted each as the one delivery step (listener/core.Deliver) does:
// replies as sent to the client, the forward as sent to the peer, the drop
// under its reason.
func TestDeliveryCountsPerTransport(t *testing.T) {
	cfg := testConfig(t, 28700, 28799)
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	cfg.Listeners = append(cfg.Listeners,
		config.Listener{Name: "tcp", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}},
		config.Listener{Name: "tls", Protocol: protocol.TURNTLS, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}, Cert: cert, Key: key},
		config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: freePort(t, "udp"), Routes: []string{"local"}, Cert: cert, Key: key},
	)
	srv := startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	// ChannelData on channel 0x4FFF, which the client never binds; 4
	// payload bytes, so that no stream padding is needed.
	unbound := binary.BigEndian.AppendUint16(nil, 0x4FFF)
	unbound = binary.BigEndian.AppendUint16(unbound, 4)
	unbound = append(unbound, 1, 2, 3, 4)
	for _, lc := range cfg.Listeners {
		t.Run(string(lc.Protocol), func(t *testing.T) {
			cl := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
			relay, err := cl.Allocate()
			if err != nil {
				t.Fatalf("allocate: %v", err)
			}
			defer relay.Close()
			// Replied: the 401 and the Allocate success at least (counted
			// just after they were written, so perhaps after the client
			// read them).
			testenv.Eventually(t, 5*time.Second, func() error {
				if s := listenerSum(t, srv, lc.Name); s.Tx < 2 || s.PeerTx != 0 {
					return fmt.Errorf("after Allocate: %d sent to the client, %d to peers; want >= 2 and 0", s.Tx, s.PeerTx)
				}
				return nil
			})
			// Forwarded: one Send indication (after its CreatePermission).
			payload := []byte("delivered once")
			if !echo(relay, peer.addr(), payload, 5*time.Second) {
				t.Fatal("no round trip through the peer")
			}
			// Dropped: the engine refuses the unbound channel.
			raddr, _ := net.ResolveUDPAddr("udp4", addrOf(lc))
			if _, err := cl.WriteTo(unbound, raddr); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 5*time.Second, func() error {
				s := listenerSum(t, srv, lc.Name)
				if s.PeerTx != 1 || s.PeerTxBytes != uint64(len(payload)) || s.Drops[turn.DropNoChannel] != 1 {
					return fmt.Errorf("%d packets (%d bytes) sent to peers, %d dropped on an unbound channel; want 1 (%d bytes) and 1",
						s.PeerTx, s.PeerTxBytes, s.Drops[turn.DropNoChannel], len(payload))
				}
				return nil
			})
		})
	}
}
