package dataplane

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestInterleavedPeerFlows: a peer sends to many relays round robin, one
// datagram at a time, so that a relay worker's wake-up finds several relay
// sockets ready, each with one datagram, and sends what they yield in one
// batch. Every datagram reaches its own client, and the listener's tx
// counter grows by exactly what was delivered, with the workers waking for
// each datagram and with them lingering (--linger). pion's client binds
// its channel in the background after its first Send indication, and may
// send a request again under load: a request that reaches the listener
// after the counters are first read adds one to rx and its answer one to
// tx, so what tx grew by beyond rx is what was delivered.
func TestInterleavedPeerFlows(t *testing.T) {
	for _, linger := range []time.Duration{0, 200 * time.Microsecond} {
		t.Run(fmt.Sprint("linger=", linger), func(t *testing.T) {
			cfg := testConfig(t, 28700, 28799)
			srv, err := New(cfg, Options{UDPThreads: 2, RelayThreads: 1, GSO: true, Linger: linger,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			const clients, rounds = 12, 25
			relays := make([]net.PacketConn, clients)
			for i := range relays {
				if relays[i], err = dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate(); err != nil {
					t.Fatal(err)
				}
				defer relays[i].Close()
			}
			// Each client writes to the peer first: that installs the
			// permission and tells the peer its relayed address.
			addrs := make([]net.Addr, clients)
			buf := make([]byte, 2048)
			for i, r := range relays {
				if _, err := r.WriteTo([]byte("hello"), peer.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, from, err := peer.ReadFrom(buf)
				if err != nil {
					t.Fatalf("hello %d: %v", i, err)
				}
				addrs[i] = from
			}
			// The hellos are counted just after they leave: wait for
			// them, so that the peer's datagrams alone move the counters.
			testenv.Eventually(t, 2*time.Second, func() error {
				if v, _ := value(families(t, cfg), "stunner_cluster_packets_total", "direction=tx,name=local"); v != clients {
					return fmt.Errorf("%v hellos counted, want %d", v, clients)
				}
				return nil
			})
			tx0, rx0 := listenerPackets(t, cfg)
			var (
				wg  sync.WaitGroup
				got = make([]int, clients)
			)
			for i, r := range relays {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := make([]byte, 2048)
					_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
					for got[i] < rounds {
						n, _, err := r.ReadFrom(b)
						if err != nil {
							return
						}
						if string(b[:n]) != fmt.Sprint("to ", i) {
							t.Errorf("client %d got %q", i, b[:n])
						}
						got[i]++
					}
				}()
			}
			for range rounds {
				for i, a := range addrs {
					if _, err := peer.WriteTo([]byte(fmt.Sprint("to ", i)), a); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(time.Millisecond) // a small socket buffer at the clients
			}
			wg.Wait()
			for i, n := range got {
				if n != rounds {
					t.Errorf("client %d received %d of %d", i, n, rounds)
				}
			}
			testenv.Eventually(t, 2*time.Second, func() error {
				tx, rx := listenerPackets(t, cfg)
				if d := (tx - tx0) - (rx - rx0); d != clients*rounds {
					return fmt.Errorf("listener tx grew by %v beyond rx (%v), want %d", d, rx-rx0, clients*rounds)
				}
				return nil
			})
		})
	}
}

// listenerPackets returns the UDP listener's tx and rx packet counters.
func listenerPackets(t *testing.T, cfg *config.Config) (tx, rx float64) {
	f := families(t, cfg)
	tx, _ = value(f, "stunner_listener_packets_total", "direction=tx,name=udp")
	rx, _ = value(f, "stunner_listener_packets_total", "direction=rx,name=udp")
	return tx, rx
}
