package dataplane

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestCloseWhileRelaying closes a dataplane while clients of a TURN-UDP,
// TURN-TCP and TURN-TLS listener make allocations, relay through an
// echoing peer and end them, so that each call that crosses the listener's
// packages runs while the other side closes: the connection's reader into
// admission (an allocation made or ended), relay workers into the
// listener (WriteToClient, or the UDP listener's sockets), admission's
// shedding into a connection (Abort) as raw connections push in at
// MaxConnections, and the engine closing the listener's allocations. Run
// under -race it also checks that they share no memory unguarded. Each
// iteration is bounded: Close must return within 20 s. (TURN-DTLS has
// TestDTLSCloseWhileRefreshing.)
func TestCloseWhileRelaying(t *testing.T) {
	const clients, iterations = 6, 2
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	for _, proto := range []protocol.Protocol{protocol.TURNUDP, protocol.TURNTCP, protocol.TURNTLS} {
		t.Run(string(proto), func(t *testing.T) {
			for it := 0; it < iterations; it++ {
				cfg := testConfig(t, 28800, 28899)
				lc := cfg.Listeners[0]
				if proto != protocol.TURNUDP {
					lc = config.Listener{Name: "stream", Protocol: proto, Address: "127.0.0.1", Port: freePort(t, "tcp"),
						Routes: []string{"local"}, Cert: cert, Key: key}
					cfg.Listeners = append(cfg.Listeners, lc)
					cfg.Limits.MaxConnections = clients + 2
				}
				srv := startWith(t, cfg)
				peer := startEchoPeer(t, "127.0.0.1")
				var stop atomic.Bool
				var cycles, echoes atomic.Int64
				var wg sync.WaitGroup
				var cls []interface{ Close() }
				for i := 0; i < clients; i++ {
					cl := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
					cls = append(cls, cl)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for !stop.Load() {
							relay, err := cl.Allocate()
							if err != nil {
								return
							}
							if echo(relay, peer.addr(), []byte("close race"), time.Second) {
								echoes.Add(1)
							}
							relay.Close() // Refresh 0
							cycles.Add(1)
						}
					}()
				}
				if proto != protocol.TURNUDP {
					// Connections that never send push in at the cap, so
					// that admission sheds.
					wg.Add(1)
					go func() {
						defer wg.Done()
						var held []net.Conn
						defer func() {
							for _, c := range held {
								c.Close()
							}
						}()
						for !stop.Load() {
							c, err := net.Dial("tcp4", addrOf(lc))
							if err != nil {
								return
							}
							if held = append(held, c); len(held) > 4 {
								held[0].Close()
								held = held[1:]
							}
							time.Sleep(5 * time.Millisecond)
						}
					}()
				}
				time.Sleep(300 * time.Millisecond)
				if proto != protocol.TURNUDP {
					testenv.Eventually(t, 5*time.Second, func() error {
						srv.listenersMu.Lock()
						l := srv.listeners["stream"]
						srv.listenersMu.Unlock()
						if cs, _ := l.ConnStats(); cs.Shed == 0 {
							return fmt.Errorf("no connection shed yet (%+v)", cs)
						}
						return nil
					})
				}
				done := make(chan struct{})
				go func() {
					srv.Close()
					close(done)
				}()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					t.Fatalf("iteration %d: Close did not return within 20 s", it)
				}
				stop.Store(true)
				for _, cl := range cls {
					cl.Close() // a request waiting for the closed server ends
				}
				wg.Wait()
				if cycles.Load() == 0 || echoes.Load() == 0 {
					t.Fatalf("iteration %d: %d allocations made and ended, %d round trips, before Close; want some of each", it, cycles.Load(), echoes.Load())
				}
				t.Logf("iteration %d: %d allocations made and ended, %d round trips", it, cycles.Load(), echoes.Load())
			}
		})
	}
}
