package dataplane

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/turn/v4"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/internal/testenv"
)

// flow keeps one allocation relaying through an echo peer and records the
// longest time without an echo.
type flow struct {
	relay   net.PacketConn
	peer    *net.UDPAddr
	stop    chan struct{}
	done    chan struct{}
	echoes  atomic.Int64
	lastOK  atomic.Int64 // unix ns of the last echo
	longest atomic.Int64 // longest gap seen, ns
}

func startFlow(t *testing.T, relay net.PacketConn, peer *net.UDPAddr) *flow {
	f := &flow{relay: relay, peer: peer, stop: make(chan struct{}), done: make(chan struct{})}
	f.lastOK.Store(time.Now().UnixNano())
	go func() {
		buf := make([]byte, 1500)
		for {
			_ = relay.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, err := relay.ReadFrom(buf); err == nil {
				now := time.Now().UnixNano()
				if gap := now - f.lastOK.Swap(now); gap > f.longest.Load() {
					f.longest.Store(gap)
				}
				f.echoes.Add(1)
			}
			select {
			case <-f.done:
				return
			default:
			}
		}
	}()
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				close(f.done)
				return
			case <-tick.C:
				_, _ = relay.WriteTo([]byte("media"), peer)
			}
		}
	}()
	t.Cleanup(f.halt)
	return f
}

func (f *flow) halt() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
		<-f.done
	}
}

// alive asserts echoes kept coming: a few more since the last check, and
// no gap longer than a few ticks.
func (f *flow) alive(t *testing.T, step string, since int64) int64 {
	t.Helper()
	var n int64
	testenv.Eventually(t, 2*time.Second, func() error {
		if n = f.echoes.Load(); n < since+3 {
			return fmt.Errorf("%s: listener A stopped relaying (%d echoes, %d before)", step, n, since)
		}
		return nil
	})
	if gap := time.Duration(f.longest.Load()); gap > 500*time.Millisecond {
		t.Fatalf("%s: listener A's relaying stalled for %v", step, gap)
	}
	return n
}

func cloneConfig(c *config.Config) *config.Config {
	n := *c
	n.Listeners = append([]config.Listener(nil), c.Listeners...)
	n.Clusters = append([]config.Cluster(nil), c.Clusters...)
	return &n
}

func TestReconfigureKeepsOtherListenersRelaying(t *testing.T) {
	cfg := testConfig(t, 28300, 28399)
	srv := startWith(t, cfg)
	peer := startEchoPeer(t, "127.0.0.1")
	a := cfg.Listeners[0]
	relay, err := dialClient(t, a, cfg.Auth.Realm, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	f := startFlow(t, relay, peer.addr())
	seen := f.alive(t, "before any change", 0)

	apply := func(step string, c *config.Config) {
		t.Helper()
		if err := srv.Reconfigure(c); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		seen = f.alive(t, step, seen)
		cfg = c
	}

	// Add listener B.
	next := cloneConfig(cfg)
	b := config.Listener{Name: "b", Protocol: protocol.TURNTCP, Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}}
	next.Listeners = append(next.Listeners, b)
	apply("add B", next)
	if _, err := dialClient(t, b, cfg.Auth.Realm, "user", "pass").Allocate(); err != nil {
		t.Fatalf("B does not serve after being added: %v", err)
	}

	// Change B's port: B restarts on the new port, A goes on.
	next = cloneConfig(cfg)
	oldB := b
	b.Port = freePort(t, "tcp")
	next.Listeners[1] = b
	apply("change B's port", next)
	if _, err := dialClient(t, b, cfg.Auth.Realm, "user", "pass").Allocate(); err != nil {
		t.Fatalf("B does not serve on its new port: %v", err)
	}
	if c, err := net.DialTimeout("tcp4", addrOf(oldB), time.Second); err == nil {
		c.Close()
		t.Fatal("B still listens on its old port")
	}

	// Routes: a cluster for 127.0.0.2 opens that peer to A's clients; taking
	// it away closes it again.
	other := startEchoPeer(t, "127.0.0.2")
	next = cloneConfig(cfg)
	next.Clusters = append(next.Clusters, config.Cluster{Name: "two", Endpoints: []string{"127.0.0.2/32"}})
	next.Listeners[0].Routes = []string{"local", "two"}
	apply("add a route", next)
	probe, err := dialClient(t, a, cfg.Auth.Realm, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if !echo(probe, other.addr(), []byte("to two"), 2*time.Second) {
		t.Fatal("peer 127.0.0.2 unreachable after its route was added")
	}
	next = cloneConfig(cfg)
	next.Listeners[0].Routes = []string{"local"}
	next.Clusters = next.Clusters[:1]
	apply("remove the route", next)
	before := other.got.Load()
	if echo(probe, other.addr(), []byte("to two again"), 500*time.Millisecond) || other.got.Load() != before {
		t.Fatal("peer 127.0.0.2 still reachable after its route was removed")
	}

	// Credentials change in place: the new password works, the old one no
	// longer allocates, A's allocation stays.
	next = cloneConfig(cfg)
	next.Auth.Password = "new-pass"
	apply("change the password", next)
	if _, err := dialClient(t, a, cfg.Auth.Realm, "user", "pass").Allocate(); err == nil {
		t.Fatal("the old password still allocates")
	}
	if _, err := dialClient(t, a, cfg.Auth.Realm, "user", "new-pass").Allocate(); err != nil {
		t.Fatalf("the new password does not allocate: %v", err)
	}

	// An invalid config is rejected, naming the field; everything runs on.
	bad := cloneConfig(cfg)
	bad.Listeners[1].Port = 70000
	if err := srv.Reconfigure(bad); err == nil || !strings.Contains(err.Error(), "listeners[1].port") {
		t.Fatalf("invalid config: %v, want an error naming listeners[1].port", err)
	}
	seen = f.alive(t, "after the invalid config", seen)
	if srv.Config() != cfg {
		t.Fatal("the running config was replaced by an invalid one")
	}

	// Remove B: A goes on.
	next = cloneConfig(cfg)
	next.Listeners = next.Listeners[:1]
	apply("remove B", next)
	if c, err := net.DialTimeout("tcp4", addrOf(b), time.Second); err == nil {
		c.Close()
		t.Fatal("B still listens after being removed")
	}

	// A realm change restarts every listener: A's allocation is gone.
	allocs := srv.Engine().Allocations()
	next = cloneConfig(cfg)
	next.Auth.Realm = "other.realm"
	if err := srv.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	if n := srv.Engine().Allocations(); n != 0 {
		t.Fatalf("realm change left %d of %d allocations", n, allocs)
	}
	f.halt()
	if _, err := dialClient(t, a, "other.realm", "user", "new-pass").Allocate(); err != nil {
		t.Fatalf("A does not serve after the realm change: %v", err)
	}
}

func TestDrain(t *testing.T) {
	srv, cfg := startServer(t, 28400, 28499)
	peer := startEchoPeer(t, "127.0.0.1")
	relay, err := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate()
	if err != nil {
		t.Fatal(err)
	}
	f := startFlow(t, relay, peer.addr())
	seen := f.alive(t, "before drain", 0)
	srv.Drain()
	if srv.Ready() {
		t.Fatal("ready while draining")
	}
	if _, err := dialClient(t, cfg.Listeners[0], cfg.Auth.Realm, "user", "pass").Allocate(); err == nil || !strings.Contains(err.Error(), "508") {
		t.Fatalf("new allocation while draining: %v, want 508", err)
	}
	f.alive(t, "while draining", seen)
}

// TestReconfigureUnderLoad applies changes that restart every listener (a
// realm change, a relay change), restart one (a port change), add and
// remove one and move /metrics, while clients allocate over TURN-UDP and
// TURN-TCP and /metrics is scraped. Under -race it checks the server's
// locking across restarts. Listeners must open and close their sockets
// without the server lock mu held: nothing else takes mu in this test (no
// credential files, no STRICT_DNS clusters), so the hook's TryLock fails
// only if Reconfigure holds it. After each change every listener of the
// config serves an allocation.
func TestReconfigureUnderLoad(t *testing.T) {
	cfg := testConfig(t, 27000, 27049)
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "tcp", Protocol: protocol.TURNTCP,
		Address: "127.0.0.1", Port: freePort(t, "tcp"), Routes: []string{"local"}})
	srv := startWith(t, cfg)
	var locked, calls atomic.Int32
	srv.listenerHook = func() {
		calls.Add(1)
		if !srv.mu.TryLock() {
			locked.Add(1)
			return
		}
		srv.mu.Unlock()
	}

	// Load: allocations over UDP and TCP, and scrapes of /metrics, until
	// stop. Their errors are expected while listeners restart and are not
	// counted; what matters is that nothing races or deadlocks.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var current atomic.Pointer[config.Config]
	current.Store(cfg)
	allocate := func(proto protocol.Protocol) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c := current.Load()
			for _, lc := range c.Listeners {
				if lc.Protocol == proto {
					_ = tryAllocate(lc, c.Auth.Realm)
				}
			}
		}
	}
	wg.Add(3)
	go allocate(protocol.TURNUDP)
	go allocate(protocol.TURNTCP)
	go func() {
		defer wg.Done()
		hc := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := hc.Get("http://" + current.Load().Admin.MetricsAddress + "/metrics"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	steps := []struct {
		name   string
		change func(*config.Config)
	}{
		{"realm", func(c *config.Config) { c.Auth.Realm = "other.example" }},
		{"tcp port", func(c *config.Config) { c.Listeners[1].Port = freePort(t, "tcp") }},
		{"add udp2", func(c *config.Config) {
			c.Listeners = append(c.Listeners, config.Listener{Name: "udp2", Protocol: protocol.TURNUDP,
				Address: "127.0.0.1", Port: freePort(t, "udp"), Routes: []string{"local"}})
		}},
		{"remove udp2", func(c *config.Config) { c.Listeners = c.Listeners[:2] }},
		{"relay", func(c *config.Config) { c.Relay.MinPort, c.Relay.MaxPort = 27050, 27099 }},
		{"metrics address", func(c *config.Config) { c.Admin.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", freePort(t, "tcp")) }},
	}
	for _, st := range steps {
		next := cloneConfig(current.Load())
		st.change(next)
		if err := srv.Reconfigure(next); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		current.Store(next)
		for _, lc := range next.Listeners {
			if err := tryAllocate(lc, next.Auth.Realm); err != nil {
				t.Fatalf("%s: listener %s does not allocate: %v", st.name, lc.Name, err)
			}
		}
	}
	if n := locked.Load(); n > 0 {
		t.Errorf("%d of %d listener starts and stops ran with the server lock held", n, calls.Load())
	}
	if calls.Load() == 0 {
		t.Error("no listener started or stopped")
	}
	if !strings.Contains(scrape(t, current.Load()), "stunner_listener_packets_total") {
		t.Error("/metrics at the new address serves no TURN metrics")
	}
}

// tryAllocate allocates once through lc (TURN-UDP or TURN-TCP) with the
// test credentials and releases the allocation. Unlike dialClient it
// returns every error, for use off the test's goroutine.
func tryAllocate(lc config.Listener, realm string) error {
	addr := addrOf(lc)
	var pc net.PacketConn
	switch lc.Protocol {
	case protocol.TURNUDP:
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		pc = c
	case protocol.TURNTCP:
		c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
		if err != nil {
			return err
		}
		pc = turn.NewSTUNConn(c)
	default:
		return fmt.Errorf("protocol %s", lc.Protocol)
	}
	defer pc.Close()
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Username: "user", Password: "pass",
		Realm: realm, Conn: pc, RTO: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.Listen(); err != nil {
		return err
	}
	relay, err := cl.Allocate()
	if err != nil {
		return err
	}
	return relay.Close()
}
