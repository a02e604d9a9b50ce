package turn

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pion/stun/v2"
)

// pathLog records PathObserver calls and checks their order: a PathDown
// only for a path that is up.
type pathLog struct {
	t      testing.TB
	mu     sync.Mutex
	events []string
	up     map[pathID]PathEvent
}

type pathID struct {
	ft FiveTuple
	ch uint16
}

func newPathLog(t testing.TB) *pathLog { return &pathLog{t: t, up: map[pathID]PathEvent{}} }

func (l *pathLog) PathUp(ev PathEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.FiveTuple.Proto != ProtoUDP || ev.Transport == nil {
		l.t.Errorf("PathUp for %v transport %v", ev.FiveTuple, ev.Transport)
	}
	l.up[pathID{ev.FiveTuple, ev.Channel}] = ev
	l.events = append(l.events, fmt.Sprintf("up %#x %v +%v c%d", ev.Channel, ev.Peer, time.Unix(0, ev.Expires).Sub(t0), ev.Cluster))
}

func (l *pathLog) PathDown(ev PathEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := pathID{ev.FiveTuple, ev.Channel}
	got, ok := l.up[id]
	got.Transport, ev.Transport = nil, nil // a route change may have swapped it
	if !ok || got != ev {
		l.t.Errorf("PathDown %+v: up was %+v (%v)", ev, got, ok)
	}
	delete(l.up, id)
	l.events = append(l.events, fmt.Sprintf("down %#x %v", ev.Channel, ev.Peer))
}

// take returns the events since the last take.
func (l *pathLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.events
	l.events = nil
	return e
}

func (l *pathLog) expect(t *testing.T, stage string, want ...string) {
	t.Helper()
	got := l.take()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: events\n got %q\nwant %q", stage, got, want)
	}
}

// observed is allocated with a PathObserver.
// Allocations may live up to an hour unless maxLifetime says otherwise.
func observed(t *testing.T, ft FiveTuple, maxLifetime ...time.Duration) (*fixture, *client, *Allocation, *pathLog) {
	log := newPathLog(t)
	f := newFixture(t, func(c *Config) {
		c.PathObserver = log
		c.MaxLifetime = time.Hour
		for _, m := range maxLifetime {
			c.MaxLifetime = m
		}
	})
	c := f.client("user", "pass")
	c.ft = ft
	if m := c.do(stun.MethodAllocate, transportUDP()); code(m) != 0 {
		t.Fatalf("allocate: %d", code(m))
	}
	return f, c, f.e.Lookup(ft), log
}

func mustOK(t *testing.T, what string, m *stun.Message) {
	t.Helper()
	if code(m) != 0 {
		t.Fatalf("%s: error %d", what, code(m))
	}
}

// TestPathEventsLifecycle walks one channel through every event source
// on the engine's manual clock: a path is up from ChannelBind until the
// earliest of the binding's, the permission's and the allocation's
// expiry, moves with each refresh, and goes down on every way out.
func TestPathEventsLifecycle(t *testing.T) {
	const peer = "198.51.100.10:9000"
	bind := func(c *client) {
		t.Helper()
		mustOK(t, "ChannelBind", c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr)))
	}
	t.Run("refreshes", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple)
		log.expect(t, "allocate")
		bind(c)
		log.expect(t, "bind", "up 0x4001 "+peer+" +5m0s c1") // permission: 300 s
		f.clock.Advance(100 * time.Second)
		bind(c)
		log.expect(t, "rebind", "up 0x4001 "+peer+" +6m40s c1")
		f.clock.Advance(100 * time.Second)
		mustOK(t, "CreatePermission", c.do(stun.MethodCreatePermission, peerAttr(peerAddr)))
		log.expect(t, "permission", "up 0x4001 "+peer+" +8m20s c1")
		// Another peer's permission moves nothing.
		mustOK(t, "CreatePermission", c.do(stun.MethodCreatePermission, peerAttr(netip.MustParseAddrPort("198.51.100.11:1"))))
		log.expect(t, "other permission")
		// The allocation (600 s from t0) is now the earliest.
		f.clock.Advance(150 * time.Second)
		mustOK(t, "CreatePermission", c.do(stun.MethodCreatePermission, peerAttr(peerAddr)))
		log.expect(t, "permission past the allocation", "up 0x4001 "+peer+" +10m0s c1")
		mustOK(t, "Refresh", c.do(stun.MethodRefresh, lifetimeSetter(3600)))
		log.expect(t, "refresh", "up 0x4001 "+peer+" +10m50s c1") // the permission again
		mustOK(t, "Refresh", c.do(stun.MethodRefresh, lifetimeSetter(0)))
		log.expect(t, "refresh 0", "down 0x4001 "+peer)
	})
	t.Run("permission expires", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple)
		bind(c)
		f.clock.Advance(200 * time.Second)
		mustOK(t, "Refresh", c.do(stun.MethodRefresh, lifetimeSetter(600)))
		log.take()
		f.clock.Advance(100 * time.Second) // t0+300: the permission has expired, the binding has not
		f.e.Sweep()
		log.expect(t, "sweep", "down 0x4001 "+peer)
		f.e.Sweep()
		log.expect(t, "second sweep")
		mustOK(t, "CreatePermission", c.do(stun.MethodCreatePermission, peerAttr(peerAddr)))
		log.expect(t, "permission again", "up 0x4001 "+peer+" +10m0s c1") // the binding: t0+600
	})
	t.Run("channel expires", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple)
		bind(c)
		mustOK(t, "Refresh", c.do(stun.MethodRefresh, lifetimeSetter(3600)))
		for range 3 {
			f.clock.Advance(150 * time.Second)
			mustOK(t, "CreatePermission", c.do(stun.MethodCreatePermission, peerAttr(peerAddr)))
		}
		log.expect(t, "permissions", "up 0x4001 "+peer+" +5m0s c1", "up 0x4001 "+peer+" +7m30s c1", "up 0x4001 "+peer+" +10m0s c1") // then unchanged
		f.clock.Advance(151 * time.Second)
		f.e.Sweep() // t0+601: the binding expired at t0+600
		log.expect(t, "sweep", "down 0x4001 "+peer)
	})
	t.Run("allocation expires", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple, time.Minute)
		bind(c)
		log.expect(t, "bind", "up 0x4001 "+peer+" +1m0s c1")
		f.clock.Advance(61 * time.Second)
		if n := f.e.Sweep(); n != 1 {
			t.Fatalf("swept %d", n)
		}
		log.expect(t, "sweep", "down 0x4001 "+peer)
	})
	t.Run("route change", func(t *testing.T) {
		f, c, a, log := observed(t, clientTuple)
		bind(c)
		log.take()
		a.Transport = fixedCluster(7)
		f.e.Revalidate()
		log.expect(t, "refiled", "up 0x4001 "+peer+" +5m0s c7")
		f.e.Revalidate()
		log.expect(t, "unchanged")
		a.Transport = denyAll{}
		f.e.Revalidate()
		log.expect(t, "revoked", "down 0x4001 "+peer)
	})
	t.Run("close transport", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple)
		bind(c)
		log.take()
		if n := f.e.CloseTransport(testListener{}, "listener removed"); n != 1 {
			t.Fatalf("closed %d", n)
		}
		log.expect(t, "closed", "down 0x4001 "+peer)
	})
	t.Run("forget transport", func(t *testing.T) {
		// A hand-over: the relay goes to detach before the allocation is
		// deleted, and the path goes down like any deletion.
		f, c, a, log := observed(t, clientTuple)
		bind(c)
		log.take()
		var detached []Relay
		if n := f.e.ForgetTransport(testListener{}, func(r Relay) { detached = append(detached, r) }); n != 1 {
			t.Fatalf("forgot %d", n)
		}
		if len(detached) != 1 || detached[0] != a.relay {
			t.Errorf("detached %v, want the allocation's relay", detached)
		}
		log.expect(t, "forgotten", "down 0x4001 "+peer)
		if f.e.Allocations() != 0 {
			t.Errorf("%d allocations left", f.e.Allocations())
		}
	})
	t.Run("close", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple)
		bind(c)
		mustOK(t, "ChannelBind", c.do(stun.MethodChannelBind, channelNumber(0x4002), peerAttr(netip.MustParseAddrPort("198.51.100.200:5000"))))
		log.take()
		f.e.SetDraining(true) // draining keeps relaying
		f.e.Sweep()
		log.expect(t, "draining")
		f.e.Close()
		got := log.take()
		if len(got) != 2 || len(log.up) != 0 {
			t.Errorf("close: %q, still up %v", got, log.up)
		}
	})
	t.Run("rebinding an expired number", func(t *testing.T) {
		f, c, _, log := observed(t, clientTuple)
		bind(c)
		mustOK(t, "Refresh", c.do(stun.MethodRefresh, lifetimeSetter(3600)))
		f.clock.Advance(601 * time.Second) // binding gone, not swept
		log.take()
		other := netip.MustParseAddrPort("198.51.100.12:9")
		mustOK(t, "ChannelBind", c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(other)))
		log.expect(t, "rebound", "down 0x4001 "+peer, "up 0x4001 198.51.100.12:9 +15m1s c1")
	})
}

// TestPathEventsOnlyPlainUDP: allocations over DTLS (encrypted), TCP and
// TLS (streams) are never reported.
func TestPathEventsOnlyPlainUDP(t *testing.T) {
	for _, p := range []Proto{ProtoDTLS, ProtoTCP, ProtoTLS} {
		t.Run(p.String(), func(t *testing.T) {
			ft := clientTuple
			ft.Proto = p
			f, c, _, log := observed(t, ft)
			mustOK(t, "ChannelBind", c.do(stun.MethodChannelBind, channelNumber(0x4001), peerAttr(peerAddr)))
			f.e.Close()
			log.expect(t, p.String())
		})
	}
}

// TestPathEventsRaceDelete: ChannelBinds racing with Refresh 0 and
// Sweep never leave a path up after its allocation is gone (run with
// -race).
func TestPathEventsRaceDelete(t *testing.T) {
	for i := range 50 {
		ft := clientTuple
		ft.Client = netip.AddrPortFrom(ft.Client.Addr(), uint16(40000+i))
		f, c, _, log := observed(t, ft)
		var wg sync.WaitGroup
		for n := range 4 {
			wg.Go(func() {
				c2 := *c
				c2.do(stun.MethodChannelBind, channelNumber(0x4001+uint16(n)), peerAttr(netip.AddrPortFrom(peerAddr.Addr(), uint16(9000+n))))
			})
		}
		wg.Go(func() {
			if i%2 == 0 {
				c2 := *c
				c2.do(stun.MethodRefresh, lifetimeSetter(0))
			} else {
				f.clock.Advance(601 * time.Second)
				f.e.Sweep()
			}
		})
		wg.Wait()
		f.e.Close()
		log.mu.Lock()
		if len(log.up) != 0 {
			t.Errorf("round %d: paths still up after delete: %v", i, log.up)
		}
		log.mu.Unlock()
	}
}
