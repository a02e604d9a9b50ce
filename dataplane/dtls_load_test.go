//go:build linux

package dataplane

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/udpio"
)

// TestDTLSManyAssociationsNoLoss runs many DTLS associations at once over
// one listener, each relaying rounds of back-to-back datagrams through an
// echoing peer, and requires every datagram back: the listener's reader
// and record layer must neither drop nor misroute records when
// associations interleave (issue 14: pion/dtls's own listener lost half).
// It is bounded in packets (associations × rounds × window) and in time
// (each round waits at most 5 s).
func TestDTLSManyAssociationsNoLoss(t *testing.T) {
	const (
		assocs = 32
		rounds = 20
		window = 8 // datagrams in flight per association
	)
	cfg := testConfig(t, 28400, 28499)
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	lc := config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: freePort(t, "udp"),
		Routes: []string{"local"}, Cert: cert, Key: key}
	cfg.Listeners = append(cfg.Listeners, lc)
	startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	// The echo peer takes every association's window at once: give its
	// socket room for them (the default buffer holds about 200).
	if rc, err := peer.conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { udpio.SetBuffers(int(fd), 4<<20) })
	}

	relays := make([]net.PacketConn, assocs)
	for i := range relays {
		cl := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
		relay, err := cl.Allocate()
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		t.Cleanup(func() { relay.Close() })
		// The first datagrams go as Send indications while pion binds a
		// channel; one round trip each before counting.
		if !echo(relay, peer.addr(), []byte{byte(i), 0xff}, 5*time.Second) {
			t.Fatalf("association %d: first round trip failed", i)
		}
		relays[i] = relay
	}

	before := peer.got.Load()
	var lost, wrong atomic.Int64
	var wg sync.WaitGroup
	for i, relay := range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2048)
			for r := 0; r < rounds; r++ {
				for k := 0; k < window; k++ {
					msg := make([]byte, 100)
					binary.BigEndian.PutUint32(msg, uint32(i))
					binary.BigEndian.PutUint32(msg[4:], uint32(r*window+k))
					if _, err := relay.WriteTo(msg, peer.addr()); err != nil {
						lost.Add(int64(window - k))
						return
					}
				}
				got := 0
				_ = relay.SetReadDeadline(time.Now().Add(5 * time.Second))
				for got < window {
					n, _, err := relay.ReadFrom(buf)
					if err != nil {
						break
					}
					if n != 100 || binary.BigEndian.Uint32(buf) != uint32(i) {
						wrong.Add(1)
						continue
					}
					if seq := binary.BigEndian.Uint32(buf[4:]); seq/window == uint32(r) {
						got++
					}
				}
				lost.Add(int64(window - got))
			}
		}()
	}
	wg.Wait()
	if n, w := lost.Load(), wrong.Load(); n != 0 || w != 0 {
		t.Fatalf("%d of %d datagrams lost (%d reached the peer), %d delivered to the wrong association",
			n, assocs*rounds*window, peer.got.Load()-before, w)
	}
}

// TestDTLSCloseWhileRefreshing closes the dataplane while its DTLS
// clients make and end allocations in a loop. The listener's reader holds
// an association's lock while a request calls into admission (an
// allocation made or ended: admission.Set.SetAllocated), so closing
// associations under the connections' lock deadlocked once; a CI run hung
// there for 6 minutes. Each iteration is bounded: Close must return within
// 20 s. (The lock order is in the package docs of listener/dtls and
// listener/core.)
func TestDTLSCloseWhileRefreshing(t *testing.T) {
	const assocs, iterations = 16, 4
	cert, key := writeTestCert(t, t.TempDir(), "tern-test")
	for it := 0; it < iterations; it++ {
		cfg := testConfig(t, 28500, 28599)
		lc := config.Listener{Name: "dtls", Protocol: protocol.TURNDTLS, Address: "127.0.0.1", Port: freePort(t, "udp"),
			Routes: []string{"local"}, Cert: cert, Key: key}
		cfg.Listeners = append(cfg.Listeners, lc)
		srv := startWith(t, cfg)
		var stop atomic.Bool
		var cycles atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < assocs; i++ {
			cl := dialClient(t, lc, cfg.Auth.Realm, "user", "pass")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					relay, err := cl.Allocate()
					if err != nil {
						return
					}
					relay.Close() // Refresh 0
					cycles.Add(1)
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
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
		wg.Wait()
		if cycles.Load() == 0 {
			t.Fatalf("iteration %d: no allocation was made and ended before Close", it)
		}
		t.Logf("iteration %d: %d allocations made and ended", it, cycles.Load())
	}
}
